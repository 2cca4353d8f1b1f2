"""A small sweep on real MNIST for the analysis, report and notebook tests.

2 nets x 3 optimizers x 2 seeds, 60 steps on a 2,000-image subset: at batch 128 every learning
rate of LEARNING_RATES (sgd's 50 diverges at once), at batch 64 one learning rate per optimizer
(BATCH_64_LR): 40 runs, ~8 s on 2 idle cores. Every run is made with `harness.training.run.execute`
into a subfolder, then the folder is consolidated with `harness.results.collect`, as a committed
study is.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from conftest import SMALL_RUN, compose_config, hydra_context
from harness.results import RUNS_TABLE, collect

NETS = ("net1", "net2")
LEARNING_RATES = {"sgd": (0.05, 0.5, 50.0), "momentum": (0.01, 0.1), "adam": (0.001, 0.01)}
BATCH_SIZES = (64, 128)
BATCH_64_LR = {"sgd": 0.5, "momentum": 0.1, "adam": 0.01}
SEEDS = (0, 1)
SETTINGS = [*SMALL_RUN, "train.progress=false", "threads=1"]
# A test-accuracy target that some configs of this short sweep reach and others do not.
TARGET = 0.8


def make_smoke_sweep(sweep_dir: Path, mnist_dir: Path) -> Path:
    """Run the smoke sweep into `sweep_dir` and consolidate it (runs.parquet, curves.parquet)."""
    from harness.training.run import execute  # torch: only when a sweep is made

    grid = [
        (net, optimizer, lr, batch_size, seed)
        for net, (optimizer, lrs), batch_size, seed in itertools.product(
            NETS, LEARNING_RATES.items(), BATCH_SIZES, SEEDS
        )
        for lr in lrs
        if batch_size == 128 or lr == BATCH_64_LR[optimizer]
    ]
    with hydra_context():
        for number, (net, optimizer, lr, batch_size, seed) in enumerate(grid):
            cfg = compose_config(
                [
                    f"data.root={mnist_dir}",
                    f"model={net}",
                    f"optimizer={optimizer}",
                    f"optimizer.lr={lr}",
                    f"train.batch_size={batch_size}",
                    f"seed={seed}",
                    *SETTINGS,
                ]
            )
            choices = {"model": net, "optimizer": optimizer, "schedule": "constant"}
            execute(cfg, sweep_dir / f"{number:03d}", choices | {"data": "mnist"})
    collect(sweep_dir)
    return sweep_dir


def shared_smoke_sweep(base: Path, mnist_dir: Path) -> Path:
    """The smoke sweep under `base`, made once even when several pytest-xdist workers ask for
    it at the same time (the first makes it under a file lock, the others wait and reuse it)."""
    from filelock import FileLock

    sweep_dir = base / "smoke-sweep"
    with FileLock(str(base / "smoke-sweep.lock")):
        if not (sweep_dir / RUNS_TABLE).exists():
            tmp = base / f"smoke-sweep.tmp{os.getpid()}"
            make_smoke_sweep(tmp, mnist_dir)
            tmp.rename(sweep_dir)
    return sweep_dir
