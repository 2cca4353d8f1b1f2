"""The ESGD study: what ``harness-train experiment=esgd`` (or ``python -m harness.esgd``, where the
preset is implied) runs, through the one Hydra app of harness.cli. Writes its tables (Parquet),
figures (PNG + SVG), summary.md and esgd.json to the run folder, results/esgd/<model>/.

The rows are saved after every seed: an interrupted study, started again with the same config,
trains only the seeds it lacks, and a larger ``esgd.repeats`` adds seeds to a finished one
(saved seeds are never dropped)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd
import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.devices import resolve_device
from harness.config.identity import config_hash
from harness.config.validate import DTYPES, validate_run
from harness.errors import ConfigError
from harness.esgd import tables
from harness.esgd.data import checked_data
from harness.esgd.methods import Study, run_seed
from harness.esgd.pool import Pool
from harness.esgd.record import RECORD, UNRECORDED
from harness.esgd.rendering import render
from harness.esgd.settings import settings
from harness.problems import problem_of
from harness.results import atomic_write_bytes, write_table
from harness.results.recording import package_versions
from harness.training.job import load_data

log = logging.getLogger(__name__)


def build_study(cfg: DictConfig) -> Study:
    """Check `cfg`, load and split the data, check the pool: the Study every method shares."""
    problem = problem_of(cfg)  # resolved once, passed on
    validate_run(cfg, problem)
    s = settings(cfg)
    if not problem.hand_stacked(cfg.model):  # settings() tells a classification's other model
        raise ConfigError("ESGD evolves a population of MLP classifiers: use it without +problem")
    device, dtype = resolve_device(cfg.device), DTYPES[cfg.train.dtype]
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    data = checked_data(
        problem, problem.to(load_data(cfg, problem), device, dtype), cfg.train.batch_size
    )

    def new_model(generator: torch.Generator):
        return problem.build_model(cfg, data, generator)

    pool = Pool(s.pool, s.schedules)
    pool.check(new_model(torch.Generator().manual_seed(0)))
    return Study(s, pool, problem, data, new_model, cfg.train.batch_size)


def current_form(config: dict) -> dict:
    """A study's (resolved) config as it reads since fitness moved to the validation split,
    changed in place: settings added since it was recorded given the values it ran with
    (`UNRECORDED`), the preset's placeholder `esgd.fitness_size: null` left out, and a study
    recorded with `esgd.fitness_size` read as `data.val_size` where the two hold out the same
    examples. Its split was drawn first, with a generator of its own seeded 0, from the training
    data; with all of MNIST's training and test data and `data.subset_seed` 0 that is the draw
    `data.val_size` makes now (tests/test_esgd.py checks it), so such a study resumes. Any other
    keeps its fitness_size, which no current config has: it does not."""
    esgd, data = config.get("esgd", {}), config.get("data", {})
    for key, value in UNRECORDED.items():  # a study recorded before they existed ran with these
        esgd.setdefault(key, value)
    if esgd.get("fitness_size") is None:
        esgd.pop("fitness_size", None)
    elif (
        not data.get("val_size")
        and data.get("train_size") is None
        and data.get("test_size") is None
        and data.get("subset_seed") == 0
    ):
        data["val_size"] = esgd.pop("fitness_size")
    return config


def study_id(config: dict) -> str:
    """What a study's rows depend on: its config (`current_form`) without the execution keys
    and without esgd.repeats (more repeats only add seeds)."""
    config = current_form(json.loads(json.dumps(config)))
    config.get("esgd", {}).pop("repeats", None)
    return config_hash(config)


def _earlier(out_dir: Path, identity: str) -> tuple[list[dict], dict]:
    """The rows and record of the seeds an earlier run of this study saved in `out_dir`."""
    if not (out_dir / RECORD).is_file():
        return [], {}
    record = json.loads((out_dir / RECORD).read_text())
    if study_id(record["config"]) != identity:
        raise ConfigError(
            f"{out_dir} holds an ESGD study of another config; move it away or choose another "
            "folder (hydra.run.dir=...)"
        )
    rows = pd.read_parquet(out_dir / f"{tables.INDIVIDUALS}.parquet").to_dict("records")
    return rows, record


def _save(out_dir: Path, rows: list[dict], record: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_table(pd.DataFrame(rows), out_dir / f"{tables.INDIVIDUALS}.parquet")
    atomic_write_bytes(out_dir / RECORD, (json.dumps(record, indent=1) + "\n").encode())


def execute(cfg: DictConfig, out_dir: Path) -> dict[str, pd.DataFrame]:
    """Run every method for every seed not yet in `out_dir`, saving the rows and esgd.json
    (config, times) after each seed, then everything made from them (`render`); returns the
    tables by name."""
    started = time.perf_counter()
    settings(cfg)  # bad settings are told before a folder of another study is
    config = current_form(OmegaConf.to_container(cfg, resolve=True))
    rows, record = _earlier(out_dir, study_id(config))
    study = build_study(cfg)
    s = study.settings
    seeds = range(cfg.seed, cfg.seed + s.repeats)
    seconds = {int(k): v for k, v in record.get("seconds", {}).items()}
    devices = {int(k): v for k, v in record.get("devices", {}).items()}
    earlier_wall = record.get("wall_time_s", 0.0)
    if set(seconds) & set(seeds):
        log.info("seeds %s already in %s", sorted(set(seconds) & set(seeds)), out_dir)
    device = str(study.data.y_train.device)
    for seed in seeds:
        if seed in seconds:
            continue
        new, seconds[seed] = run_seed(study, seed)
        rows += new
        devices[seed] = device
        log.info("seed %d: %s", seed, ", ".join(f"{m} {t:.0f} s" for m, t in seconds[seed].items()))
        record = {
            "config": config,
            "compute_per_method": s.population * s.steps,
            "seconds": {str(k): t for k, t in sorted(seconds.items())},
            "devices": {str(k): d for k, d in sorted(devices.items())},
            "wall_time_s": earlier_wall + time.perf_counter() - started,
            "versions": package_versions(),
        }
        _save(out_dir, rows, record)
    log.info("ESGD study written to %s (%.0f s in all)", out_dir, record["wall_time_s"])
    return render(out_dir)
