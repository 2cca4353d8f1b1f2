"""Hydra sweeper `hydra/sweeper=tune`: a tuning study with a stated budget.

Every combination of the sweep's grid axes (`hydra.sweeper.params` and the command line, as the
basic sweeper reads them: net, optimizer, seed, ...) is tuned on its own: `tune.budget` trials
drawn from the search space of its optimizer (`tune.space`, see harness.tuning.search), each with
every seed of the seed axis. All trials of all combinations go to the launcher as one batch, so the
default stacked launcher trains the trials of a net together, as one stack; where
`tune.beyond_edge` asks, each further round (the picks at the edge of their range, searched
again beyond it) is one more batch. The protocol is
written to `tuning.json` in the sweep folder; the runs' configs hold what each trial drew.

Random search and grids are harness.tuning.search's; Hydra's Optuna sweeper (TPE) tunes one
combination per command (experiment=tune_tpe).
"""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.

import json
import logging
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


class TuningSweeper(Sweeper):
    def __init__(self, params: dict | None = None) -> None:
        self.params = dict(params or {})
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from harness.sweeps.jobs import tuning_protocol

        self.config, self.hydra_context = config, hydra_context
        tuning_protocol(config)  # bad input stops here, before the sweep folder exists
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        from harness.sweeps.jobs import TuningPlan, add_planned
        from harness.tuning.search import PROTOCOL_FILE, tuned_keys

        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        # A shortlist and a centred range read each combination's config: the stacked
        # launcher's composer, or Hydra's own loader under any other launcher.
        loader = self.hydra_context.config_loader
        compose = getattr(loader, "compose", None) or (
            lambda overrides: loader.load_sweep_config(self.config, list(overrides))
        )
        plan = TuningPlan(self.config, compose)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        tune = plan.tune
        protocol = {**tune, "tuned_keys": tuned_keys(tune), "axes": self.params}
        (sweep_dir / PROTOCOL_FILE).write_text(json.dumps(protocol, indent=2, default=str))
        log.info(
            "tuning: %s search, %d trials per combination: %d runs",
            tune["method"],
            tune["budget"],
            len(plan.jobs),
        )
        batches, jobs = [], plan.jobs
        while jobs:
            self.validate_batch_is_legal(jobs)
            returns = self.launcher.launch(jobs, initial_job_idx=sum(map(len, batches)))
            for result in returns:
                _ = result.return_value  # raises the error of a job that failed
            batches.append(returns)
            jobs = plan.next_round(sweep_dir)
            if jobs:
                add_planned(sweep_dir, len(jobs))
                log.info("beyond the edge, round %d: %d more runs", plan.rounds, len(jobs))
        return batches
