"""The Hydra callback around a sweep's life (harness.sweeps.sweep): it guards and indexes the
sweep folder before the jobs run, and consolidates it (harness.sweeps.consolidate) after.

A sweep folder (`hydra.sweep.dir`) holds one subfolder per run, `sweep.json`, which records what
the sweep is (its overrides) and when each invocation started, and `finished.json`, the index of
its finished runs made when an invocation starts (harness.sweeps.resume). Re-running the same
sweep command resumes it: runs whose config already finished there (completed or diverged) are
skipped. A different sweep is refused unless `sweep.append=true`. When all jobs have returned,
the folder is consolidated into its tables. Bad input that stops an invocation before it trains
undoes what it wrote (`discard_invocation`).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness.errors import HarnessError, exit_with_error
from harness.results import PLANNING_FILE, RUN_FILE, SWEEP_FILE, atomic_write_bytes
from harness.sweeps.consolidate import consolidate
from harness.sweeps.jobs import planned_runs, sweep_identity
from harness.sweeps.resume import INDEX_FILE, write_index

log = logging.getLogger(__name__)

# What an invocation writes into the sweep folder before its jobs run (Hydra: multirun.yaml).
BOOKKEEPING_FILES = (SWEEP_FILE, INDEX_FILE, PLANNING_FILE, "multirun.yaml")


@dataclass
class _Invocation:
    """A sweep folder as this invocation found it, to undo its bookkeeping on bad input."""

    sweep_dir: Path
    existed: bool
    files: dict[str, bytes | None]  # bookkeeping file -> its bytes before (None: absent)


_invocation: _Invocation | None = None  # this process's sweep, from on_multirun_start


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _invocation
        sweep_dir = Path(config.hydra.sweep.dir)
        identity = sweep_identity(config)
        marker = sweep_dir / SWEEP_FILE
        state = json.loads(marker.read_text()) if marker.exists() else None
        if state is None and sweep_dir.is_dir() and any(sweep_dir.rglob(RUN_FILE)):
            state = {"identity": None, "invocations": []}  # runs of an unknown sweep
        append = bool(OmegaConf.select(config, "sweep.append", default=False))
        if state is not None and state["identity"] != identity and not append:
            # Hydra turns exceptions raised by callbacks into warnings: exit instead.
            exit_with_error(
                "harness-train",
                f"{sweep_dir} holds another sweep ({SWEEP_FILE}: {state['identity']}); choose "
                "another hydra.sweep.dir, or add sweep.append=true to add these runs to it",
            )
        _invocation = _Invocation(
            sweep_dir,
            sweep_dir.is_dir(),
            {name: _read_bytes(sweep_dir / name) for name in BOOKKEEPING_FILES},
        )
        try:
            jobs = planned_runs(config)
        except HarnessError as exc:  # a tuning study's protocol: before anything is written
            exit_with_error("harness-train", str(exc))
        state = state or {"identity": identity, "invocations": []}
        state["invocations"].append({"started_at": time.time(), "jobs": jobs, "identity": identity})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(marker, json.dumps(state, indent=2).encode())
        already = len(write_index(sweep_dir))
        log.info(
            "sweep of %d runs into %s (%d finished runs there already)", jobs, sweep_dir, already
        )
        tune = config.get("tune")
        if tune is None or not tune.get("source"):
            return  # not an evaluation phase: harness.tuning.selection (pandas, scipy) unimported
        try:  # an evaluation phase records the settings its tuning study chose, and the rule
            from harness.tuning.selection import write_selection

            write_selection(sweep_dir, config)
        except HarnessError as exc:
            discard_invocation()
            exit_with_error("harness-train", str(exc))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _invocation
        _invocation = None  # the sweep ran: nothing to undo
        sweep_dir = Path(config.hydra.sweep.dir)
        runs, rows = consolidate(sweep_dir)
        log.info("consolidated %d runs (%d curve rows) into %s", runs, rows, sweep_dir)


def _read_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def discard_invocation() -> None:
    """Undo what this invocation wrote into its sweep folder, when bad input stopped it before
    it trained anything: the folder, if the invocation made it and no run finished in it;
    otherwise its bookkeeping files as they were. Finished runs are never touched."""
    global _invocation
    invocation, _invocation = _invocation, None
    if invocation is None:
        return
    if not invocation.existed:
        if not any(invocation.sweep_dir.rglob(RUN_FILE)):
            shutil.rmtree(invocation.sweep_dir, ignore_errors=True)
        return
    for name, data in invocation.files.items():
        path = invocation.sweep_dir / name
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write_bytes(path, data)
