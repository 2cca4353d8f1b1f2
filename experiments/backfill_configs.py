"""Add run identities to a consolidated runs table written before runs recorded them.

    python experiments/backfill_configs.py results/lr_grid [--conf-rev GIT_REVISION]

Tables written before `config` / `config_id` existed hold each run's config hash but not its
config. This composes each run's config again from the sweep's fixed overrides
(`multirun.yaml`) and the run's own (its folder name, Hydra's override_dirname), with the
repository's conf/ or with conf/ as of `--conf-rev` (the revision the sweep ran with), and
accepts it only if its hash is the one the run recorded: a config is never guessed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

import pandas as pd
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from harness.config.identity import NOT_COMPUTED_KEYS, config_hash, identity_config, identity_hash
from harness.results import RUNS_TABLE, write_table

REPO = Path(__file__).resolve().parent.parent


def conf_dir(revision: str | None, scratch: Path) -> Path:
    if revision is None:
        return REPO / "conf"
    archive = subprocess.run(
        ["git", "archive", revision, "conf"], cwd=REPO, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(scratch, filter="data")
    return scratch / "conf"


def composed_config(overrides: list[str]) -> dict:
    cfg = compose("config", overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)  # `${hydra:runtime.choices...}` resolves as in a job
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg, resolve=True)


def backfill(sweep_dir: Path, revision: str | None) -> int:
    runs = pd.read_parquet(sweep_dir / RUNS_TABLE)
    task = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task
    fixed = [o for o in task if o.split("=", 1)[0] not in NOT_COMPUTED_KEYS]
    configs, ids = [], []
    with tempfile.TemporaryDirectory() as scratch:
        conf = conf_dir(revision, Path(scratch))
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            for run_dir, recorded in zip(runs["run_dir"], runs["config_hash"], strict=True):
                own = Path(run_dir).name.split(",")
                config = composed_config([*fixed, *own])
                if config_hash(config) != recorded:
                    raise SystemExit(f"{run_dir}: the composed config does not hash to {recorded}")
                identity = identity_config(config)
                configs.append(json.dumps(identity, sort_keys=True, default=str))
                ids.append(identity_hash(identity))
    write_table(runs.assign(config_id=ids, config=configs), sweep_dir / RUNS_TABLE)
    return len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--conf-rev", default=None, help="git revision of conf/ the sweep ran with")
    args = parser.parse_args()
    print(f"{args.sweep_dir}: {backfill(args.sweep_dir, args.conf_rev)} runs backfilled")


if __name__ == "__main__":
    main()
