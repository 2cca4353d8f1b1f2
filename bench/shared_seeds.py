"""The evaluation phase of a study, its seeds: three ways of training S seeds of N optimizers.

    python bench/shared_seeds.py                          # net2, 3 seeds, 500 iterations
    python bench/shared_seeds.py --nets net1,net3 --seeds 5 --iterations 1000

Side by side in one invocation, on the same data, configs and iterations, interleaved
--repeats times (medians):
  (a) before: one stack per seed (runs of different seeds could not stack: a stack had one data
      order), S stacks one after another, each model stepping its own optimizer;
  (b) the seeds in one stack, each model with its own data order (a batch per model), each
      model stepping its own optimizer (`train_stack(..., share=False)`);
  (c) the default: (b) with the seeds of each configuration sharing one instance of their
      optimizer where the sharing probe allows it (element-wise updates: `shared_step`).
Each path's final training losses are compared with (a)'s: the three must agree to float32
rounding. Times are optimisation only (evaluations excluded), per model and iteration.
Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.stacking.stack import train_stack
from harness.training import run as run_module
from harness.training.job import Job

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))
# Optimizers of the zoo with element-wise updates (they share), torch's Adam (the course's
# stacked rule on net1, torch's fused step on net2/net3), and LAMB (per-tensor norms: it
# cannot share, each of its seeds steps its own instance in (c) too).
OPTIMIZERS = {
    "adam": 1e-3,
    "lion": 1e-4,
    "adopt": 1e-3,
    "adan": 1e-3,
    "madgrad": 1e-3,
    "schedulefreeadamw": 1e-3,
    "pto_radam": 1e-3,
    "lamb": 1e-2,
}


def configs(root: str, net: str, seeds: int, iterations: int) -> list[list]:
    """The configs of each seed (seed-major): every optimizer at its rate."""
    return [
        [
            compose(
                "config",
                [
                    f"data.root={root}",
                    f"model={net}",
                    f"optimizer={name}",
                    f"optimizer.lr={lr}",
                    f"seed={seed}",
                    f"train.iterations={iterations}",
                    f"train.eval_every={iterations}",
                    "train.log_every=10",
                    "train.progress=false",
                ],
            )
            for name, lr in OPTIMIZERS.items()
        ]
        for seed in range(1, seeds + 1)
    ]


def trained(cfgs: list, share: bool) -> tuple[float, list[float], list[str]]:
    """Optimisation seconds of one stack of `cfgs`, each run's last batch loss, its path."""
    runs = [run_module.prepare(Job.of(c, "unused")) for c in cfgs]
    outcomes = train_stack(runs, share=share)
    losses = [
        next(v for _, _, _, m, v in reversed(o.recorder.rows) if m == "batch_loss")
        for o in outcomes
    ]
    return outcomes[0].train_time_s, losses, [o.update_path for o in outcomes]


def one_stack_per_seed(per_seed: list[list]) -> tuple[float, list[float], list[str]]:
    results = [trained(cfgs, share=False) for cfgs in per_seed]
    return (
        sum(r[0] for r in results),
        [loss for r in results for loss in r[1]],
        [p for r in results for p in r[2]],
    )


def seeds_in_one_stack(share: bool) -> Callable[[list[list]], tuple]:
    def path(per_seed: list[list]) -> tuple[float, list[float], list[str]]:
        return trained([c for cfgs in per_seed for c in cfgs], share=share)

    return path


PATHS = {
    "(a) one stack per seed": one_stack_per_seed,
    "(b) seeds in one stack": seeds_in_one_stack(share=False),
    "(c) ... sharing an instance": seeds_in_one_stack(share=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default="net2")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    args = parser.parse_args()
    models = args.seeds * len(OPTIMIZERS)
    print(
        f"{len(OPTIMIZERS)} optimizers x {args.seeds} seeds = {models} models, "
        f"{args.iterations} iterations, medians of {args.repeats} interleaved repeats"
    )
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for net in args.nets.split(","):
            per_seed = configs(args.data_root, net, args.seeds, args.iterations)
            times: dict[str, list[float]] = {name: [] for name in PATHS}
            found: dict[str, tuple] = {}
            for _ in range(args.repeats):
                for name, path in PATHS.items():
                    found[name] = path(per_seed)
                    times[name].append(found[name][0])
            base_losses = found["(a) one stack per seed"][1]
            shared = sum(p == "shared_step" for p in found["(c) ... sharing an instance"][2])
            print(f"\n{net}: {shared} of {models} models in a shared instance in (c)")
            print(f"{'path':32} {'ms/model/it':>12} {'vs (a)':>8} {'max |loss - (a)|':>18}")
            base = statistics.median(times["(a) one stack per seed"])
            for name in PATHS:
                median = statistics.median(times[name])
                per = median / models / args.iterations * 1e3
                # (a) orders its runs seed-major like the others: the same run at each position
                gap = max(abs(a - b) for a, b in zip(found[name][1], base_losses, strict=True))
                print(f"{name:32} {per:12.4f} {median / base:8.2f} {gap:18.2e}")


if __name__ == "__main__":
    main()
