"""Whole `harness-train -m` processes, timed as a user runs them: shared by the sweep benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))


def compute_seconds(folder: Path) -> float:
    """Optimisation time of a sweep's runs: a stack's time once for all its runs (they all
    report it), a single run's own."""
    records = [json.loads(p.read_text()) for p in folder.rglob("run.json")]
    stacks = {r["train_time_s"] for r in records if r["engine"] == "stacked"}
    return sum(stacks) + sum(r["train_time_s"] for r in records if r["engine"] == "single")


def run_sweep(overrides: list[str], data_root: str) -> tuple[float, float, int]:
    """(wall s, compute s, runs finished) of `harness-train -m <overrides>`, whole process, into
    a temporary sweep folder."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sweep"
        command = ["harness-train", "-m", *overrides]
        command += [f"data.root={data_root}", f"hydra.sweep.dir={folder}", "train.progress=false"]
        tic = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=tmp)
        wall = time.perf_counter() - tic
        return wall, compute_seconds(folder), len(list(folder.rglob("run.json")))
