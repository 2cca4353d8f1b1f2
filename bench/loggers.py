"""What streaming to tracking tools costs: the same stacked sweep (the default `-m` path) with
`logger=none`, `logger=tensorboard`, `logger=mlflow` and both, side by side, interleaved,
`--repeats` times each; the wall time of each command (a fresh process, as a user runs it) and
its ratio to `logger=none`'s median.

    python bench/loggers.py [--repeats 3] [--iterations 2000] [--seeds 2] [--data-root DIR]
                            [--experiment smoke] [--loggers tensorboard,mlflow] [OVERRIDE ...]

By default each command trains experiment=smoke (net1 and net2 x SGD and Adam x `--seeds`
seeds, in 2 stacks, on 2,000 training images; a train-metric row every 5 steps: more rows per
second than any study streams) into a fresh sweep folder; further Hydra overrides are added to
every command (train.log_every=10 train.eval_every=500: the zoo's cadence, a row every 10 steps
and an evaluation every 500). `--experiment ''` trains the default config instead (all of
MNIST, the zoo's cadence) with the sweep the overrides give: `--experiment '' model=net2
optimizer=sgd,momentum,...` is a slice of a zoo phase 1, its trials of 2,000 iterations.
Each logger has a working directory of its own, kept across its repeats, as a user's is: the
local MLflow store (`mlflow.db`) is made by a first, untimed sweep, whose extra time over
`logger=none`'s is printed apart as the one-off cost of a new store.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.storage import read_runs

LOGGERS = {
    "none": "logger=none",
    "tensorboard": "logger=tensorboard",
    "mlflow": "logger=mlflow",
    "both": "logger=[tensorboard,mlflow]",
}


def once(choice: str, args: argparse.Namespace, work: Path, sweep: str) -> float:
    """The wall time of one `harness-train -m experiment=smoke` with logger `choice`, run in
    `work` (its MLflow store there) into the fresh folder `sweep`."""
    command = [
        sys.executable, "-c", "from harness.cli import train; train()", "-m",
        *([f"experiment={args.experiment}"] if args.experiment else []),
        f"train.iterations={args.iterations}",
        f"data.root={args.data_root}", f"seed=range({args.seeds})",
        f"hydra.sweep.dir={work / sweep}", LOGGERS[choice], *args.overrides,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    tic = time.perf_counter()
    subprocess.run(command, cwd=work, env=env, check=True, capture_output=True)
    return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=2, help="seeds per net and optimizer")
    parser.add_argument(
        "--experiment", default="smoke", help="the preset each command trains ('': none)"
    )
    parser.add_argument("--loggers", default=",".join(LOGGERS), help="of " + ", ".join(LOGGERS))
    parser.add_argument("--data-root", default=os.environ.get("HARNESS_DATA_ROOT", "data"))
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every command")
    args = parser.parse_args()
    chosen = ["none", *(n for n in args.loggers.split(",") if n != "none")]
    with tempfile.TemporaryDirectory() as root:
        works = {name: Path(root) / name for name in chosen}
        first = {}
        for name, work in works.items():  # the first sweep of each: a new store where it has one
            work.mkdir()
            first[name] = once(name, args, work, "first")
        times: dict[str, list[float]] = {name: [] for name in chosen}
        for repeat in range(args.repeats):
            for name, work in works.items():
                times[name].append(once(name, args, work, f"sweep{repeat}"))
        runs = len(read_runs(works["none"] / "first"))
    base = statistics.median(times["none"])
    print(
        f"experiment={args.experiment} {' '.join(args.overrides)}, {runs} runs, "
        f"train.iterations={args.iterations}, {args.repeats} repeats"
    )
    print("| logger | median wall s | ratio to none | all | first sweep (new store) |")
    print("|---|---|---|---|---|")
    for name, found in times.items():
        median = statistics.median(found)
        shown = ", ".join(f"{t:.1f}" for t in found)
        extra = first[name] - first["none"]
        print(f"| {name} | {median:.1f} | {median / base:.3f} | {shown} | {extra:+.1f} s |")


if __name__ == "__main__":
    main()
