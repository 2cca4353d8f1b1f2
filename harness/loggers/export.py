"""Committed studies into the tracking tools, after the fact:

    harness-export results/zoo --to mlflow          # one experiment, one MLflow run per run
    harness-export results/zoo --to tensorboard     # an event folder per run, under --out

Each run goes through the same loggers a training streams to (`harness.loggers`), from its
consolidated tables (runs.parquet's record, curves.parquet's rows): the same params, tags,
artifacts, steps and status as if it had been logged while it trained. Exporting again adds
nothing: a run's record in a tool is found again, and only steps it lacks are sent.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from harness.errors import exit_with_error
from harness.loggers import Stream, study_of

PROG = "harness-export"
OVERRIDE = re.compile(r",(?=[\w.+~]+=)")  # a run folder's name: its overrides, comma-joined


def _loggers(tool: str, run_dir: Path, record: dict, params: dict, out: Path, uri: str | None):
    if tool == "tensorboard":
        from harness.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(out / run_dir.name)
    from harness.loggers.mlflow import MlflowLogger, RunFacts

    tags = {
        "study": study_of(run_dir),
        "run_dir": str(run_dir.resolve()),
        "device": str(record.get("device")),
        "seed": str(record.get("seed")),
        **{f"choice.{k}": str(v) for k, v in (record.get("choices") or {}).items()},
        **{f"version.{k}": str(v) for k, v in (record.get("versions") or {}).items()},
    }
    facts = RunFacts(run_dir, record["config"], record["config_hash"], params, tags)
    return MlflowLogger({"tracking_uri": uri, "experiment": None}, facts)


def export(sweep: Path, tool: str, out: Path | None = None, uri: str | None = None) -> int:
    """Send every finished run of `sweep` to `tool`; the number of runs sent."""
    from harness.results import load_curves, load_runs

    runs = load_runs(sweep)
    if runs.empty:
        raise ValueError(f"no runs in {sweep}")
    curves = load_curves(sweep, runs, columns=["run_dir"])
    records = _records(sweep)
    out = out or sweep / "tensorboard"
    for run_dir, rows in curves.groupby("run_dir", observed=True):
        run_dir = sweep / str(run_dir) if not Path(str(run_dir)).is_absolute() else Path(run_dir)
        record = records[run_dir.name]
        params = {
            p.split("=", 1)[0]: p.split("=", 1)[1] for p in run_dir.name.split(",") if "=" in p
        }
        logger = _loggers(tool, run_dir, record, params, out, uri)
        stream = Stream([logger], float("inf"), run_dir.name)
        rows = rows.sort_values(["iteration"], kind="stable")
        stream(
            zip(
                rows["iteration"].astype(int),
                rows.get("epoch", rows["iteration"]),
                rows.get("time_s", rows["iteration"]),
                rows["metric"].astype(str),
                rows["value"].astype(float),
                strict=True,
            )
        )
        stream.finish(record)
    return len(records)


def _records(sweep: Path) -> dict[str, dict]:
    """Each run's record by its folder's name: its run.json where the folder holds one, else
    its row of the consolidated table (status, config, hash, final metrics, times)."""
    from harness.storage import read_runs

    records = {}
    for path in sweep.glob("*/run.json"):
        records[path.parent.name] = json.loads(path.read_text())
    table = read_runs(sweep)
    for row in table.to_dict("records"):
        row = {k: (None if isinstance(v, float) and v != v else v) for k, v in row.items()}
        config = row["config"]
        row["config"] = json.loads(config) if isinstance(config, str) else config
        records.setdefault(Path(str(row["run_dir"])).name, row)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="a study folder, e.g. results/zoo")
    parser.add_argument("--to", required=True, choices=["mlflow", "tensorboard"])
    parser.add_argument(
        "--out", type=Path, help="TensorBoard's folder (default <sweep>/tensorboard)"
    )
    parser.add_argument("--tracking-uri", help="MLflow's store (default: as a training's)")
    args = parser.parse_args(argv)
    if not args.sweep.is_dir():
        exit_with_error(PROG, f"{args.sweep} is not a folder")
    try:
        count = export(args.sweep, args.to, args.out, args.tracking_uri)
    except ValueError as exc:
        exit_with_error(PROG, str(exc))
    print(f"exported {count} runs of {args.sweep} to {args.to}")
