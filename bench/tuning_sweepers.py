"""Tuning studies through the default stacked launcher: runs per second of the tuning sweeper's
random search and of Hydra's Optuna sweeper (TPE, in batches and one trial at a time), against
the basic sweeper's grid of the same budget, whole processes, side by side.

    python bench/tuning_sweepers.py                 # net1 x adam, 8 trials x 1,000 steps
    python bench/tuning_sweepers.py --trials 16 --repeats 5

Each study runs as a user runs it (`harness-train -m ...` into a temporary folder), the three
interleaved `--repeats` times (so they see the same machine load); it prints median wall times,
runs per second, and each against the grid. The grid and random search hand the launcher all
trials at once (one stack); TPE asks `--batch` trials at a time (one stack per batch), since
each batch waits for the results of the last; with one trial a batch nothing stacks. Data root:
--data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import os
import statistics

import numpy as np
from sweeps import DEFAULT_ROOT, run_sweep

# The same problem and length for all three: net1 with Adam on 10,000 training images.
COMMON = [
    "model=net1",
    "optimizer=adam",
    "data.train_size=10000",
    "data.val_size=5000",
    "data.test_size=2000",
    "train.iterations=1000",
    "train.eval_every=250",
    "train.eval_train_size=2000",
]


def studies(trials: int, batch: int) -> dict[str, list[str]]:
    grid = ",".join(f"{lr:.4g}" for lr in np.geomspace(1e-4, 3.0, trials))

    def tpe(n_jobs: int) -> list[str]:
        return [
            "experiment=tune_tpe",
            *COMMON,
            f"tune.budget={trials}",
            f"hydra.sweeper.n_jobs={n_jobs}",
            f"hydra.sweeper.sampler.n_startup_trials={batch}",
        ]

    return {
        "basic sweeper, grid": [*COMMON, f"optimizer.lr={grid}"],
        "hydra/sweeper=tune, random search": [
            "experiment=course_tune",
            *COMMON,
            f"tune.budget={trials}",
        ],
        f"Optuna sweeper, TPE ({batch} trials a batch)": tpe(batch),
        # What batching buys: one trial at a time, nothing to stack.
        "Optuna sweeper, TPE (1 trial a batch)": tpe(1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=8, help="the budget of each (default 8)")
    parser.add_argument("--batch", type=int, default=4, help="TPE's trials a batch (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="medians of this many (default 3)")
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    args = parser.parse_args()
    runs = studies(args.trials, args.batch)
    walls: dict[str, list[float]] = {label: [] for label in runs}
    finished: dict[str, int] = {}
    for _ in range(args.repeats):  # interleaved: all see the same machine load
        for label, overrides in runs.items():
            wall, _, n = run_sweep(overrides, args.data_root)
            walls[label].append(wall)
            finished[label] = n
    print(
        f"# Tuning studies, {args.trials} trials of net1 x adam x 1,000 steps, whole processes, "
        f"{os.cpu_count()} cores, medians of {args.repeats}"
    )
    print("\n| study | runs | wall (s) | runs / s | vs the grid |")
    print("|---|---:|---:|---:|---:|")
    grid = statistics.median(next(iter(walls.values())))
    for label, times in walls.items():
        wall = statistics.median(times)
        rate = finished[label] / wall
        print(f"| {label} | {finished[label]} | {wall:.1f} | {rate:.2f} | {grid / wall:.2f}x |")


if __name__ == "__main__":
    main()
