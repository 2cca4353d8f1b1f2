"""What streaming to tracking tools costs: the same stacked sweep (the default `-m` path) with
`logger=none`, `logger=tensorboard`, `logger=mlflow` and both, side by side, interleaved,
`--repeats` times each; the wall time of each command (a fresh process, as a user runs it) and
its ratio to `logger=none`'s median.

    python bench/loggers.py [--repeats 3] [--iterations 100] [--data-root DIR]

Each command trains experiment=smoke (8 runs, 2 stacks) into a fresh folder, in a fresh working
directory (a fresh local MLflow store: its tables' creation included, as a first sweep pays).
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

LOGGERS = {
    "none": "logger=none",
    "tensorboard": "logger=tensorboard",
    "mlflow": "logger=mlflow",
    "both": "logger=[tensorboard,mlflow]",
}


def once(choice: str, iterations: int, data_root: str) -> float:
    with tempfile.TemporaryDirectory() as work:
        command = [
            sys.executable, "-c", "from harness.cli import train; train()", "-m",
            "experiment=smoke", f"train.iterations={iterations}", f"data.root={data_root}",
            f"hydra.sweep.dir={Path(work) / 'sweep'}", LOGGERS[choice],
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("MLFLOW_TRACKING_URI", None)
        tic = time.perf_counter()
        subprocess.run(command, cwd=work, env=env, check=True, capture_output=True)
        return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--data-root", default=os.environ.get("HARNESS_DATA_ROOT", "data"))
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in LOGGERS}
    for _ in range(args.repeats):
        for name in LOGGERS:
            times[name].append(once(name, args.iterations, args.data_root))
    base = statistics.median(times["none"])
    print(f"experiment=smoke, train.iterations={args.iterations}, {args.repeats} repeats")
    print("| logger | median wall s | ratio to none | all |")
    print("|---|---|---|---|")
    for name, found in times.items():
        median = statistics.median(found)
        shown = ", ".join(f"{t:.1f}" for t in found)
        print(f"| {name} | {median:.1f} | {median / base:.3f} | {shown} |")


if __name__ == "__main__":
    main()
