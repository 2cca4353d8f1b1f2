"""A sweep's jobs: what Hydra's basic sweeper, or a tuning study's plan (`TuningPlan`: its
first round, then the rounds beyond an edge), expands a sweep into; how many runs it plans; and
what identifies it (`sweep_identity`, recorded in sweep.json)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from harness.config.identity import executes, override_key
from harness.errors import ConfigError
from harness.results import SWEEP_FILE, atomic_write_bytes, collect

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
        self.compose, self.rounds = compose, 0
        self._identities: dict[tuple[str, ...], dict[str, Any]] = {}
        self._optimizers: dict[tuple[str, ...], dict[str, Any]] = {}
        optimizer_of = self._optimizer if compose is not None else None
        self.combinations = combinations_of(expanded, self.tune, default_optimizer, optimizer_of)
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

    def _optimizer(self, given: list[str]) -> dict[str, Any]:
        """The optimizer node of a combination's config, resolved (composed once): where the
        search over every hyper-parameter finds its keys and defaults."""
        key = tuple(given)
        if key not in self._optimizers:
            node = self.compose(given).get("optimizer") or {}
            self._optimizers[key] = OmegaConf.to_container(node, resolve=True)
        return self._optimizers[key]

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
        from harness.tuning.search import beyond_edge, centre, tuned_keys
        from harness.tuning.selection import edges, group_of

        edge = self.tune.get("beyond_edge")
        if not edge or self.compose is None or self.rounds >= edge["rounds"]:
            return []
        self.rounds += 1
        collect(sweep_dir)
        key, _ = centre(self.tune)
        # a combination's trials differ in every key its space tunes, not the rate alone
        dropped = sorted({key, *tuned_keys(self.tune)})
        sides = edges(sweep_dir, key, dropped)
        jobs = []
        for combination in self.combinations:
            side = combination.region and sides.get(
                group_of(self._identity(combination.given), dropped)
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
