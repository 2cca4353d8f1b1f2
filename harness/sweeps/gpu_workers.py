"""How many worker processes share one GPU in a sweep (harness.sweeps.plan).

On a GPU a stack's step is mostly host work: Python launching small kernels (or replaying a CUDA
graph), counting steps, stepping schedules and the optimizers that run their own step(). One
process drives the GPU with one core while the others wait, so the launcher trains a large
sweep's stacks in worker processes on CUDA too (each its own stacks, as on the CPU), all on the
same device. The rule (`cuda_workers`):

    workers = min(cores - 1, CUDA_WORKER_CAP, the most whose estimated memory fits the device)

One core is left to the launcher's process. The cap bounds the contexts the GPU switches
between (without MPS, the kernels of different processes take turns) and the start-up each
worker costs (importing torch, creating its CUDA context: seconds): 8, a choice that no
measurement has checked yet (bench/device.py measures the default against one process). The
memory of a worker (`worker_bytes`) is an estimate, written down:

* PROCESS_BYTES for its CUDA context, cuBLAS workspaces and the caching allocator's slack;
* its copy of the data set on the device, in the run's dtype;
* its largest stack (`stack_bytes`): of each group of a sweep's runs that stack alike
  (harness.stacking.grouping.stack_key), dealt to the workers (or `max_stack`), the costliest; per
  model its parameters PARAMETER_COPIES times (weights, gradients, up to three optimizer states, a
  probe's copy), a step's activations twice (an eager step's and a CUDA graph's pool) and an
  evaluation chunk's (the problem's `eval_chunk` examples through the widest layer); the
  parameters are the problem's FLOPs of a step over 4 x batch (an MLP's step costs at least 4
  FLOPs per parameter and example), the widths its model's `hidden` (an MLP's).

The sum may use MEMORY_SHARE of the device's memory, read with nvidia-smi: this process does
not initialise CUDA before it starts the workers (which are spawned, not forked, so they would
not inherit it; a context would still hold device memory here).
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Sequence

import torch

from harness.config.validate import DTYPES
from harness.stacking.grouping import stack_key
from harness.training.job import Job, load_data

CUDA_WORKER_CAP = 8
PROCESS_BYTES = 2**30
MEMORY_SHARE = 0.9
PARAMETER_COPIES = 6
ACTIVATION_COPIES = 2
CLASSES = 10  # the output layer's width, as an MLP's for MNIST


def stack_bytes(job: Job, models: int) -> float:
    """Estimated device memory of a stack of `models` runs like `job` (see the module)."""
    cfg = job.cfg
    size = DTYPES[cfg.train.dtype].itemsize
    batch = cfg.train.batch_size
    parameters = job.problem.flops(cfg) / (4 * batch)
    widths = [*cfg.model.get("hidden", []), CLASSES]
    features = getattr(load_data(cfg, job.problem), "num_features", 0)
    per_model = (
        parameters * PARAMETER_COPIES
        + batch * (features + 2 * sum(widths)) * ACTIVATION_COPIES
        + job.problem.eval_chunk * 3 * max(widths)
    )
    return models * per_model * size


def data_bytes(job: Job) -> float:
    """The job's data set on the device: its tensors, floating ones in the run's dtype."""
    size = DTYPES[job.cfg.train.dtype].itemsize
    tensors = job.problem.tensors(load_data(job.cfg, job.problem))
    return sum(t.numel() * (size if t.is_floating_point() else t.element_size()) for t in tensors)


def worker_bytes(job: Job, models: int) -> float:
    """Estimated device memory of a worker whose largest stack holds `models` runs like `job`."""
    return PROCESS_BYTES + data_bytes(job) + stack_bytes(job, models)


def cuda_workers(
    jobs: Sequence[Job], memory: int | None, cores: int, max_stack: int | None = None
) -> tuple[int, str]:
    """Worker processes for `jobs` on one GPU of `memory` bytes (None: unknown) on a machine of
    `cores` cores, by the module's rule; and the rule with its numbers, for the log."""
    most = max(1, min(cores - 1, CUDA_WORKER_CAP))
    rule = f"min({cores} cores - 1, cap {CUDA_WORKER_CAP}"
    if memory is None:
        return most, rule + "; the device's memory unknown)"
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        groups.setdefault(stack_key(job), []).append(job)
    budget = MEMORY_SHARE * memory
    for workers in range(most, 0, -1):
        each = max(
            worker_bytes(group[0], _stack_size(group, workers, max_stack))
            for group in groups.values()
        )
        if workers * each <= budget:
            break
    within = "within" if workers * each <= budget else "beyond"
    return workers, (
        f"{rule}, memory: {workers} x {each / 2**30:.2f} GiB estimated {within} "
        f"{MEMORY_SHARE:.0%} of {memory / 2**30:.1f} GiB)"
    )


def _stack_size(group: list[Job], workers: int, max_stack: int | None) -> int:
    """Models in the largest stack of a group of runs that stack, dealt to `workers`."""
    return min(math.ceil(len(group) / workers), max_stack or len(group))


def device_memory(device: torch.device) -> int | None:
    """Total memory of the CUDA device `device` in bytes, from nvidia-smi (see the module);
    from torch where nvidia-smi cannot tell (CUDA's runtime initialised here then, which the
    spawned workers do not inherit); None where neither can."""
    query = ["--query-gpu=memory.total", "--format=csv,noheader,nounits"]
    try:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        index = device.index or 0
        gpu = visible.split(",")[index].strip() if visible else str(index)
        out = subprocess.run(
            ["nvidia-smi", f"--id={gpu}", *query],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return int(out.stdout.split()[0]) * 2**20  # MiB
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return _torch_memory(device)


def _torch_memory(device: torch.device) -> int | None:
    try:
        return torch.cuda.get_device_properties(device).total_memory
    except (RuntimeError, AssertionError):
        return None
