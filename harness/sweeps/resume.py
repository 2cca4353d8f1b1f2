"""A sweep folder's finished runs: the index made when an invocation starts (finished.json,
{config hash: run folder}), and the resume check each job makes before training: skipped if
its config finished there, copied if it finished in an earlier study that `sweep.reuse` names."""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path
from typing import Any

from harness import storage
from harness.config.identity import config_hash
from harness.errors import ConfigError
from harness.results import (
    RUN_FILE,
    RunRecord,
    atomic_write_bytes,
    copy_finished,
    read_finished,
    read_run,
)

log = logging.getLogger(__name__)

# The index of the sweep folder's finished runs: {config hash: run folder}, made when a sweep
# starts; every job's resume check reads it (once per process) instead of every run.json.
INDEX_FILE = "finished.json"


def finished_runs(sweep_dir: Path, known: dict[str, str] | None = None) -> dict[str, str]:
    """config hash -> run folder (relative) of every finished run in a sweep folder, consolidated
    or not. `known` (a previous index) spares reading the run.json of the folders it names."""
    done: dict[str, str] = {}
    table = storage.read_runs(sweep_dir, columns=["config_hash", "run_dir"])
    done.update(zip(table.config_hash, table.run_dir, strict=True))
    hash_of = {run_dir: digest for digest, run_dir in {**(known or {}), **done}.items()}
    for run_file in sweep_dir.rglob(RUN_FILE):
        run_dir = str(run_file.parent.relative_to(sweep_dir))
        digest = hash_of.get(run_dir) or read_run(run_file.parent)["config_hash"]
        done[digest] = run_dir
    return done


def write_index(sweep_dir: Path) -> dict[str, str]:
    """Index the finished runs of a sweep folder into INDEX_FILE (done once per invocation, when
    the sweep starts: every job then reads this one file instead of every run.json)."""
    index_file = sweep_dir / INDEX_FILE
    with storage.locked(sweep_dir):  # one writer at a time: they share its temporary file
        known = json.loads(index_file.read_text()) if index_file.exists() else None
        done = finished_runs(sweep_dir, known)
        atomic_write_bytes(index_file, json.dumps(done, indent=0).encode())
    return done


def read_index(sweep_dir: Path) -> dict[str, str]:
    """The index of finished runs of a sweep folder, read once per process (and again only if
    the file changed); made from the run folders if there is no index file."""
    index_file = sweep_dir / INDEX_FILE
    try:
        stat = index_file.stat()
    except FileNotFoundError:
        return finished_runs(sweep_dir)
    return _parsed_index(str(index_file), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _parsed_index(path: str, mtime_ns: int, size: int) -> dict[str, str]:
    return json.loads(Path(path).read_text())


def already_finished(config: dict[str, Any], sweep_dir: Path, run_dir: Path) -> str | None:
    """The folder of a finished run in `sweep_dir` with the same (resolved) config, if any: from
    the sweep's index, or from `run_dir` itself (a run that finished since the index was made).

    A folder that holds a finished run of another config is never overwritten."""
    digest = config_hash(config)
    done = read_index(sweep_dir)
    if digest in done:
        return done[digest]
    if (run_dir / RUN_FILE).exists():
        if read_run(run_dir)["config_hash"] == digest:
            # One may be absolute and the other relative (the index's folders are relative).
            return str(run_dir.resolve().relative_to(sweep_dir.resolve()))
        raise ConfigError(
            f"{run_dir} holds a finished run of another config; refusing to overwrite it "
            "(use another hydra.sweep.dir)"
        )
    return None


def resumed(
    config: dict[str, Any], sweep_dir: Path, run_dir: Path, choices: dict[str, str] | None = None
) -> RunRecord | None:
    """The resume step of every job of a sweep, whichever launcher runs it: the record of the run
    of this (resolved) config if it already finished in `sweep_dir` (logged as skipped: it is
    not trained again), or in one of the earlier studies `sweep.reuse` names (copied into
    `run_dir`, with `choices`, the job's config-group options), else None."""
    done = already_finished(config, sweep_dir, run_dir)
    if done is not None:
        log.info("skipped: this config already finished in %s", done)
        return read_finished(sweep_dir, done)
    for source in (config.get("sweep") or {}).get("reuse") or []:
        source_run = reuse_index(Path(source)).get(config_hash(config))
        if source_run is not None:
            log.info("reused: this config finished in %s", Path(source) / source_run)
            return copy_finished(Path(source), source_run, run_dir, config, choices or {})
    return None


def reuse_index(source: Path) -> dict[str, str]:
    """config hash -> run folder of the finished runs of an earlier study that a sweep reuses
    (`sweep.reuse`), read once per process."""
    if not source.is_dir():
        raise ConfigError(f"sweep.reuse: no study folder {source}")
    return _reuse_index(str(source.resolve()))


@functools.lru_cache(maxsize=8)
def _reuse_index(source: str) -> dict[str, str]:
    return finished_runs(Path(source))
