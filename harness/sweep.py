"""Sweeps: the Hydra callback that guards, reports and consolidates a sweep folder, and the
resume check each job makes before training.

A sweep folder (`hydra.sweep.dir`) holds one subfolder per run and `sweep.json`, which records
what the sweep is (its overrides) and when each invocation started. Re-running the same sweep
command resumes it: runs whose config already finished there (completed or diverged) are
skipped. A different sweep is refused unless `sweep.append=true`. When all jobs have returned,
the folder is consolidated into runs.parquet and curves.parquet.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError, exit_with_error
from harness.launcher import is_deferring
from harness.results import (
    EXECUTION_KEYS,
    RUN_FILE,
    RUNS_TABLE,
    atomic_write_bytes,
    collect,
    config_hash,
    read_run,
)

log = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"
# Overrides that change where or how a sweep runs, not which runs it holds.
_NOT_IDENTITY = (*EXECUTION_KEYS, "sweep.append")  # "sweep" itself is an execution key


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The overrides of every job of the sweep `config` describes, as Hydra's basic sweeper
    expands them (preset `hydra.sweeper.params` first, command-line overrides replacing axes)."""
    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    overrides = OverridesParser.create().parse_overrides(arguments)
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def sweep_identity(config: DictConfig) -> dict[str, Any]:
    """What a sweep is: its axes and fixed overrides, without execution-only settings."""
    params = config.hydra.sweeper.get("params") or {}
    task = [o for o in config.hydra.overrides.task if _key(o) not in _NOT_IDENTITY]
    return {
        "axes": {k: str(v) for k, v in sorted(params.items()) if k not in _NOT_IDENTITY},
        "overrides": sorted(task),
    }


def finished_runs(sweep_dir: Path) -> dict[str, str]:
    """config hash -> run folder of every finished run in a sweep folder (consolidated or not)."""
    done: dict[str, str] = {}
    if (sweep_dir / RUNS_TABLE).exists():
        table = pd.read_parquet(sweep_dir / RUNS_TABLE, columns=["config_hash", "run_dir"])
        done.update(zip(table.config_hash, table.run_dir, strict=True))
    for run_file in sweep_dir.rglob(RUN_FILE):
        done[read_run(run_file.parent)["config_hash"]] = str(run_file.parent.relative_to(sweep_dir))
    return done


def _format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
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
        jobs = len(sweep_jobs(config))
        state = state or {"identity": identity, "invocations": []}
        state["invocations"].append({"started_at": time.time(), "jobs": jobs, "identity": identity})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(marker, json.dumps(state, indent=2).encode())
        already = len(finished_runs(sweep_dir))
        log.info(
            "sweep of %d runs into %s (%d finished runs there already)", jobs, sweep_dir, already
        )

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or is_deferring():
            return  # the stacked launcher reports its own progress
        marker = Path(config.hydra.sweep.dir) / SWEEP_FILE
        if not marker.exists():  # e.g. a launcher that does not share the folder
            return
        invocation = json.loads(marker.read_text())["invocations"][-1]
        index, total = config.hydra.job.num + 1, invocation["jobs"]
        elapsed = time.time() - invocation["started_at"]
        left = ""
        if index > 1:  # extrapolated from the runs started so far
            left = f", ~{_format_seconds(elapsed / (index - 1) * (total - index + 1))} left"
        log.info("run %d of %d, elapsed %s%s", index, total, _format_seconds(elapsed), left)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        runs, rows = collect(sweep_dir)
        log.info("consolidated %d runs (%d curve rows) into %s", runs, rows, sweep_dir)


def already_finished(cfg: DictConfig, sweep_dir: Path, run_dir: Path) -> str | None:
    """The folder of a finished run in `sweep_dir` with the same config as `cfg`, if any.

    A folder that holds a finished run of another config is never overwritten."""
    digest = config_hash(OmegaConf.to_container(cfg, resolve=True))
    done = finished_runs(sweep_dir)
    if digest in done:
        return done[digest]
    if (run_dir / RUN_FILE).exists():
        raise ConfigError(
            f"{run_dir} holds a finished run of another config; refusing to overwrite it "
            "(use another hydra.sweep.dir)"
        )
    return None
