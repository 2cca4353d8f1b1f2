"""An ESGD study's record, esgd.json: its config, wall times and package versions, which make a
folder a study (not a sweep). Imports nothing heavy: `harness-report` asks it of every folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

RECORD = "esgd.json"

# Settings added after studies were committed, with the values those studies ran with
UNRECORDED = {
    "population_init": "independent",
    "population_init_std": 0.0,
    "offspring_sgd_steps": 0,
    "recombination": "mean",
    "plans": "redraw",
    "anneal": 1.0,
}


def is_study(folder: Path) -> bool:
    """Whether `folder` holds an ESGD study (its record), not a sweep."""
    return (Path(folder) / RECORD).is_file()


def changed_settings(esgd: Mapping) -> list[str]:
    """'key=value' for each setting of a study's `esgd` config where it differs from the
    committed studies (`UNRECORDED`)."""
    return [f"{k}={esgd.get(k, v)}" for k, v in UNRECORDED.items() if esgd.get(k, v) != v]
