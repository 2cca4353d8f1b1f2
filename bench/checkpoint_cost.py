"""What do a stack's checkpoints cost?

    python bench/checkpoint_cost.py                  # a net3 stack of 18 zoo optimizers
    python bench/checkpoint_cost.py --models 6 --iterations 1000

One stack of net3 models (the zoo's mix of update paths: stacked rules, optimizers' own steps,
Adam-like and matrix states), side by side in one invocation: trained without checkpoints, then
with a checkpoint at every log point (`checkpoint_every_s=0`, the most a sweep can save). It
prints the training times, the saves' count, mean time and file size, and what the default
interval (hydra.launcher.checkpoint_every_s, 300 s) costs: a save's time over the interval.
Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.stacking.stack import execute_group
from harness.training.checkpoint import Checkpoint
from harness.training.job import Job

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))
# The zoo's mix: the course's stacked rules, element-wise third-party steps, factored and
# matrix (orthogonalised) states.
OPTIMIZERS = (
    "adam",
    "momentum",
    "rmsprop",
    "lion",
    "adan",
    "adafactor",
    "adamuon",
    "amos",
    "ademamix",
)
DEFAULT_INTERVAL_S = 300.0


def jobs(folder: Path, root: str, models: int, iterations: int) -> list[Job]:
    cfgs = [
        compose(
            "config",
            [
                f"data.root={root}",
                "model=net3",
                f"optimizer={OPTIMIZERS[i % len(OPTIMIZERS)]}",
                f"seed={i // len(OPTIMIZERS)}",
                f"train.iterations={iterations}",
                f"train.eval_every={iterations}",
                "train.progress=false",
            ],
        )
        for i in range(models)
    ]
    return [Job.of(cfg, folder / f"run{i}") for i, cfg in enumerate(cfgs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=18)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    args = parser.parse_args()

    saves: list[float] = []
    sizes: list[int] = []
    save = Checkpoint.save

    def timed_save(self: Checkpoint, state: dict) -> None:
        tic = time.perf_counter()
        save(self, state)
        saves.append(time.perf_counter() - tic)
        sizes.append(self.state_path.stat().st_size)

    Checkpoint.save = timed_save  # type: ignore[method-assign]
    times = {}
    with initialize_config_dir(str(REPO / "conf"), version_base=None):
        for name, every_s in (("without checkpoints", None), ("checkpoint every log", 0.0)):
            with tempfile.TemporaryDirectory() as tmp:
                group = jobs(Path(tmp), args.data_root, args.models, args.iterations)
                tic = time.perf_counter()
                records = execute_group(group, threads=1, checkpoint_every_s=every_s)
                times[name] = (time.perf_counter() - tic, records[0]["train_time_s"])
    print(f"net3 stack of {args.models} models x {args.iterations} steps, 1 thread")
    for name, (wall, train) in times.items():
        print(f"  {name:22s} wall {wall:7.2f} s   training {train:7.2f} s")
    mean = statistics.mean(saves)
    print(f"  saves: {len(saves)}, {mean * 1000:.0f} ms each, {sizes[-1] / 2**20:.1f} MiB")
    share = mean / DEFAULT_INTERVAL_S
    print(f"  every {DEFAULT_INTERVAL_S:.0f} s (the default): {share:.3%} of the training time")


if __name__ == "__main__":
    main()
