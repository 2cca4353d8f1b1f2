"""Sweeps: the Hydra callback that guards, indexes and consolidates a sweep folder, and the
resume check each job makes before training.

A sweep folder (`hydra.sweep.dir`) holds one subfolder per run, `sweep.json`, which records what
the sweep is (its overrides) and when each invocation started, and `finished.json`, the index of
its finished runs made when an invocation starts. Re-running the same sweep command resumes it:
runs whose config already finished there (completed or diverged) are skipped. A different sweep
is refused unless `sweep.append=true`. When all jobs have returned, the folder is consolidated
into runs.parquet and curves.parquet.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness import storage
from harness.config.identity import config_hash, executes, override_key
from harness.errors import ConfigError, HarnessError, exit_with_error
from harness.results import (
    PLANNING_FILE,
    RUN_FILE,
    SWEEP_FILE,
    RunRecord,
    atomic_write_bytes,
    collect,
    copy_finished,
    read_finished,
    read_run,
)

log = logging.getLogger(__name__)

# The index of the sweep folder's finished runs: {config hash: run folder}, made when a sweep
# starts; every job's resume check reads it (once per process) instead of every run.json.
INDEX_FILE = "finished.json"
# What an invocation writes into the sweep folder before its jobs run (Hydra: multirun.yaml).
BOOKKEEPING_FILES = (SWEEP_FILE, INDEX_FILE, PLANNING_FILE, "multirun.yaml")

TUNING_SWEEPER = "hydra_plugins.harness_sweeper.tuning_sweeper.TuningSweeper"


def _sweep_overrides(config: DictConfig) -> list:
    """The sweep's overrides, parsed: preset `hydra.sweeper.params` first, then the command
    line's (which replace an axis of the same key)."""
    params = config.hydra.sweeper.get("params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + list(config.hydra.overrides.task)
    return OverridesParser.create().parse_overrides(arguments)


def tuning_protocol(config: DictConfig) -> tuple[dict[str, Any], list]:
    """A tuning study's checked protocol (its `tune` node with the command line's search ranges,
    harness.tuning.search) and the sweep's other overrides; ConfigError (one line) if it cannot
    run."""
    from harness.tuning.search import check_protocol, with_command_line_spaces

    node = config.get("tune")
    if node is None:
        check_protocol(None)
    require_validation(config)
    tune, rest = with_command_line_spaces(
        OmegaConf.to_container(node, resolve=True), _sweep_overrides(config)
    )
    check_protocol(tune)
    return tune, rest


def sweep_jobs(config: DictConfig, compose: Callable | None = None) -> list[list[str]]:
    """The overrides of every job of the sweep `config` describes, as Hydra's basic sweeper
    expands them (preset `hydra.sweeper.params` first, command-line overrides replacing axes);
    for a tuning study (hydra/sweeper=tune), every trial of the first round of every
    combination of those axes (`TuningPlan`). A shortlist (tune.method=shortlist) reads its
    trials from its earlier study, and a centred range (tune.centre) is centred on a value, of
    each combination's config, which `compose(overrides)` gives (without it: an upper bound,
    and the space as written)."""
    if config.hydra.sweeper.get("_target_") != TUNING_SWEEPER:
        overrides = _sweep_overrides(config)
        if any(o.is_interval_sweep() for o in overrides):
            raise ConfigError(
                "interval(...) is a range to search, not a grid axis: tune it with "
                "hydra/sweeper=tune (as experiment=course_tune does) or the Optuna sweeper"
            )
        return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
    return TuningPlan(config, compose).jobs


class TuningPlan:
    """A tuning study's jobs: its first round's (`jobs`), then, where `tune.beyond_edge` asks,
    the rounds that search again beyond a pick at the edge of its range (`next_round`), planned
    from the consolidated results of the rounds before."""

    def __init__(self, config: DictConfig, compose: Callable | None = None) -> None:
        from harness.tuning.search import combinations_of, first_trials

        self.tune, overrides = tuning_protocol(config)
        expanded = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        default_optimizer = config.hydra.runtime.choices.get("optimizer")
        self.combinations = combinations_of(expanded, self.tune, default_optimizer)
        self.compose, self.rounds = compose, 0
        self._identities: dict[tuple[str, ...], dict[str, Any]] = {}
        shortlisted = value_of = None
        if compose is not None:
            shortlisted, value_of = self._shortlisted, self._value_of
        self.jobs = [
            job
            for c in self.combinations
            for job in c.jobs(first_trials(c, self.tune, shortlisted, value_of))
        ]

    def _identity(self, fixed: list[str]) -> dict[str, Any]:
        """The identity of the config of a combination's overrides (composed once)."""
        from harness.config.identity import identity_config

        key = tuple(fixed)
        if key not in self._identities:
            job = self.compose(fixed)
            task = {k: job[k] for k in job if k != "hydra"}
            resolved = OmegaConf.to_container(OmegaConf.create(task), resolve=True)
            self._identities[key] = identity_config(resolved)
        return self._identities[key]

    def _value_of(self, fixed: list[str], key: str) -> Any:
        return self._identity(fixed).get(key)

    def _shortlisted(self, fixed: list[str], keys: list[str]) -> list[dict[str, Any]]:
        from harness.tuning.selection import shortlist

        phase_keys = list(self.tune.get("phase_keys") or [])
        identity = self._identity(fixed)
        return shortlist(str(self.tune["source"]), identity, keys, phase_keys, self.tune["budget"])

    def next_round(self, sweep_dir: Path) -> list[list[str]]:
        """The jobs of the next round beyond the edges (none once `tune.beyond_edge.rounds`
        are done or no pick is at an edge): for each combination whose pick, by the rule that
        chooses (validation only), is the smallest or largest value of the centred key it
        tried, trials beyond that edge. Reads the sweep's results (consolidating them)."""
        from harness.tuning.search import beyond_edge, centre
        from harness.tuning.selection import edges, group_of

        edge = self.tune.get("beyond_edge")
        if not edge or self.compose is None or self.rounds >= edge["rounds"]:
            return []
        self.rounds += 1
        collect(sweep_dir)
        key, _ = centre(self.tune)
        sides = edges(sweep_dir, key)
        jobs = []
        for combination in self.combinations:
            side = combination.region and sides.get(
                group_of(self._identity(combination.given), [key])
            )
            if side:
                jobs += combination.jobs(beyond_edge(combination, side, self.tune))
        return jobs


def add_planned(sweep_dir: Path, runs: int) -> None:
    """Count `runs` more in what the sweep's last invocation plans (a tuning study's round
    beyond the edges): a study that reads this one waits for them too."""
    marker = sweep_dir / SWEEP_FILE
    state = json.loads(marker.read_text())
    state["invocations"][-1]["jobs"] += runs
    atomic_write_bytes(marker, json.dumps(state, indent=2).encode())


def require_validation(config: DictConfig) -> None:
    """A tuning study chooses on validation data: one line if its runs hold none out (the test
    set would choose, which nothing downstream could undo)."""
    if not config.get("data", {}).get("val_size", 0):
        raise ConfigError(
            "a tuning study chooses on validation data: set data.val_size > 0 (10000 by "
            "default); with none, its choices would be made on the test set"
        )


def planned_runs(config: DictConfig) -> int:
    """How many runs the sweep `config` describes: its jobs, or for a sweeper that decides
    its trials as it goes (Hydra's Optuna sweeper), its number of trials (checked, with the
    search spaces it reads from `tune`, before anything is written)."""
    if str(config.hydra.sweeper.get("_target_", "")).endswith("OptunaSweeper"):
        from harness.tuning.search import check_protocol

        if config.get("tune") is not None:
            check_protocol(OmegaConf.to_container(config.tune, resolve=True))
        require_validation(config)
        n_trials = config.hydra.sweeper.n_trials
        if not isinstance(n_trials, int) or isinstance(n_trials, bool) or n_trials < 1:
            raise ConfigError(f"hydra.sweeper.n_trials must be an integer >= 1, got {n_trials!r}")
        return n_trials
    return len(sweep_jobs(config))


def sweep_identity(config: DictConfig) -> dict[str, Any]:
    """What a sweep is: its axes and fixed overrides, without execution-only settings."""
    params = config.hydra.sweeper.get("params") or {}
    task = [o for o in config.hydra.overrides.task if not executes(override_key(o))]
    return {
        "axes": {k: str(v) for k, v in sorted(params.items()) if not executes(k)},
        "overrides": sorted(task),
    }


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


def format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


@dataclass
class _Invocation:
    """A sweep folder as this invocation found it, to undo its bookkeeping on bad input."""

    sweep_dir: Path
    existed: bool
    files: dict[str, bytes | None]  # bookkeeping file -> its bytes before (None: absent)


_invocation: _Invocation | None = None  # this process's sweep, from on_multirun_start


class SweepCallback(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _invocation
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
        _invocation = _Invocation(
            sweep_dir,
            sweep_dir.is_dir(),
            {name: _read_bytes(sweep_dir / name) for name in BOOKKEEPING_FILES},
        )
        try:
            jobs = planned_runs(config)
        except HarnessError as exc:  # a tuning study's protocol: before anything is written
            exit_with_error("harness-train", str(exc))
        state = state or {"identity": identity, "invocations": []}
        state["invocations"].append({"started_at": time.time(), "jobs": jobs, "identity": identity})
        sweep_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(marker, json.dumps(state, indent=2).encode())
        already = len(write_index(sweep_dir))
        log.info(
            "sweep of %d runs into %s (%d finished runs there already)", jobs, sweep_dir, already
        )
        tune = config.get("tune")
        if tune is None or not tune.get("source"):
            return  # not an evaluation phase: harness.tuning.selection (pandas, scipy) unimported
        try:  # an evaluation phase records the settings its tuning study chose, and the rule
            from harness.tuning.selection import write_selection

            write_selection(sweep_dir, config)
        except HarnessError as exc:
            discard_invocation()
            exit_with_error("harness-train", str(exc))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _invocation
        _invocation = None  # the sweep ran: nothing to undo
        sweep_dir = Path(config.hydra.sweep.dir)
        runs, rows = collect(sweep_dir)
        log.info("consolidated %d runs (%d curve rows) into %s", runs, rows, sweep_dir)


def _read_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def discard_invocation() -> None:
    """Undo what this invocation wrote into its sweep folder, when bad input stopped it before
    it trained anything: the folder, if the invocation made it and no run finished in it;
    otherwise its bookkeeping files as they were. Finished runs are never touched."""
    global _invocation
    invocation, _invocation = _invocation, None
    if invocation is None:
        return
    if not invocation.existed:
        if not any(invocation.sweep_dir.rglob(RUN_FILE)):
            shutil.rmtree(invocation.sweep_dir, ignore_errors=True)
        return
    for name, data in invocation.files.items():
        path = invocation.sweep_dir / name
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write_bytes(path, data)


class Progress:
    """Where a sweep of `total` runs stands, logged as `run i of N done, elapsed ..., ~... left`
    (extrapolated from the runs done since `started`, a time.time()): the stacked launcher
    reports its tasks as they finish, a job of any other launcher where its sweep is when it
    starts (`log_progress`). With `costs` (every run's estimated seconds) the time left is
    extrapolated from the share of the cost done, not of the runs: a zoo's first net3 stacks
    cost ten times its net1 runs (counting runs overstates the time left after the first). Where
    the tasks' own durations are given too (`done(..., seconds=)`), from the pace of the tasks
    done, spread over `workers`: the time elapsed also holds the stacks still in flight, which
    count for nothing until they end (a pace from the time elapsed overstates the time left). Tasks
    reported by `start` count, while in flight, for the part their time so far covers at that
    pace (a zoo's progress line otherwise counted each worker's stack in flight as wholly to do,
    up to one 30-minute stack per worker too much), and the time left is never less than what
    is left of the longest of them."""

    def __init__(
        self,
        total: int,
        started: float | None = None,
        costs: Sequence[float] | None = None,
        workers: int = 1,
    ) -> None:
        self.total, self.finished, self.workers = total, 0, workers
        self.started = time.time() if started is None else started
        self.cost_total, self.cost_done = (float(sum(costs)), 0.0) if costs else (None, 0.0)
        self.busy = 0.0  # seconds the finished tasks took, each on its own worker
        self.in_flight: dict[object, tuple[float, float]] = {}  # task: (its cost, started at)

    def start(self, task: object, cost: float | None, at: float | None = None) -> None:
        """`task`, of estimated `cost`, began training (now, or at time `at`)."""
        if cost is not None:
            self.in_flight[task] = (cost, time.time() if at is None else at)

    def done(
        self,
        runs: int,
        cost: float | None = None,
        seconds: float | None = None,
        task: object = None,
    ) -> None:
        """`runs` more finished, of estimated `cost`, in `task` that took `seconds`."""
        self.in_flight.pop(task, None)
        self.finished += runs
        self.cost_done += cost or 0.0
        self.busy += seconds or 0.0
        now = time.time()
        elapsed = now - self.started
        if self.cost_total and self.cost_done > 0 and self.busy > 0:
            pace = self.busy / self.cost_done  # seconds taken per estimated second
            # the part of each task in flight its time so far covers, at most all of it
            covered = {t: min(c, (now - at) / pace) for t, (c, at) in self.in_flight.items()}
            left = max(0.0, self.cost_total - self.cost_done - sum(covered.values()))
            # spread over the workers, but no sooner than the longest task in flight ends (the
            # last stacks of a sweep: fewer than the workers)
            rest = max((c - covered[t] for t, (c, _) in self.in_flight.items()), default=0.0)
            left = max(left / self.workers, rest) * pace
        else:
            if self.cost_total and self.cost_done > 0:
                share = self.cost_done / self.cost_total
            else:
                share = self.finished / self.total
            left = elapsed / share * (1 - share)
        log.info(
            "run %d of %d done, elapsed %s, ~%s left",
            self.finished,
            self.total,
            format_seconds(elapsed),
            format_seconds(left),
        )


def log_progress(hydra_cfg: DictConfig) -> None:
    """For a job of a sweep run one job at a time (joblib, submitit, SLURM: the stacked launcher
    reports its own progress), the sweep's `Progress` up to the jobs before it."""
    marker = Path(hydra_cfg.sweep.dir) / SWEEP_FILE
    if not marker.exists():  # e.g. a launcher that does not share the folder
        return
    invocation = json.loads(marker.read_text())["invocations"][-1]
    before = hydra_cfg.job.num  # jobs launched before this one
    if before > 0:
        Progress(invocation["jobs"], invocation["started_at"]).done(before)
