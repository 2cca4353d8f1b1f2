"""Where a study's values came from, followed back to the study that drew them.

A study draws its own trials (its tuning.json names a search method), shortlists an earlier
study's best (tuning.json with method `shortlist` and that study as `source`), or evaluates an
earlier study's picks (`tune.source` in its invocation, multirun.yaml, with no tuning.json). A
shortlist's and an evaluation's values are an earlier study's choices, not draws: the edge of a
search and a tuning curve are read on the study that drew them (`lineage`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from harness.tuning.search import PROTOCOL_FILE, SHORTLIST

# How a lineage ends: at the study that drew the trials, at a study that tuned nothing, at a
# source that is not here, or where the studies name each other in a circle.
DREW, UNTUNED, MISSING, CIRCLE = "drew", "untuned", "missing", "circle"


@dataclass(frozen=True)
class Study:
    """One study of a lineage: its folder and its tuning.json (None where it has none)."""

    folder: Path
    protocol: dict[str, Any] | None


@dataclass(frozen=True)
class Lineage:
    """The studies from the one asked about back to the last one found, and how it ends;
    `missing`: the source named by the last study where it is not here."""

    studies: list[Study]
    end: str
    missing: str | None = None

    @property
    def last(self) -> Study:
        return self.studies[-1]

    @property
    def phase_keys(self) -> list[str]:
        """The keys in which the last study's trials may differ from the first's: the phase keys
        of every shortlist followed back."""
        return [k for s in self.studies[:-1] for k in (s.protocol or {}).get("phase_keys") or []]


def lineage(folder: str | Path) -> Lineage:
    """`folder`'s study followed back through shortlists and evaluations. A source is looked for
    beside the study first, then as named: a copied or moved results tree reads its own study,
    not the one its relative name happens to find under the current folder."""
    studies: list[Study] = []
    folder = Path(folder)
    while folder.resolve() not in {s.folder.resolve() for s in studies}:
        protocol_file = folder / PROTOCOL_FILE
        protocol = json.loads(protocol_file.read_text()) if protocol_file.exists() else None
        studies.append(Study(folder, protocol))
        if protocol is not None and protocol.get("method") != SHORTLIST:
            return Lineage(studies, DREW)
        source = protocol["source"] if protocol is not None else evaluation_source(folder)
        if source is None:
            return Lineage(studies, UNTUNED)
        found = [p for p in (folder.parent / Path(source).name, Path(source)) if p.is_dir()]
        if not found:
            return Lineage(studies, MISSING, missing=str(source))
        folder = found[0]
    return Lineage(studies, CIRCLE)


def evaluation_source(sweep: Path) -> str | None:
    """The tune.source of the sweep's invocation (its multirun.yaml), or None."""
    invocation = sweep / "multirun.yaml"
    if not invocation.exists():
        return None
    return OmegaConf.select(OmegaConf.load(invocation), "tune.source", default=None)
