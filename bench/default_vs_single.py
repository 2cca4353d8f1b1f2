"""The default sweep command against `train.engine=single`, whole processes, side by side.

    python bench/default_vs_single.py               # the issue's 8-run net1 sweep and `smoke`
    python bench/default_vs_single.py --repeats 5
    python bench/default_vs_single.py --threads 1   # both with one torch thread

Each sweep runs as a user runs it (`harness-train -m ...` into a temporary folder), with the
default command and with train.engine=single, interleaved `--repeats` times; it prints the
median wall times and their ratio. With `--threads N` both commands get threads=N (by default
the single-run engine uses torch's default, all cores, and an in-process stack one thread).
Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import os
import statistics

from sweeps import DEFAULT_ROOT, run_sweep

SWEEPS = {
    "8 net1 runs x 1,500 iterations on 5,000 images": [
        "model=net1",
        "optimizer=sgd,momentum,adam,rmsprop",
        "optimizer.lr=0.01,0.1",
        "train.iterations=1500",
        "data.train_size=5000",
    ],
    "experiment=smoke (8 runs)": ["experiment=smoke"],
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3, help="medians of this many (default 3)")
    parser.add_argument("--threads", type=int, help="threads=N for both commands")
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    args = parser.parse_args()
    threads = [f"threads={args.threads}"] if args.threads else []
    print(f"# Default command vs train.engine=single, whole processes, {os.cpu_count()} cores")
    print(f"threads: {args.threads or 'as configured (null)'}")
    print("\n| sweep | default (s) | train.engine=single (s) | single / default |")
    print("|---|---:|---:|---:|")
    for label, sweep in SWEEPS.items():
        overrides = [*sweep, *threads]
        default, single = [], []
        for _ in range(args.repeats):  # interleaved: both see the same machine load
            default.append(run_sweep(overrides, args.data_root)[0])
            single.append(run_sweep([*overrides, "train.engine=single"], args.data_root)[0])
        d, s = statistics.median(default), statistics.median(single)
        print(f"| {label} | {d:.1f} | {s:.1f} | {s / d:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
