"""Whole `harness-train -m` processes, timed as a user runs them: shared by the sweep benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))


def compute_seconds(folder: Path) -> float:
    """Optimisation time of a sweep's runs: a stack's time once for all its runs (they all
    report it), a single run's own."""
    records = [json.loads(p.read_text()) for p in folder.rglob("run.json")]
    stacks = {r["train_time_s"] for r in records if r["engine"] == "stacked"}
    return sum(stacks) + sum(r["train_time_s"] for r in records if r["engine"] == "single")


def run_sweep(
    overrides: list[str], data_root: str, code: Path | None = None
) -> tuple[float, float, int]:
    """(wall s, compute s, runs finished) of `harness-train -m <overrides>`, whole process, into
    a temporary sweep folder; with the harness of the source tree `code` (an earlier revision,
    `worktree`) instead of the installed one."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "sweep"
        command = ["harness-train", "-m", *overrides]
        env = None
        if code is not None:  # its harness and hydra_plugins come first on the path
            command = [sys.executable, "-c", "from harness.cli import train; train()", "-m"]
            command += overrides
            env = {**os.environ, "PYTHONPATH": str(code)}
        command += [f"data.root={data_root}", f"hydra.sweep.dir={folder}", "train.progress=false"]
        tic = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=tmp, env=env)
        wall = time.perf_counter() - tic
        return wall, compute_seconds(folder), len(list(folder.rglob("run.json")))


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """The source tree of `revision` of this repository, checked out into a temporary folder
    (git worktree) for as long as the context lasts: to time an earlier revision beside this
    one in the same run."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), revision],
            check=True,
            capture_output=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                check=False,
                capture_output=True,
            )
