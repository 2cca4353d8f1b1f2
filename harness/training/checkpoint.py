"""Checkpoints of a training in flight: what a killed sweep (Ctrl-C, a lost machine, a SLURM time
limit) keeps of the stacks it was training.

A task of a sweep (a stack, or a run trained alone) saves its training's whole state every
`every_s` seconds of wall time, at a log point, into the sweep's ``.checkpoints`` folder:
the loop's records and counters, every model's weights, every optimizer's and schedule's state
(a stack's fused rules and shared instances included) and torch's random state. The same
command resumes the sweep: the launcher trains the runs of a checkpoint as the task they were
(`saved_tasks`), and the engine goes on from the saved step, as if never stopped.

That is exact only if an optimizer's `state_dict()` holds all it carries from step to step;
harness.training.restore_probe checks it on a probe, and a task with an optimizer that fails it
trains without checkpoints. A task's checkpoint is removed once its runs are written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.results import CHECKPOINTS_FOLDER, RUN_FILE, atomic_write_bytes
from harness.training import restore_probe

if TYPE_CHECKING:
    from harness.training.job import Job

log = logging.getLogger(__name__)

FORMAT = 2  # the saved file's layout (2: the state beside what it was saved for)
STALE_PARTIAL_S = 3600  # a save takes under a second: a partial file this old was cut short


class Checkpoint:
    """Where a task saves its training's state, and how often: `due` at most every `every_s`
    seconds. `runs` are its runs' folder names and `hashes` their config hashes, in the order
    the task trains them; `execution` says how it trains (engine, device), `layout` (set by the
    engine's caller) its members in the loop's order with their update paths. A checkpoint
    found for other configs, another execution or another layout is not used."""

    def __init__(
        self,
        folder: Path,
        runs: Sequence[str],
        hashes: Sequence[str],
        execution: Sequence[str],
        every_s: float,
    ) -> None:
        self.runs, self.hashes, self.execution = list(runs), list(hashes), list(execution)
        self.layout: list[str] = []
        self.every_s = every_s
        name = hashlib.sha256("\n".join(sorted(self.runs)).encode()).hexdigest()[:16]
        self.state_path = folder / f"{name}.pt"
        self.index_path = folder / f"{name}.json"  # written last: a checkpoint is complete
        self.opened = self.last_saved = time.monotonic()
        self.earlier_wall_s = 0.0  # wall time of the sittings before the one it goes on from

    def due(self) -> bool:
        return time.monotonic() - self.last_saved >= self.every_s

    def save(self, state: dict[str, Any]) -> None:
        """Write `state` (the engine's) atomically, with what it was saved for: a kill while
        writing leaves the last one (each file is replaced whole; the state says itself what it
        belongs to, the index is what planning reads)."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        wall_s = self.earlier_wall_s + time.monotonic() - self.opened
        index = {**self._identity(), "iteration": state["iteration"], "wall_s": wall_s}
        for path, write in (
            (self.state_path, lambda f: torch.save({**index, "state": state}, f)),
            (self.index_path, lambda f: f.write(json.dumps(index).encode())),
        ):
            partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # one per writer
            with open(partial, "wb") as f:
                write(f)
            os.replace(partial, path)
        self.last_saved = time.monotonic()

    def _identity(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "runs": self.runs,
            "config_hashes": self.hashes,
            "execution": self.execution,
            "layout": self.layout,
        }

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None: none saved, or one that cannot be read or was saved for
        other configs, another execution or layout, or by another version of this module
        (then training starts over, and the next save replaces it)."""
        if not self.state_path.exists():
            return None
        try:
            saved = torch.load(self.state_path, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - a file cut short, or of other code
            log.warning("%s cannot be read (%s): not used", self.state_path, exc)
            return None
        identity = {key: saved.get(key) for key in self._identity()}
        if identity != self._identity():
            log.warning("%s was saved for another task or layout: not used", self.state_path)
            return None
        log.info("going on from %s at step %d", self.state_path, saved["iteration"])
        self.earlier_wall_s = saved["wall_s"]
        return saved["state"]

    def remove(self) -> None:
        _remove(self.index_path)


def _remove(index_path: Path) -> None:
    """Remove the checkpoint of `index_path`: its index, its state, and saves cut short."""
    for path in (index_path, index_path.with_suffix(".pt")):
        path.unlink(missing_ok=True)
        for partial in path.parent.glob(f"{path.name}.*.partial"):
            partial.unlink(missing_ok=True)


def task_checkpoint(jobs: Sequence[Job], stacked: bool, every_s: float | None) -> Checkpoint | None:
    """The checkpoint of a task that trains `jobs` of one sweep folder, in this order (None: it
    trains without). With `every_s` None it saves none, but goes on from one saved earlier.
    Refused: a problem that steps several optimizers (sparse embedding tables), or an
    optimizer that `restore_refusal` refuses (a warning says which)."""
    folders = {job.out_dir.parent for job in jobs}
    if len(folders) != 1:
        return None
    folder = folders.pop() / CHECKPOINTS_FOLDER
    runs, hashes = [job.out_dir.name for job in jobs], [job.config_hash for job in jobs]
    checkpoint = Checkpoint(folder, runs, hashes, _execution(jobs[0], stacked), every_s or 0.0)
    if every_s is None:
        if not checkpoint.state_path.exists():
            return None
        checkpoint.every_s = math.inf
    for job in jobs:
        reason = refusal(job)
        if reason is not None:
            log.warning("training %d runs without checkpoints: %s", len(jobs), reason)
            return None
    return checkpoint


def refusal(job: Job) -> str | None:
    """Why a task with `job` would train without checkpoints (None: it may save them). The
    launcher stacks such runs apart, so that they do not take the checkpoints of the others."""
    return _problem_refusal(job) or restore_probe.refusal(job)


def _execution(job: Job, stacked: bool) -> list[str]:
    """How a task trains, beside what its configs compute: its engine and device (a checkpoint
    of a stack on a GPU is not a lone run's on this CPU)."""
    return ["stacked" if stacked else "single", str(job.device)]


def _problem_refusal(job: Job) -> str | None:
    from harness.problems import Problem  # the problems import the engine, which imports this

    if type(job.problem).parameter_groups is not Problem.parameter_groups:
        return f"its problem {type(job.problem).__name__} steps several optimizers"
    return None


def tidy(sweep: Path) -> list[dict[str, Any]]:
    """The indexes of the checkpoints in the sweep folder `sweep` that a task may go on from,
    once the folder is tidied (called where a sweep is planned, when none of its tasks writes):
    a state whose index is missing (a task's first save stopped between its two writes) gets
    its index back from the state, which holds it; a checkpoint whose runs were all written (a
    stop between writing them and removing it) is removed, and so are saves cut short (an
    hour old: not another command's save in progress)."""
    folder = sweep / CHECKPOINTS_FOLDER
    for partial in folder.glob("*.partial"):
        with contextlib.suppress(OSError):  # removed meanwhile
            if time.time() - partial.stat().st_mtime > STALE_PARTIAL_S:
                partial.unlink()
    for state_path in folder.glob("*.pt"):
        if not state_path.with_suffix(".json").exists():
            _restore_index(state_path)
    indexes = []
    for index_path in sorted(folder.glob("*.json")):
        try:
            saved = json.loads(index_path.read_text())
            index = {
                "runs": list(saved["runs"]),
                "config_hashes": list(saved["config_hashes"]),
                "execution": list(saved["execution"]),
                "stacked": saved["execution"][0] == "stacked",
                "iteration": int(saved["iteration"]),
            }
        except (OSError, ValueError, KeyError, IndexError, TypeError):  # not this module's
            log.warning("%s cannot be read: not used", index_path)
            continue
        if all((sweep / name / RUN_FILE).exists() for name in index["runs"]):
            _remove(index_path)
        else:
            indexes.append(index)
    return indexes


def _restore_index(state_path: Path) -> None:
    """Write the index of the state at `state_path` from the state (a state that cannot be read
    is removed: a task that would go on from it starts over)."""
    try:
        saved = torch.load(state_path, map_location="cpu", weights_only=False)
        index = {key: value for key, value in saved.items() if key != "state"}
        text = json.dumps(index)
    except Exception as exc:  # noqa: BLE001 - a file of other code: not used either way
        log.warning("%s cannot be read (%s): removed", state_path, exc)
        state_path.unlink(missing_ok=True)
        return
    atomic_write_bytes(state_path.with_suffix(".json"), text.encode())
    log.info("%s: its index written again from it", state_path)


def saved_tasks(jobs: Sequence[Job]) -> list[tuple[list[int], bool, int]]:
    """The tasks of the checkpoints saved in the sweep folders of `jobs` (`tidy`) whose runs are
    all among them, with the configs they were saved for: (positions in `jobs`, in the order
    the task trained them; stacked; the step it goes on from). A job is in one of them at
    most."""
    position = {(job.out_dir.parent, job.out_dir.name): i for i, job in enumerate(jobs)}
    tasks, taken = [], set()
    for sweep in sorted({job.out_dir.parent for job in jobs}):
        for index in tidy(sweep):
            runs = [position.get((sweep, name)) for name in index["runs"]]
            if None in runs or taken & set(runs):
                continue
            found = [jobs[i].config_hash for i in runs], _execution(jobs[runs[0]], index["stacked"])
            if found != (index["config_hashes"], index["execution"]):
                continue
            taken |= set(runs)
            tasks.append((runs, index["stacked"], index["iteration"]))
    return tasks
