"""Step 6 of a sweep's life (harness.sweeps.sweep): its folder's finished runs into its tables.

Run when every job of an invocation has returned (the sweep's Hydra callback) and by
`harness-collect`: the runs the tables do not hold yet become a new part of them
(`harness.results.collect`, under the study's writer lock), and the index of finished runs
(finished.json, harness.sweeps.resume) is made again, so that at rest it names every finished
run (`harness-collect --check`).
"""

from __future__ import annotations

from pathlib import Path

from harness.results import collect
from harness.sweeps.resume import INDEX_FILE, write_index


def consolidate(sweep_dir: Path) -> tuple[int, int]:
    """The sweep folder's new finished runs appended to its tables, its index made again where
    it keeps one. Returns (runs, curve rows) of its tables."""
    runs, rows = collect(sweep_dir)
    if (sweep_dir / INDEX_FILE).exists():
        write_index(sweep_dir)
    return runs, rows
