"""What a sweep's planning measured, kept in its folder for its resumes: each optimizer's
first-step check and step time alone (`harness.training.run`), how each optimizer config stacks and
shares (`harness.stacking.stacked`'s probes) and whether it goes on exactly from a checkpoint
(`harness.training.checkpoint`'s probe). A resume on a machine like the one that measured them
adopts them instead of measuring again (a zoo's: minutes per invocation), and the step times a
study compares are taken in one sitting; worker processes adopt the planner's."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from harness.results import atomic_write_bytes
from harness.stacking import stacked
from harness.training import checkpoint, run

log = logging.getLogger(__name__)

# The layout of the stored checks (2: a first-step check keyed by its batch size and timing
# threads too): checks stored in another are measured again.
FORMAT = 2


def measured() -> dict[str, dict]:
    """This process's checks and probes, to hand to another process."""
    return {
        "first_steps": run.first_steps(),
        "probes": stacked.probe_outcomes(),
        "restore_probes": checkpoint.probe_outcomes(),
    }


def adopt(found: dict[str, dict]) -> None:
    """Use the checks and probes another process (or invocation) measured."""
    run.adopt_first_steps(found["first_steps"])
    stacked.adopt_probe_outcomes(found["probes"])
    checkpoint.adopt_probe_outcomes(found["restore_probes"])


def count() -> int:
    """How many checks and probes this process holds."""
    return sum(len(outcomes) for outcomes in measured().values())


def load(path: Path) -> int:
    """Adopt what an earlier invocation of a sweep stored in `path`, if it ran on a machine like
    this one (`run.machine`: processor, cores, packages). Returns how many outcomes it adopted."""
    if not path.exists():
        return 0
    stored = json.loads(path.read_text())
    if stored.get("machine") != run.machine():
        log.info("%s was measured on another machine: its optimizers are checked again", path)
        return 0
    first_steps = stored["first_steps"] if stored.get("format") == FORMAT else []
    if len(first_steps) < len(stored["first_steps"]):
        log.info("%s holds checks of an earlier layout: its optimizers are checked again", path)
    found: dict[str, Any] = {
        "first_steps": {tuple(key): tuple(outcome) for key, *outcome in first_steps},
        "probes": {tuple(key): reason for key, reason in stored["probes"]},
        # a sweep planned before checkpoints has none
        "restore_probes": {tuple(k): r for k, r in stored.get("restore_probes", [])},
    }
    adopt(found)
    return sum(len(outcomes) for outcomes in found.values())


def save(path: Path) -> None:
    """Store this process's checks and probes in `path` (see `load`), written whole, then moved
    into place."""
    now = measured()
    stored = {
        "format": FORMAT,
        "machine": run.machine(),
        "first_steps": [[list(key), *outcome] for key, outcome in now["first_steps"].items()],
        "probes": [[list(key), reason] for key, reason in now["probes"].items()],
        "restore_probes": [[list(key), r] for key, r in now["restore_probes"].items()],
    }
    atomic_write_bytes(path, json.dumps(stored, indent=1).encode())
