"""What a sweep measures of each optimizer config before it trains it: measured once, kept.

Four checks, each decided by a few settings of a run's config (the key its caller gives says
which):

- `first_step`: whether the optimizer builds, takes a first step and evaluates on the run's
  model (why not, or None) and the seconds its step takes alone (harness.training.run);
- `stacks`: why it cannot run its own step() on the views of a stack (harness.stacking);
- `shares`: why seeds of one config cannot share one instance of it (harness.stacking);
- `restores`: why it would not go on exactly from a checkpoint (harness.training.checkpoint).

A process measures each outcome once (`outcome`), hands what it measured to its worker
processes (`measured`, `adopt`), and a sweep keeps them in its folder (`save`, `load`): a resume
on a machine like the one that measured them adopts them instead of measuring again (a zoo's
take minutes), and the step times a study compares are taken in one sitting.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.results import atomic_write_bytes
from harness.results.recording import package_versions

log = logging.getLogger(__name__)

CHECKS = ("first_step", "stacks", "shares", "restores")
# The layout of a stored file (3: one table per check). Layout 2 (a table of first steps, one
# of stacking and sharing probes, one of restore probes) is read as well.
FORMAT = 3

_OUTCOMES: dict[str, dict[tuple, Any]] = {check: {} for check in CHECKS}


def outcome(check: str, key: tuple, measure: Callable[[], Any]) -> Any:
    """The outcome of `check` for `key`: measured (`measure()`) the first time, then kept."""
    found = _OUTCOMES[check]
    if key not in found:
        found[key] = measure()
    return found[key]


def known(check: str, key: tuple) -> Any:
    """The outcome of `check` for `key` if this process has it, else None."""
    return _OUTCOMES[check].get(key)


def measured() -> dict[str, dict[tuple, Any]]:
    """This process's outcomes, to hand to another process."""
    return {check: dict(found) for check, found in _OUTCOMES.items()}


def adopt(found: dict[str, dict[tuple, Any]]) -> None:
    """Use outcomes another process (or invocation) measured."""
    for check, outcomes in found.items():
        _OUTCOMES[check].update(outcomes)


def count() -> int:
    """How many outcomes this process holds."""
    return sum(len(found) for found in _OUTCOMES.values())


@functools.cache  # one lookup per process: the installed packages do not change during a sweep
@functools.cache  # read once per process: every stored file writes it
def machine() -> dict[str, Any]:
    """What a step's time depends on beside its config: the processor, its cores, the
    packages. Stored outcomes are adopted only on a machine that matches."""
    cpuinfo = Path("/proc/cpuinfo")
    names = [
        line.split(":", 1)[1].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.startswith("model name")
    ]
    processor = names[0] if names else platform.processor()
    return {"processor": processor, "cores": os.cpu_count(), "versions": package_versions()}


def _stored_value(check: str, value: Any) -> Any:
    return tuple(value) if check == "first_step" else value  # (why not, seconds)


def _read(stored: dict) -> dict[str, dict[tuple, Any]]:
    """The outcomes of a stored file, of either layout."""
    if stored.get("format") == FORMAT:
        return {
            check: {tuple(k): _stored_value(check, v) for k, v in stored["outcomes"][check]}
            for check in CHECKS
        }
    found: dict[str, dict[tuple, Any]] = {check: {} for check in CHECKS}
    if stored.get("format") == 2:  # earlier layouts timed first steps otherwise: measured again
        found["first_step"] = {tuple(k): tuple(v) for k, *v in stored["first_steps"]}
    for (check, *key), reason in stored.get("probes", []):
        found[check][tuple(key)] = reason
    found["restores"] = {tuple(k): r for k, r in stored.get("restore_probes", [])}
    return found


def load(path: Path) -> int:
    """Adopt what an earlier invocation of a sweep stored in `path`, if it ran on a machine like
    this one (`machine`). Returns how many outcomes it adopted."""
    if not path.exists():
        return 0
    stored = json.loads(path.read_text())
    if stored.get("machine") != machine():
        log.info("%s was measured on another machine: its optimizers are checked again", path)
        return 0
    found = _read(stored)
    adopt(found)
    return sum(len(outcomes) for outcomes in found.values())


def save(path: Path) -> None:
    """Store this process's outcomes in `path` (see `load`), written whole, then moved into
    place."""
    stored = {
        "format": FORMAT,
        "machine": machine(),
        "outcomes": {
            check: [[list(key), value] for key, value in found.items()]
            for check, found in _OUTCOMES.items()
        },
    }
    atomic_write_bytes(path, json.dumps(stored, indent=1).encode())
