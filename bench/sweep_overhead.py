"""What a sweep costs beyond its training, per run, as the sweep grows.

    python bench/sweep_overhead.py                        # 10, 100 and 1,000 runs, both engines
    python bench/sweep_overhead.py --single-max 100       # the single engine up to 100 runs only
    python bench/sweep_overhead.py --before 1630134       # the default command, before and now

Sweeps of tiny runs (net1, 20 iterations, 1,000 training and 1,000 test images; SGD and Adam
at N/2 learning rates) run as a user runs them, whole `harness-train -m` processes, side by side:
with the default command and with `train.engine=single`. For each it prints the wall time, the
compute time (the optimisation time of the runs: the sum of their train_time_s, or for runs
trained as one stack the stack's time, counted once) and the overhead per run: (wall - compute)
/ runs. Sweeps are written under a temporary folder. With --before REV the default command
also runs with the harness of revision REV (a temporary git worktree), alternating with this
one, so the two are timed side by side. Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import contextlib
import os

from sweeps import DEFAULT_ROOT, run_sweep, worktree

TINY_RUN = [
    "model=net1",
    "train.iterations=20",
    "train.eval_every=20",
    "data.train_size=1000",
    "data.test_size=1000",
]


def sweep(runs: int) -> list[str]:
    """Overrides of a sweep of `runs` runs: SGD and Adam, each at runs/2 learning rates."""
    rates = ",".join(f"{0.001 * (1 + i / runs):.6g}" for i in range(runs // 2))
    return [*TINY_RUN, "optimizer=sgd,adam", f"optimizer.lr={rates}"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10,100,1000", help="runs per sweep")
    parser.add_argument(
        "--single-max",
        type=int,
        default=1000,
        help="largest sweep also run with train.engine=single (default 1000: all)",
    )
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    parser.add_argument("--before", help="also time the default command at this git revision")
    args = parser.parse_args()
    with worktree(args.before) if args.before else contextlib.nullcontext() as before:
        table(args, before)


def table(args: argparse.Namespace, before) -> None:  # noqa: ANN001 - a Path or None
    print(f"# Sweep overhead: tiny runs ({' '.join(TINY_RUN)}), {os.cpu_count()} cores")
    print("\n| runs | command | wall (s) | compute (s) | overhead / run (ms) |")
    print("|---:|---|---:|---:|---:|")
    for runs in map(int, args.sizes.split(",")):
        arms = [("default", None, None), ("train.engine=single", "single", None)]
        if before is not None:
            arms.insert(0, (f"default, at {args.before}", None, before))
        for label, engine, code in arms:
            if engine == "single" and runs > args.single_max:
                print(f"| {runs} | {label} | skipped (--single-max {args.single_max}) | | |")
                continue
            engine_override = [f"train.engine={engine}"] if engine else []
            overrides = [*sweep(runs), *engine_override]
            wall, compute, finished = run_sweep(overrides, args.data_root, code)
            assert finished == runs, f"{finished} of {runs} runs finished"
            overhead_ms = (wall - compute) / runs * 1000
            print(
                f"| {runs} | {label} | {wall:.1f} | {compute:.1f} | {overhead_ms:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
