"""`harness-report FOLDER`: picks the renderer of the folder (an ESGD study's, else the sweep
report's) and runs it. The two renderers import nothing of each other; only this does both."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from harness.errors import HarnessError, exit_with_error
from harness.esgd.record import is_study
from harness.esgd.rendering import render
from harness.report.summary import write_report

PROG = "harness-report"


def _render_esgd_study(folder: Path, out: Path | None) -> None:
    """An ESGD study's folder (harness-train experiment=esgd) is drawn by its own figures and
    tables, again from its rows (into the study's folder unless --out says otherwise)."""
    out = out or folder
    render(folder, out)
    print(f"{folder}: an ESGD study; tables, figures and summary.md written to {out}")


def _render_sweep(folder: Path, out: Path | None, target: float | None, formats) -> None:
    """Any other folder is a sweep: every figure it supports and summary.md (into
    <folder>/report unless --out says otherwise), each file written and figure skipped named;
    its figures drawn in worker processes, one per core (`drawing.workers_for`)."""
    report = write_report(folder, out, target, formats, workers=None)  # by the sweep's size
    for path in report.written:
        print(path)
    for name, why in report.skipped.items():
        print(f"skipped {name}: {why}")


def main(argv: Sequence[str] | None = None) -> None:
    """`harness-report SWEEP_DIR [--out DIR] [--target 0.97]`."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Figures (PNG; SVG, PDF when asked) and a Markdown summary of a sweep folder.",
    )
    parser.add_argument(
        "sweep", type=Path, help="sweep folder (runs.parquet + curves.parquet, or run folders)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: SWEEP/report)"
    )
    parser.add_argument(
        "--target",
        type=float,
        default=None,
        help="quality for time-to-target, measured on the split that chooses (validation; test "
        "for runs without one): an accuracy as a fraction, or another metric's value (an "
        "RMSE); default: one per net, the final validation quality the net's reference (the "
        "best of the course's optimizers) reaches with every seed",
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        default=["png"],
        help="figure formats (default: png, what summary.md shows; add svg or pdf for vector "
        "figures: a zoo's report takes about twice as long with svg)",
    )
    args = parser.parse_args(argv)

    if not args.sweep.exists():
        exit_with_error(PROG, f"no such folder: {args.sweep}")
    if not args.sweep.is_dir():
        exit_with_error(PROG, f"not a folder: {args.sweep}")
    try:
        if is_study(args.sweep):
            _render_esgd_study(args.sweep, args.out)
        else:
            _render_sweep(args.sweep, args.out, args.target, args.formats)
    except (OSError, ValueError, HarnessError) as exc:  # unreadable tables, no runs, ...
        exit_with_error(PROG, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
