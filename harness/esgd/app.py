"""`python -m harness.esgd [overrides]`: the ESGD study as a Hydra app over the repository's
conf/ with ``experiment=esgd`` (implied when no experiment is given). Writes its tables (Parquet),
figures (PNG + SVG), summary.md and esgd.json to the run folder, results/esgd/<model>/."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import hydra
import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.data import NUM_CLASSES
from harness.errors import HarnessError, exit_with_error
from harness.esgd import figures, tables
from harness.esgd.data import split_data
from harness.esgd.methods import Problem, run_seed
from harness.esgd.pool import Pool
from harness.esgd.settings import settings
from harness.run import build, package_versions, resolve_device
from harness.validate import DTYPES, validate_run

log = logging.getLogger(__name__)
PROG = "python -m harness.esgd"
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
RECORD = "esgd.json"  # the study's config, wall times and package versions


def build_problem(cfg: DictConfig) -> Problem:
    """Check `cfg`, load and split the data, check the pool: the Problem every method shares."""
    validate_run(cfg)
    s = settings(cfg)
    device, dtype = resolve_device(cfg.device), DTYPES[cfg.train.dtype]
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    split = split_data(cfg, s.fitness_size, device, dtype)

    def new_model(generator: torch.Generator):
        features = split.x_train.shape[1]
        model = build(cfg.model, in_features=features, num_classes=NUM_CLASSES, generator=generator)
        return model.to(device=device, dtype=dtype)

    pool = Pool(s.pool, s.schedules)
    pool.check(new_model(torch.Generator().manual_seed(0)))
    return Problem(s, pool, split, new_model, cfg.train.batch_size)


def execute(cfg: DictConfig, out_dir: Path) -> dict[str, pd.DataFrame]:
    """Run every method for every seed, write the rows and esgd.json (config, times) into
    `out_dir`, then everything made from them (`render`); returns the tables by name."""
    started = time.perf_counter()
    problem = build_problem(cfg)
    s = problem.settings
    rows, seconds = [], {}
    for seed in range(cfg.seed, cfg.seed + s.repeats):
        new, seconds[seed] = run_seed(problem, seed)
        rows += new
        log.info("seed %d: %s", seed, ", ".join(f"{m} {t:.0f} s" for m, t in seconds[seed].items()))
    out_dir.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(out_dir / f"{tables.INDIVIDUALS}.parquet", index=False)
    record = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "compute_per_method": s.population * s.steps,
        "seconds": {str(seed): t for seed, t in seconds.items()},
        "wall_time_s": time.perf_counter() - started,
        "versions": package_versions(),
    }
    (out_dir / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    log.info("ESGD study written to %s in %.0f s", out_dir, record["wall_time_s"])
    return render(out_dir)


def render(out_dir: Path) -> dict[str, pd.DataFrame]:
    """From a study's rows and esgd.json: its tables, figures and summary.md (again)."""
    out_dir = Path(out_dir)
    record = json.loads((out_dir / RECORD).read_text())
    cfg = OmegaConf.create(record["config"])
    individuals = pd.read_parquet(out_dir / f"{tables.INDIVIDUALS}.parquet")
    written = tables.write_tables(individuals, cfg.esgd.top_k, cfg.esgd.elite, out_dir)
    figures.write_figures(written, out_dir)
    summary = figures.summary_markdown(written, cfg, record["wall_time_s"])
    (out_dir / "summary.md").write_text(summary)
    return written


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _app(cfg: DictConfig) -> None:
    try:
        execute(cfg, Path(HydraConfig.get().runtime.output_dir))
    except HarnessError as exc:
        exit_with_error(PROG, str(exc))


def main() -> None:
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra's errors raised, to be reported in one line
    if not any(arg.startswith("experiment=") for arg in sys.argv[1:]):
        sys.argv.insert(1, "experiment=esgd")
    try:
        _app()
    except (HydraException, OmegaConfBaseException) as exc:
        exit_with_error(PROG, " ".join(str(exc).split())[:500])
