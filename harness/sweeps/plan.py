"""Planning a sweep's training: which engine trains each job, how the jobs group into tasks
(stacks, or runs trained alone), how much work that is, and how many worker processes share it.

* `requested_engine` is the one place `train.engine` is read. `auto` (the default) and `stacked`
  train the runs that group (grouping.stack_key) as one stacked model; `auto` trains a run alone
  in its group with the single-run engine, `stacked` as a stack of one. `single` trains every run
  by itself with the single-run engine. A run that cannot stack (grouping.refusal) trains with
  the single-run engine; the log says why.
* Worker processes cost seconds to start (each imports torch), so they start only when the
  estimated work (`estimated_work`) of a sweep reaches WORKER_THRESHOLD, measured with
  bench/worker_threshold.py. Then each group is split into one sub-stack per worker (`plan`).
  On the CPU there is one worker per core; on a GPU they share the device
  (`harness.sweeps.gpu_workers.cuda_workers`).

harness.sweeps.execute trains the tasks planned here.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import DictConfig

from harness.stacking.grouping import refusal, stack_key
from harness.sweeps.gpu_workers import cuda_workers, device_memory
from harness.training import checkpoint
from harness.training.first_step import checked_step_time
from harness.training.job import Job, train_size

log = logging.getLogger(__name__)

# Estimated work (see `estimated_work`) from which a sweep trains in worker processes. Each
# worker costs seconds to start (a Python process importing torch: 10 s here under load), and
# on this project's shared 2-core machine the two single-threaded workers did not beat one
# process even at 5e12 (8 net3 runs x 4,000 steps: 147 s in this process, 168 s in workers;
# bench/worker_threshold.py, README's Speed section): only sweeps well above that start them.
WORKER_THRESHOLD = 1e13
# Per model and step, the optimizer update and Python's own work, counted as FLOPs (measured:
# a step of net1, 4 MFLOP of arithmetic, costs about as much as 9 MFLOP).
STEP_OVERHEAD_FLOPS = 5e6


def requested_engine(cfg: DictConfig) -> str:
    """The engine a run asks for: train.engine, one of single, stacked, auto."""
    return cfg.train.engine


def estimated_work(job: Job) -> float:
    """What training the job's run costs, in FLOPs: its steps (with their fixed overhead) and
    its evaluations (forward passes over the training subset and the test set)."""
    cfg = job.cfg
    train = cfg.train
    flops = job.problem.flops(cfg)  # one training step of one model
    n_train = train_size(job)
    iterations = job.run_length
    step = flops + STEP_OVERHEAD_FLOPS
    forward_per_example = flops / (3 * train.batch_size)  # about a third of a step
    examples = min(train.eval_train_size or n_train, n_train) + (
        cfg.data.get("test_size") or 10_000
    )
    evaluations = iterations // train.eval_every + 2  # the first, every eval_every, the last
    return iterations * step + evaluations * examples * forward_per_example


@dataclass
class Task:
    """Runs trained together: one stack, or one run with the single-run engine."""

    jobs: list[int]  # positions in the sweep's job list
    stacked: bool
    here: bool = False  # train.engine=single: in this process, one run after another
    trained: int = 0  # steps it trained before, going on from its checkpoint


def estimated_seconds(job: Job) -> float | None:
    """Seconds the job's run costs trained alone: its steps times its optimizer's step alone,
    as `run.check` measured it (an optimizer's step costs 100x more in some than in others);
    None where it was not measured. An upper bound in a stack, whose models share a pass."""
    step = checked_step_time(job)
    return None if step is None else step * job.run_length


# A sweep estimated to take less than this share of the checkpoint interval saves none: an
# estimate (each run's steps times its step alone, timed on a quiet core) can be off several-fold
# on a loaded machine, and a task that outlives it only trains without checkpoints.
CHECKPOINT_MARGIN = 0.1


def ends_before_a_checkpoint(jobs: Sequence[Job], every_s: float) -> bool:
    """Whether the whole sweep, its runs trained one after another alone, is estimated to end
    before a task could save its first checkpoint (`CHECKPOINT_MARGIN`): then the restore probe
    of each optimizer config (`restore_probe.probe`) is a cost for nothing."""
    seconds = [estimated_seconds(job) for job in jobs]
    return None not in seconds and sum(seconds) < CHECKPOINT_MARGIN * every_s


def plan(
    jobs: Sequence[Job],
    parts: int,
    max_stack: int | None = None,
    max_stack_s: float | None = None,
    checkpoints: bool = False,
) -> list[Task]:
    """Tasks for `jobs`: each group of stackable runs split into up to `parts` sub-stacks of
    near-equal cost (one per worker process), or more where a sub-stack would hold more than
    `max_stack` models or cost more than `max_stack_s` seconds (`estimated_seconds`; give or
    take a configuration's seeds, which are never split), every other run a task of its own.
    A stack's runs are written when it ends, so the bounds bound what an interrupted sweep
    loses (between its checkpoints). Costs unknown (a run not checked here), every run counts
    as one. The runs of a task that saved a checkpoint (harness.training.checkpoint) are that task
    again, to go on from it. With `checkpoints`, runs that cannot save one (`checkpoint.refusal`)
    stack apart from those that can: one of them would take a whole stack's checkpoints."""
    tasks = [
        Task(runs, stacked, requested_engine(jobs[runs[0]].cfg) == "single", trained)
        for runs, stacked, trained in checkpoint.saved_tasks(jobs)
    ]
    resumed = {i for task in tasks for i in task.jobs}
    if tasks:
        log.info("%d runs of %d tasks go on from their checkpoints", len(resumed), len(tasks))
    groups: dict[tuple, list[int]] = {}
    refused: Counter[str] = Counter()
    unsaved: Counter[str] = Counter()
    for index, job in enumerate(jobs):
        if index in resumed:
            continue
        engine = requested_engine(job.cfg)
        reason = None if engine == "single" else refusal(job)
        if engine == "single":
            tasks.append(Task([index], stacked=False, here=True))
        elif reason is not None:
            refused[reason] += 1
            tasks.append(Task([index], stacked=False))
        else:
            unsaved_because = checkpoint.refusal(job) if checkpoints else None
            if unsaved_because is not None:
                unsaved[unsaved_because] += 1
            groups.setdefault((stack_key(job), unsaved_because), []).append(index)
    for reason, runs in refused.items():
        log.info("%d run(s) cannot stack, %s: they train with the single-run engine", runs, reason)
    for reason, runs in unsaved.items():
        log.info("%d run(s) cannot save checkpoints, %s: they stack apart", runs, reason)
    for members in groups.values():
        alone = len(members) == 1 and requested_engine(jobs[members[0]].cfg) == "auto"
        if alone:  # nothing to stack it with: the single-run engine
            tasks.append(Task(members, stacked=False))
            continue
        tasks += [
            Task(sorted(sub), stacked=True)
            for sub in _sub_stacks(members, jobs, parts, max_stack, max_stack_s)
        ]
    return tasks


def largest_first(tasks: Sequence[Task], jobs: Sequence[Job]) -> list[Task]:
    """`tasks` in the order that ends soonest on parallel workers: the costliest first, by
    `estimated_seconds` where every run has it, else by `estimated_work`."""
    seconds = [estimated_seconds(job) for job in jobs]
    known = all(s is not None for s in seconds)
    cost = seconds if known else [estimated_work(job) for job in jobs]
    return sorted(tasks, key=lambda t: -sum(cost[i] for i in t.jobs))


def _sub_stacks(
    members: list[int],
    jobs: Sequence[Job],
    parts: int,
    max_stack: int | None,
    max_stack_s: float | None,
) -> list[list[int]]:
    """`members` (one stack group) dealt into sub-stacks of near-equal cost, as `plan` says:
    the costliest configuration first, each to the cheapest sub-stack with room for it."""
    seconds = [estimated_seconds(jobs[i]) for i in members]
    known = all(s is not None for s in seconds)
    cost = dict(zip(members, seconds if known else [1.0] * len(members), strict=True))
    n = max(parts, -(-len(members) // (max_stack or len(members))))
    if known and max_stack_s:
        n = max(n, math.ceil(sum(cost.values()) / max_stack_s))
    n = min(n, len(members))
    # the seeds of one configuration go to one sub-stack (they share an optimizer there)
    configurations = _seeds_of_each_configuration(members, jobs)
    configurations.sort(key=lambda seeds: -sum(cost[i] for i in seeds))  # stable: ties in order
    sub_stacks: list[list[int]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for seeds in configurations:
        room = [k for k in range(n) if len(sub_stacks[k]) + len(seeds) <= (max_stack or 1e18)]
        k = min(room or range(n), key=lambda k: (loads[k], len(sub_stacks[k])))
        sub_stacks[k].extend(seeds)
        loads[k] += sum(cost[i] for i in seeds)
    return [sub for sub in sub_stacks if sub]


def _seeds_of_each_configuration(members: list[int], jobs: Sequence[Job]) -> list[list[int]]:
    """`members` (indices of `jobs`) grouped by configuration (`config_id`: runs that differ in
    their seed alone), in order of first appearance."""
    seeds: dict[str, list[int]] = {}
    for index in members:
        seeds.setdefault(jobs[index].config_id, []).append(index)
    return list(seeds.values())


def default_workers(jobs: Sequence[Job], max_stack: int | None = None) -> int:
    """Worker processes for `jobs` where none are asked for: one per core, or on a GPU as
    many as share it (`cuda_workers`, its rule logged)."""
    cores = os.cpu_count() or 1
    gpus = [d for d in (job.device for job in jobs) if d.type == "cuda"]
    if not gpus:
        return cores
    workers, rule = cuda_workers(jobs, device_memory(gpus[0]), cores, max_stack)
    log.info("on %s: up to %d worker processes share it (%s)", gpus[0], workers, rule)
    return workers
