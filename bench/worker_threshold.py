"""From how much work does a sweep train faster in worker processes than in this process?

    python bench/worker_threshold.py                 # net1 and net3 sweeps of growing length
    python bench/worker_threshold.py --repeats 3

For sweeps of 8 stackable runs (net1, net3) of growing length, side by side in one invocation:
`execute_jobs` in this process (one stack, one thread) and in one single-threaded worker process
per core (one sub-stack each, data shared), each timed whole: starting the workers, handing
them the data, training, writing results. It prints the estimated work of each sweep
(harness.sweeps.plan.estimated_work) with both times; harness.sweeps.plan.WORKER_THRESHOLD
is set where the workers start to win. Data root: --data-root or $HARNESS_DATA_ROOT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.sweeps import execute
from harness.sweeps import plan as planning
from harness.training.job import Job

REPO = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = os.environ.get("HARNESS_DATA_ROOT", str(REPO.parent / "shared" / "data" / "mnist"))
OPTIMIZERS = ("sgd", "momentum", "adam", "rmsprop")


def sweep(root: str, net: str, iterations: int) -> list:
    """8 runs that stack: 4 optimizers x 2 learning rates, evaluated at the start and the end."""
    return [
        compose(
            "config",
            [
                f"data.root={root}",
                f"model={net}",
                f"optimizer={optimizer}",
                f"optimizer.lr={lr}",
                "data.train_size=10000",
                f"train.iterations={iterations}",
                f"train.eval_every={iterations}",
                "train.log_every=10",
                "train.progress=false",
            ],
        )
        for optimizer in OPTIMIZERS
        for lr in (0.001, 0.01)
    ]


def timed(cfgs: list, use_workers: bool) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [Job.of(cfg, Path(tmp) / str(i)) for i, cfg in enumerate(cfgs)]
        tic = time.perf_counter()
        execute.execute_jobs(jobs, use_workers=use_workers)
        return time.perf_counter() - tic


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-root", default=DEFAULT_ROOT)
    parser.add_argument("--repeats", type=int, default=2, help="medians of this many (default 2)")
    parser.add_argument("--net1", default="500,2000,8000,20000", help="iterations of net1 sweeps")
    parser.add_argument("--net3", default="100,400,1000,2500", help="iterations of net3 sweeps")
    args = parser.parse_args()
    print(f"# Worker processes or not: 8 stackable runs, {os.cpu_count()} cores")
    print(f"WORKER_THRESHOLD = {planning.WORKER_THRESHOLD:.3g}\n")
    print("| net | iterations | estimated work | this process (s) | workers (s) | faster |")
    print("|---|---:|---:|---:|---:|---|")
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        for net in ("net1", "net3"):
            for iterations in map(int, getattr(args, net).split(",")):
                cfgs = sweep(args.data_root, net, iterations)
                work = sum(map(planning.estimated_work, cfgs))
                here, workers = [], []
                for _ in range(args.repeats):  # interleaved: both see the same machine load
                    here.append(timed(cfgs, use_workers=False))
                    workers.append(timed(cfgs, use_workers=True))
                here_s, workers_s = statistics.median(here), statistics.median(workers)
                faster = "workers" if workers_s < here_s else "this process"
                print(
                    f"| {net} | {iterations} | {work:.3g} | {here_s:.1f} | {workers_s:.1f} "
                    f"| {faster} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
