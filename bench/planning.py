"""What a small sweep pays before it trains: its planning, beside an earlier revision.

    python bench/planning.py --before f21065a~3          # 3 alternating runs of each
    python bench/planning.py --before REV --repeats 5

The sweep is the one a new user tries first, 8 runs (4 optimizers x 2 learning rates on net1,
5,000 training images, 1,500 iterations), run as whole `harness-train -m` processes, this tree's
harness alternating with revision REV's (a temporary git worktree). For each it prints the
process's wall time and its planning: the time from the sweep's first log line to the line
that starts training (composing the jobs, loading MNIST, checking and timing each optimizer,
probing how it stacks and restores, planning the tasks). Each repeat also runs both with torch
and torch._dynamo imported before the command starts (the first torch optimizer a process builds
imports torch._dynamo, ~1.5 s; with `import torch` ~3 s that any process that trains pays):
that planning is the harness's own. A warm-up run of each revision comes first (the page cache,
MNIST's decoded cache); medians of the repeats are printed.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from sweeps import DEFAULT_ROOT, REPO, worktree

SWEEP = [
    "model=net1",
    "optimizer=sgd,momentum,adam,rmsprop",
    "optimizer.lr=0.01,0.001",
    "data.train_size=5000",
    "data.test_size=1000",
    "train.iterations=1500",
]
PLAIN = "from harness.cli import train; train()"
PRELOADED = "import torch, torch._dynamo; from harness.cli import train; train()"
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")


def _stamp(line: str) -> datetime:
    return datetime.strptime(STAMP.match(line).group(1), "%Y-%m-%d %H:%M:%S,%f")


def timed_sweep(code: Path, program: str, data_root: str, cache: str) -> tuple[float, float]:
    """(wall s, planning s) of the sweep with the harness of source tree `code`."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-c", program, "-m", *SWEEP, f"data.root={data_root}"]
        command += [f"hydra.sweep.dir={Path(tmp) / 'sweep'}", "train.progress=false"]
        env = {**os.environ, "PYTHONPATH": str(code), "HARNESS_CACHE_DIR": cache}
        tic = time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=tmp, env=env)
        wall = time.perf_counter() - tic
    lines = [line for line in (done.stdout + done.stderr).splitlines() if STAMP.match(line)]
    first = _stamp(lines[0])
    training = next(_stamp(line) for line in lines if re.search(r"training \d+ runs as", line))
    return wall, (training - first).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="the earlier revision to time beside")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    args = parser.parse_args()
    with worktree(args.before) as before, tempfile.TemporaryDirectory() as cache:
        trees = {args.before: before, "this tree": REPO}
        found: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for code in trees.values():  # warm-up
            timed_sweep(code, PLAIN, args.data_root, cache)
        for _ in range(args.repeats):
            for mode, program in (("plain", PLAIN), ("torch preloaded", PRELOADED)):
                for name, code in trees.items():
                    timing = timed_sweep(code, program, args.data_root, cache)
                    found.setdefault((mode, name), []).append(timing)
    print(f"# Planning of an 8-run sweep ({' '.join(SWEEP)}), {os.cpu_count()} cores")
    print(f"# medians of {args.repeats} runs, alternating\n")
    print("| command | harness | wall (s) | planning (s) | planning, each run (s) |")
    print("|---|---|---:|---:|---|")
    for (mode, name), timings in found.items():
        walls, plans = zip(*timings, strict=True)
        each = ", ".join(f"{p:.2f}" for p in plans)
        print(
            f"| {mode} | {name} | {statistics.median(walls):.2f} | "
            f"{statistics.median(plans):.2f} | {each} |"
        )


if __name__ == "__main__":
    main()
