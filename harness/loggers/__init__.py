"""Tracking tools that a run streams its metrics to while it trains (`logger=` config group:
conf/logger/): TensorBoard (`harness.loggers.tensorboard`) and MLflow (`harness.loggers.mlflow`),
one or both; `harness.loggers.export` sends committed studies to them afterwards.

A run's `Stream` takes the metric rows the training loop records (`engine.Recorder`'s sink) and
hands them to each tool, at most every `flush_s` seconds, from one thread per process: the
training loop only appends to a list, so a tool's import, its store and its network stay out of
the loop's time. A tool's failure is a warning, never the run's: the run's folder holds its
results whatever a tracking tool does.

Resuming continues each run's tool record without duplicates: a tool reads the last step it
holds of each metric when it opens a run again, and takes only later steps
(`Logger.logged`); the training loop hands a resumed run's restored rows over again, so rows
recorded before the kill but never sent are sent then.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
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


# One thread per process does every tool's work, in the order it was asked for.
_thread: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _thread
    if _thread is None:
        _thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="harness-loggers")
    return _thread


class Stream:
    """A run's metric rows on their way to its tracking tools: `__call__` (the recorder's sink)
    buffers them, and every `flush_s` seconds the logging thread sends them."""

    def __init__(self, loggers: Sequence[Logger], flush_s: float, name: str) -> None:
        self.loggers, self.flush_s, self.name = list(loggers), flush_s, name
        self.buffer: list[Row] = []
        self.sent = time.monotonic()
        self.last: list[dict[str, int]] = [{} for _ in self.loggers]
        self.pending = _executor().submit(self._each, "open", self._opened)

    def _each(self, method: str, then: Callable | None = None, *args: Any) -> None:
        """Call `method` of every live logger; a logger that raises warns once and is dropped."""
        for i, logger in enumerate(self.loggers):
            if logger is None:
                continue
            try:
                found = getattr(logger, method)(*args)
                if then is not None:
                    then(i, found)
            except Exception as exc:  # noqa: BLE001 - a tracking tool never fails a run
                log.warning(
                    "%s: %s stopped logging (%s: %s)",
                    self.name,
                    type(logger).__name__,
                    type(exc).__name__,
                    exc,
                )
                self.loggers[i] = None  # type: ignore[call-overload]

    def _opened(self, i: int, last: dict[str, int]) -> None:
        self.last[i] = dict(last)

    def _send(self, rows: list[Row]) -> None:
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
                log.warning(
                    "%s: %s stopped logging (%s: %s)",
                    self.name,
                    type(logger).__name__,
                    type(exc).__name__,
                    exc,
                )
                self.loggers[i] = None  # type: ignore[call-overload]
                continue
            for r in new:
                last[r[3]] = r[0]

    def __call__(self, rows: Iterable[Row]) -> None:
        self.buffer.extend(rows)
        if time.monotonic() - self.sent >= self.flush_s:
            self.flush()

    def flush(self) -> None:
        rows, self.buffer, self.sent = self.buffer, [], time.monotonic()
        if rows:
            self.pending = _executor().submit(self._send, rows)

    def finish(self, record: dict[str, Any]) -> None:
        """Send what is buffered, end every record with the run's, and wait for it."""
        self.flush()
        _executor().submit(self._each, "finish", None, record).result()

    def abort(self, status: str) -> None:
        """Send what is buffered and end every record as `status`, waiting for it."""
        self.flush()
        _executor().submit(self._each, "abort", None, status).result()


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


def prepare(runs: Iterable[tuple[DictConfig, Path]]) -> None:
    """Before workers start: create each MLflow store and experiment the runs will log to, once
    (workers that created one SQLite store together would race on its tables)."""
    from harness.loggers import mlflow as mlflow_logger

    seen = set()
    for cfg, out_dir in runs:
        if "mlflow" in chosen(cfg):
            node = cfg.logger.mlflow
            key = (mlflow_logger.tracking_uri(node), mlflow_logger.experiment_name(node, out_dir))
            if key not in seen:
                seen.add(key)
                mlflow_logger.experiment_id(mlflow_logger.client(key[0]), key[1])
