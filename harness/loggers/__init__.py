"""Tracking tools that a run streams its metrics to while it trains (`logger=` config group:
conf/logger/): TensorBoard (`harness.loggers.tensorboard`) and MLflow (`harness.loggers.mlflow`),
one or both; `harness.loggers.export` sends committed studies to them afterwards.

A run's `Stream` takes the metric rows the training loop records (`engine.Recorder`'s sink) and
hands them to each tool, at most every `flush_s` seconds, through one logging process per
training process: the training loop only appends to a list, so a tool's import, its store and
its network stay out of the loop's time, and off its interpreter. A tool's failure is a
warning, never the run's: the run's folder holds its results whatever a tracking tool does.

Resuming continues each run's tool record without duplicates: a tool reads the last step it
holds of each metric when it opens a run again, and takes only later steps
(`Logger.logged`); the training loop hands a resumed run's restored rows over again, so rows
recorded before the kill but never sent are sent then.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from harness.config.identity import PRESET_GROUP, computes, override_key

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from harness.training.run import PreparedRun

log = logging.getLogger(__name__)

Row = tuple[int, float, float, str, float]  # iteration, epoch, time_s, metric, value
TOOLS = ("tensorboard", "mlflow")


class Logger(Protocol):
    """One run's record in one tracking tool."""

    def open(self) -> dict[str, int]:
        """Start (or continue) the run's record; the last step it holds of each metric."""
        ...

    def log(self, rows: Sequence[Row]) -> None:
        """Record metric rows (iteration is the step); only rows the record does not hold."""
        ...

    def finish(self, record: dict[str, Any]) -> None:
        """End the run's record with its run.json `record` (status, what trained it)."""
        ...

    def abort(self, status: str) -> None:
        """End the run's record as `status` (failed, killed): its training raised."""
        ...


# Every tool's work (its import, its store, its calls) happens in one logging process per
# training process, in the order it was asked for: in a thread of the training process it held
# the GIL against the training loop (MLflow's store is pure Python), where a process of its own
# runs on a core the training leaves idle, if there is one. bench/README.md has the figures.
_pool: concurrent.futures.ProcessPoolExecutor | None = None
_keys = itertools.count()


def _logging_process() -> concurrent.futures.ProcessPoolExecutor:
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ProcessPoolExecutor(
            1,
            mp_context=multiprocessing.get_context("spawn"),  # no fork of a torch process
            initializer=_serve,
            initargs=(os.getpid(),),
        )
        # A worker process (of a sweep's pool) joins its children before the threads' exit
        # hooks would shut the pool down: shut it down first, or the two wait on each other;
        # and before its queues' feeders close (their finalizers' priority is 10).
        multiprocessing.util.Finalize(_pool, _pool.shutdown, exitpriority=100)
    return _pool


def _serve(parent: int) -> None:
    """In the logging process: Ctrl-C and SIGTERM are the training process's to handle (it then
    ends each record as killed, through this process); when it is gone (SIGKILL), so is this."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="harness-loggers-watch").start()


class _Records:
    """In the logging process: one run's records, one per tool; a tool that raises is dropped
    with a warning (returned to the training process, which logs it)."""

    def __init__(self, loggers: Sequence[Logger], name: str) -> None:
        self.loggers: list[Logger | None] = list(loggers)
        self.name = name
        self.last: list[dict[str, int]] = [{} for _ in self.loggers]
        self.warnings: list[str] = []

    def _drop(self, i: int, exc: Exception) -> None:
        tool = type(self.loggers[i]).__name__
        self.warnings.append(f"{self.name}: {tool} stopped logging ({type(exc).__name__}: {exc})")
        self.loggers[i] = None

    def each(self, method: str, *args: Any) -> None:
        for i, logger in enumerate(self.loggers):
            if logger is None:
                continue
            try:
                found = getattr(logger, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a tracking tool never fails a run
                self._drop(i, exc)
                continue
            if method == "open":
                self.last[i] = dict(found)

    def send(self, rows: list[Row]) -> None:
        for i, logger in enumerate(self.loggers):
            if logger is None:
                continue
            last = self.last[i]
            new = [r for r in rows if r[0] > last.get(r[3], -1)]  # steps it holds are skipped
            if not new:
                continue
            try:
                logger.log(new)
            except Exception as exc:  # noqa: BLE001
                self._drop(i, exc)
                continue
            for r in new:
                last[r[3]] = r[0]

    def drained(self) -> list[str]:
        found, self.warnings = self.warnings, []
        return found


_records: dict[int, _Records] = {}  # in the logging process, by stream key


def _open(key: int, loggers: Sequence[Logger], name: str) -> list[str]:
    records = _records[key] = _Records(loggers, name)
    records.each("open")
    return records.drained()


def _send(key: int, rows: list[Row]) -> list[str]:
    records = _records[key]
    records.send(rows)
    return records.drained()


def _end(key: int, method: str, argument: Any) -> list[str]:
    records = _records.pop(key)
    records.each(method, argument)
    return records.drained()


class Stream:
    """A run's metric rows on their way to its tracking tools: `__call__` (the recorder's sink)
    buffers them, and every `flush_s` seconds the logging process is sent them."""

    def __init__(self, loggers: Sequence[Logger], flush_s: float, name: str) -> None:
        self.flush_s, self.name = flush_s, name
        self.key = next(_keys)
        self.buffer: list[Row] = []
        self.sent = time.monotonic()
        self.pending: list[concurrent.futures.Future] = []
        self._submit(_open, self.key, list(loggers), name)

    def _submit(self, work: Callable, *args: Any) -> None:
        try:
            self.pending.append(_logging_process().submit(work, *args))
        except Exception as exc:  # noqa: BLE001 - e.g. the logging process is gone
            log.warning("%s: tracking stopped (%s: %s)", self.name, type(exc).__name__, exc)
        self._collect(wait=False)

    def _collect(self, wait: bool) -> None:
        """Log the warnings of the logging process's finished work (all of it: `wait`)."""
        for future in list(self.pending):
            if not (wait or future.done()):
                continue
            self.pending.remove(future)
            try:
                for warning in future.result():
                    log.warning(warning)
            except Exception as exc:  # noqa: BLE001
                log.warning("%s: tracking stopped (%s: %s)", self.name, type(exc).__name__, exc)

    def __call__(self, rows: Iterable[Row]) -> None:
        self.buffer.extend(rows)
        if time.monotonic() - self.sent >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        rows, self.buffer, self.sent = self.buffer, [], time.monotonic()
        if rows:
            self._submit(_send, self.key, rows)

    def finish(self, record: dict[str, Any]) -> None:
        """Send what is buffered, end every record with the run's, and wait for it."""
        self.flush()
        self._submit(_end, self.key, "finish", record)
        self._collect(wait=True)

    def abort(self, status: str) -> None:
        """Send what is buffered and end every record as `status`, waiting for it."""
        self.flush()
        self._submit(_end, self.key, "abort", status)
        self._collect(wait=True)


def chosen(cfg: DictConfig) -> list[str]:
    """The tracking tools a run's config chooses (its `logger` node)."""
    node = cfg.get("logger") or {}
    return [tool for tool in TOOLS if node.get(tool) is not None]


def study_of(out_dir: Path) -> str:
    """The study a run belongs to: its sweep folder's name (results/zoo/<run> -> zoo)."""
    return Path(out_dir).resolve().parent.name


def varied(out_dir: Path, choices: dict[str, str]) -> dict[str, str]:
    """The keys the study varies in this run, as {key: value}: its overrides that change what
    it computes (as its folder's name holds them, from Hydra's `.hydra/overrides.yaml`), else
    its config-group choices."""
    path = Path(out_dir) / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {k: v for k, v in choices.items() if k in ("model", "optimizer", "schedule")}
    params = {}
    for override in yaml.safe_load(path.read_text()) or []:
        key = override_key(override)
        if key != PRESET_GROUP and computes(key) and "=" in override:
            params[key] = override.split("=", 1)[1]
    return params


def open_stream(run: PreparedRun) -> Stream | None:
    """The stream of a prepared run to the tools its config chooses; None for `logger=none`.
    The tools' packages are imported here, only when chosen, and in the logging thread."""
    tools = chosen(run.cfg)
    if not tools:
        return None
    loggers: list[Logger] = []
    node = run.cfg.logger
    if "tensorboard" in tools:
        from harness.loggers.tensorboard import TensorBoardLogger

        loggers.append(TensorBoardLogger(run.out_dir / node.tensorboard.folder))
    if "mlflow" in tools:
        from harness.loggers.mlflow import MlflowLogger, RunFacts

        loggers.append(MlflowLogger(node.mlflow, RunFacts.of(run)))
    flush_s = min(float(node[tool].get("flush_s", 10)) for tool in tools)
    return Stream(loggers, flush_s, run.out_dir.name)


def open_streams(runs: Sequence[PreparedRun]) -> list[Stream | None]:
    return [open_stream(run) for run in runs]


@contextlib.contextmanager
def aborting(streams: Sequence[Stream | None]) -> Iterator[None]:
    """Around a training: if it raises, each stream's records end as failed (an error) or
    killed (Ctrl-C, SIGTERM), so that no tool shows them running."""
    try:
        yield
    except BaseException as exc:
        status = "failed" if isinstance(exc, Exception) else "killed"
        for stream in streams:
            if stream is not None:
                stream.abort(status)
        raise
