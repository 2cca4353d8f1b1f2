"""An ESGD study's tables, figures and summary.md, made again from its rows and its record
(esgd.json). Imports no torch, so `harness-report` starts without it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from harness.esgd import figures, tables
from harness.esgd.record import RECORD


def render(folder: Path, out_dir: Path | None = None) -> dict[str, pd.DataFrame]:
    """From a study's rows and esgd.json: its tables, figures and summary.md (again), in
    `out_dir` (default: the study's folder)."""
    folder = Path(folder)
    out_dir = Path(out_dir or folder)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = json.loads((folder / RECORD).read_text())
    if out_dir.resolve() != folder.resolve():  # the copy is a study folder of its own
        (out_dir / RECORD).write_text((folder / RECORD).read_text())
    cfg = OmegaConf.create(record["config"])
    individuals = pd.read_parquet(folder / f"{tables.INDIVIDUALS}.parquet")
    written = tables.write_tables(individuals, cfg.esgd.top_k, cfg.esgd.elite, out_dir)
    figures.write_figures(written, out_dir)
    summary = figures.summary_markdown(written, cfg, record)
    (out_dir / "summary.md").write_text(summary)
    return written
