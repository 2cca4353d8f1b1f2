"""The zoo on a GPU against this project's CPU: the same runs, their time and results.

    python experiments/zoo_devices.py

A lent GPU (an H200, 15 minutes of device time each loan) trained slices of the study with its
own commands, for as long as a call allowed; their tables are in `results/zoo/h200/`:

* `phase1_singles_runs.parquet`: phase 1 (`harness-train -m experiment=zoo_tune`) planned there
  (every optimizer x net checked and timed), then its first tasks: the runs that train alone
  (AdaHessian, Gravity, ...);
* `phase1_net3_stacks_runs.parquet`: phase 1's net3 with the optimizers that stack
  (`model=net3 optimizer=<the stackable names>`), its first stack of 61 models;
* `phase2_net3_runs.parquet`: phase 2 (`experiment=zoo_shortlist`, 20,000 iterations) on net3,
  the best phase-1 trial (`tune.budget=1`) of the optimizers whose phase-2 run of that trial
  the CPU had finished (`phase2_optimizers.txt`): one stack of 17;
* `phase2_net3_more_runs.parquet`: the same for 36 more (`phase2_more.txt`; the GPU split them
  into stacks of 7, 10, 10 and 9 by its own step times), until the call's time ran out: 17 runs
  of two stacks.

The script is `zoo_phase2_net3.sh` (`LIST=phase2_more.txt` for the second), copied here.

Their `sweep_*.txt` are the sweeps' logs. Each GPU run is matched to the CPU's run of the same
folder (same config, same seed: same lr draw) in the phase's sweep (`results/zoo_wide_tune`,
`results/zoo_wide_shortlist`). Writes results/zoo/devices.md: the time of the same work on both
machines, and how far their results differ (float rounding differs between devices: not
bitwise; the runs that draw random numbers in their step draw other ones on the GPU, and rank
least alike).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from harness import storage

ROOT = Path(__file__).resolve().parents[1]
GPU_DIR = ROOT / "results" / "zoo" / "h200"  # the H200's runs tables, one per slice
# slice: (the GPU's runs table, the CPU sweep of its phase: the zoo as it was tuned then, one
# range of rates for every optimizer)
SLICES = {
    "phase 1, runs that train alone": ("phase1_singles_runs.parquet", "zoo_wide_tune"),
    "phase 1, net3 stacks": ("phase1_net3_stacks_runs.parquet", "zoo_wide_tune"),
    "phase 2, a net3 stack": ("phase2_net3_runs.parquet", "zoo_wide_shortlist"),
    "phase 2, net3, more": ("phase2_net3_more_runs.parquet", "zoo_wide_shortlist"),
}


def share(runs: pd.DataFrame) -> pd.Series:
    """Each run's share of its stack's time (a stacked run's train_time_s is its stack's: the
    stack's runs share one value; a run alone has its own), by run folder: the time of the runs
    matched, where a slice matched part of a stack."""
    stack = runs.groupby(["model", "train_time_s"])["run_dir"].transform("size")
    return pd.Series((runs["train_time_s"] / stack).to_numpy(), index=runs["run_dir"])


def compare(gpu: pd.DataFrame, cpu: pd.DataFrame) -> dict[str, float]:
    both = gpu.merge(cpu, on="run_dir", suffixes=("_gpu", "_cpu"))
    completed = both[(both.status_gpu == "completed") & (both.status_cpu == "completed")]
    gap = (completed.final_val_accuracy_gpu - completed.final_val_accuracy_cpu).abs() * 100
    return {
        "runs": len(both),
        "gpu s": both["run_dir"].map(share(gpu)).sum(),
        "cpu s": both["run_dir"].map(share(cpu)).sum(),
        "gpu alone s": (both.step_time_alone_s_gpu * both.iterations_gpu).sum(),
        "cpu alone s": (both.step_time_alone_s_cpu * both.iterations_cpu).sum(),
        "same status": int((both.status_gpu == both.status_cpu).sum()),
        "median gap": gap.median(),
        "max gap": gap.max(),
        "spearman": spearmanr(completed.final_val_accuracy_gpu, completed.final_val_accuracy_cpu)[
            0
        ],
    }


def main(gpu_dir: Path) -> None:
    lines = [
        "The zoo's phase 1 (`experiment=zoo_tune`: 2,000 iterations, seed 0) and phase 2 "
        "(`experiment=zoo_shortlist`: 20,000 iterations, seed 0) on a lent NVIDIA "
        "H200 (one process, the stacked launcher's default on a GPU) and on this project's "
        "2-core AMD EPYC (two single-threaded worker processes), for the same runs. "
        "GPU s: their share of the GPU stacks they trained in (a stack's time over its runs), "
        "or their own time alone. CPU s: their share "
        "of the CPU stacks they trained in, or their own time "
        "alone; a core's seconds, with the other core busy with another stack. Alone: the "
        "runs' steps times their optimizer's step alone, as each machine's check timed it. "
        "Gap: |final validation accuracy on the GPU - on the CPU| in points, over the runs "
        "that completed on both. Phase 3 (a net3 stack of 36 on a lent H100) did not finish "
        "within its device time: `results/zoo/h100/README.md`. "
        "Written by `experiments/zoo_devices.py`.",
        "",
        "| slice | runs | GPU s | CPU s | CPU / GPU | GPU alone s | CPU alone s "
        "| same status | median gap | max gap | Spearman |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (file, phase) in SLICES.items():
        cpu = storage.read_runs(ROOT / "results" / phase)
        c = compare(pd.read_parquet(gpu_dir / file), cpu)
        lines.append(
            f"| {name} | {c['runs']} | {c['gpu s']:.0f} | {c['cpu s']:.0f} "
            f"| {c['cpu s'] / c['gpu s']:.1f}x | {c['gpu alone s']:.0f} | {c['cpu alone s']:.0f} "
            f"| {c['same status']}/{c['runs']} | {c['median gap']:.2f} | {c['max gap']:.2f} "
            f"| {c['spearman']:.3f} |"
        )
    out = ROOT / "results" / "zoo" / "devices.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    argparse.ArgumentParser(
        prog="zoo_devices",
        description="The zoo on the H200 against this CPU: results/zoo/devices.md.",
    ).parse_args()
    main(GPU_DIR)
