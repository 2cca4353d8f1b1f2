"""Canaries: a few of the field's phase-1 runs trained again here before a newcomer is ranked,
and compared with their committed results. The field was trained once, on one machine, with
the libraries of that day; a newcomer trained today on another machine or with another torch
or pytorch-optimizer is ranked against it only if the field's own runs come out as committed.

The canaries are field optimizers with nothing to tune (`rank.canaries`: one phase-1 trial per
net at their defaults, 2,000 iterations, seconds each), so their configs are the field's
exactly: the committed run of the same config hash is the one to match."""

from __future__ import annotations

import importlib.metadata
import json
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness.config.identity import executes
from harness.rank.protocol import quoted
from harness.rank.settings import CANARY_FIELD, Request
from harness.zoo_phases import TRAIN, Phase, run_phase

# Final metrics compared; a difference above TOLERANCE in any is drift. On the machine that
# trained the field the canaries repeat it bit for bit; float32 on another CPU (other vector
# units, another BLAS) moves a trajectory by rounding, which 2,000 steps can grow past this.
METRICS = ("final_train_loss", "final_val_accuracy", "final_test_accuracy")
TOLERANCE = 1e-4
# The libraries whose versions the message names.
LIBRARIES = ("torch", "pytorch_optimizer", "schedulefree")


@dataclass
class Canaries:
    runs: int
    seconds: float
    largest: float  # the largest difference of a final metric from its committed value
    differing: list[str]  # "a2grad on net3: final_val_accuracy 0.9121 (committed 0.9124)"
    versions: str  # the installed libraries, beside the committed ones where recorded

    @property
    def drift(self) -> bool:
        return bool(self.differing)


def installed_versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def train_canaries(request: Request, out: Path) -> Canaries | None:
    """Train the canaries on the request's nets and compare them with the field's phase 1;
    None where rank.canaries is empty."""
    names = list(request.rank.get("canaries") or [])
    if not names:
        return None
    folder = out / "canaries"
    where = [o for o in request.overrides if executes(o.split("=", 1)[0].lstrip("+~"))]
    command = [
        *TRAIN,
        "-m",
        f"experiment={CANARY_FIELD.presets[0]}",
        "hydra/sweeper=basic",  # the canaries' one trial each: their configs as the zoo drew them
        f"model={','.join(request.nets)}",
        f"optimizer={','.join(names)}",
        *where,
        f"hydra.sweep.dir={quoted(folder)}",
    ]
    phase = Phase("canaries", command, folder)
    start = time.perf_counter()
    run_phase(phase, out / "canaries.log")
    return compare(folder, CANARY_FIELD.folders[0], time.perf_counter() - start)


def compare(folder: Path, committed_folder: Path, seconds: float) -> Canaries:
    """The canaries in `folder` against the runs of the same configs in `committed_folder`."""
    from harness.storage import read_runs

    columns = ["config_hash", "model", "optimizer", *METRICS]
    fresh = read_runs(folder, columns=columns)
    committed = read_runs(committed_folder).set_index("config_hash")
    differing, largest = [], 0.0
    for _, run in fresh.iterrows():
        what = f"{run['optimizer']} on {run['model']}"
        if run["config_hash"] not in committed.index:
            differing.append(f"{what}: no committed run of its config")
            continue
        old = committed.loc[run["config_hash"]]
        for metric in METRICS:
            gap = abs(float(run[metric]) - float(old[metric]))
            largest = max(largest, gap)
            if not gap <= TOLERANCE:  # NaN (a run that diverged on one side) differs too
                differing.append(
                    f"{what}: {metric} {run[metric]:.6g} (committed {old[metric]:.6g})"
                )
    return Canaries(len(fresh), seconds, largest, differing, _versions(committed))


def _versions(committed: pd.DataFrame) -> str:
    """The installed libraries' versions, and the committed runs' where their table records
    them (a `versions` column of run.json's `versions`)."""
    mine = installed_versions()
    text = ", ".join(f"{k} {v}" for k, v in mine.items())
    if "versions" not in committed or committed["versions"].isna().all():
        return f"installed {text}; the committed runs record no library versions"
    recorded = committed["versions"].dropna().iloc[0]
    recorded = json.loads(recorded) if isinstance(recorded, str) else dict(recorded)
    changed = [
        f"{k} {recorded[k]} -> {mine[k]}" for k in mine if k in recorded and recorded[k] != mine[k]
    ]
    return (
        f"versions that differ from the committed runs': {', '.join(changed)}"
        if changed
        else f"installed {text}, as the committed runs record"
    )


def drift_line(canaries: Canaries) -> str:
    """The one line that says the field's runs do not come out as committed here."""
    first = canaries.differing[0]
    more = len(canaries.differing) - 1
    return (
        f"the field's canaries differ from their committed runs ({first}"
        f"{f'; {more} more' if more else ''}); {canaries.versions}: the rank may not compare "
        "with the field's; add rank.allow_drift=true to rank anyway"
    )
