"""The stacked engine: the runs of a sweep that differ only in their optimizer, hyper-parameters,
schedule and seed are trained together as one stacked model.

Runs that share architecture, batch size, data and length (`stack_key`; `refusal` says which
cannot stack at all) train on batches of the same shape, so their K networks are held as one
stacked model and trained with one pass over each step's batches (one shared batch where they
share a seed, hence a data order; a batch per model where seeds differ): MLPs as a
`StackedMLP` (harness.stacking.mlp, forward and backward written out), any other model as
a `StackedModule` (harness.stacking.functional, torch.func) if a probe shows that it stacks
exactly. Each model keeps its own ``nn.Module``, optimizer and LR scheduler exactly as `run.prepare`
built them (so initialisation is the single-run engine's by construction); `StackedOptimizers`
(harness.stacking.member_optimizers) steps them; the seeds of one configuration share one
instance of their optimizer where a probe (harness.stacking.probes) shows that this is exact.
A model whose loss diverges is recorded as diverged and removed from the stack (the stack is rebuilt
without it), so it neither slows down nor disturbs the others. On CUDA a stack's step is replayed
from a CUDA graph where a probe finds that exact (harness.stacking.cuda_graph,
`train.cuda_graph`).

Each model writes the same metrics and run.json as `run.execute` (through `record.finish`); its
``time_s`` is the stack's optimisation time. harness.sweeps.plan decides which runs stack and
where they train.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import warnings
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from harness.config.identity import config_id
from harness.loggers import Stream, aborting, open_streams
from harness.problems import Problem
from harness.results.recording import finish
from harness.stacking.cuda_graph import StepGraph, attach, probe_rows
from harness.stacking.functional import StackedModule
from harness.stacking.grouping import OptimizerNode, cuda_graph_setting, sharing_probe, stack_key
from harness.stacking.member_optimizers import Sharing, StackedOptimizers
from harness.stacking.mlp import StackedMLP
from harness.stacking.update_rules import rule_key
from harness.training import engine
from harness.training import run as run_module
from harness.training.building import optimizer_and_schedule
from harness.training.checkpoint import Checkpoint, task_checkpoint
from harness.training.engine import Outcome, logged_hyperparameters
from harness.training.job import Job
from harness.training.restoring import load_optimizer_state
from harness.training.stepping import (
    evaluation_mode,
    in_train_mode,
    needs_of,
)

log = logging.getLogger(__name__)


def stack_of(models: Sequence[torch.nn.Module], problem: Problem) -> StackedMLP | StackedModule:
    """The stacked model of `models`: the hand-written one for the models the problem calls so
    (`Problem.is_hand_stacked`: MLPs), torch.func's otherwise."""
    return StackedMLP(models) if problem.is_hand_stacked(models[0]) else StackedModule(models)


class Stack:
    """K models of one architecture trained as one stacked model (the engine's `Members`): one
    pass of the stacked model over each shared mini-batch (the problem's `stacked_loss`), then
    every optimizer's update (`StackedOptimizers`, `capturable` on CUDA) and schedule step.
    Models that share an update rule should be neighbours (`train_stack` orders them so). With
    a `graph` (harness.stacking.cuda_graph.attach), the step's device work is replayed from
    it."""

    def __init__(
        self,
        models: Sequence[torch.nn.Module],
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[Any],
        problem: Problem,
        data: Any,
        stack_class: type[StackedMLP] | type[StackedModule] | None = None,
        sharing: Sequence[Sharing | None] | None = None,
        capturable: bool = False,
    ) -> None:
        self.models, self.optimizers = list(models), list(optimizers)
        self.schedulers, self.problem, self.data = list(schedulers), problem, data
        self.stack = stack_class(self.models) if stack_class else stack_of(self.models, problem)
        self.stepper = StackedOptimizers(self.stack, self.optimizers, sharing, capturable)
        self.graph: StepGraph | None = None
        self.failed: dict[int, str] = {}
        for optimizer in self.stepper.stepping():
            in_train_mode(optimizer)  # Schedule-Free trains in its train mode, as alone

    def __len__(self) -> int:
        return len(self.models)

    def device_step(self, rows: torch.Tensor) -> torch.Tensor:
        """The step's device work, after the stepper's `begin_step`: the K losses and their
        gradients, and the stacked rules' updates (what a CUDA graph of the step captures)."""
        losses = self.problem.stacked_loss(self.stack, self.data, rows)
        self.stepper.update_rules()
        return losses

    def step(self, rows: torch.Tensor) -> torch.Tensor:
        self.stepper.begin_step()
        if self.graph is None:
            losses = self.device_step(rows)
        else:
            if self.stepper.remade:  # the coefficients the graph reads were made again
                self.graph.reset()
            losses = self.graph(rows)
        self.failed = self.stepper.step_others()
        with warnings.catch_warnings():
            # optimizers updated by a stacked rule never call their own step()
            warnings.filterwarnings("ignore", "Detected call of")
            for k, scheduler in enumerate(self.schedulers):
                if k not in self.failed:
                    scheduler.step()
        return losses

    def failures(self) -> dict[int, str]:
        return self.failed

    def evaluate(self, splits: dict[str, torch.Tensor | None]) -> list[dict[str, float]]:
        metrics: list[dict[str, float]] = [{} for _ in self.models]
        with contextlib.ExitStack() as modes:  # each optimizer's eval mode, as alone
            for optimizer in self.stepper.stepping():
                modes.enter_context(evaluation_mode(optimizer, needs_of(optimizer)))
            for split, rows in splits.items():
                found = self.problem.stacked_evaluate(self.stack, self.data, split, rows)
                for mine, values in zip(metrics, found, strict=True):
                    mine |= {f"{split}_{name}": value for name, value in values.items()}
        return metrics

    def hyperparameters(self) -> list[dict[str, float]]:
        return [logged_hyperparameters(self.stepper.optimizer_of(k)) for k in range(len(self))]

    def keep(self, kept: Sequence[int]) -> None:
        """Rebuild the stack without the others (their models keep their last weights)."""
        self.models = [self.models[j] for j in kept]
        self.optimizers = [self.optimizers[j] for j in kept]
        self.schedulers = [self.schedulers[j] for j in kept]
        self.stack.restack(self.models)
        self.stepper.keep(kept)
        if self.graph is not None:  # its tensors were made again
            self.graph.reset()

    def state_dict(self) -> dict[str, Any]:
        return {
            "tensors": [tensor for tensor, _ in self.stack.tensors()],
            "optimizers": [o.state_dict() for o in self.optimizers],
            "schedulers": [s.state_dict() for s in self.schedulers],
            "stepper": self.stepper.state_dict(),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        for (tensor, _), saved in zip(self.stack.tensors(), state["tensors"], strict=True):
            tensor.copy_(saved)
        for optimizer, saved in zip(self.optimizers, state["optimizers"], strict=True):
            load_optimizer_state(optimizer, saved)
        for scheduler, saved in zip(self.schedulers, state["schedulers"], strict=True):
            scheduler.load_state_dict(saved)
        self.stepper.load_state_dict(state["stepper"])
        if self.graph is not None:  # the rules' states are other tensors now
            self.graph.reset()


def train_stack(
    runs: Sequence[run_module.PreparedRun],
    progress: bool = False,
    stack_class: type[StackedMLP] | type[StackedModule] | None = None,
    share: bool = True,
    checkpoint: Checkpoint | None = None,
    capturable: bool | None = None,
    streams: Sequence[Stream | None] | None = None,
) -> list[Outcome]:
    """Train prepared runs of one group (one `stack_key`) together; one Outcome per run, as
    engine.train would return it for that run alone, with the run's `update_path` and
    `cuda_graph` note. Each run draws its own data order (runs of one seed share theirs); the
    seeds of one configuration share one instance of their optimizer where `sharing_refusal`
    allows it (`share`: False, never; benchmarks compare). `stack_class` (benchmarks, tests)
    forces a stacked model class instead of `stack_of`'s choice; `capturable` (tests) the
    stepper's form instead of the device's (capturable on CUDA unless train.cuda_graph=off).
    With a `checkpoint`, the stack saves its training's state there and goes on from it
    (harness.training.checkpoint). `streams` (one per run, or None) take each run's metric rows
    as they are recorded (harness.loggers)."""
    setup, device = runs[0].setup, runs[0].device
    setting = cuda_graph_setting(runs[0].cfg)
    if capturable is None:
        capturable = device.type == "cuda" and setting != "off"
    rules = [rule_key(r.optimizer, capturable) for r in runs]  # the stepper's form's
    sharing = _sharing_of(runs, rules) if share else [None] * len(runs)
    # stack order: models that share an update rule, then the seeds of one configuration, are
    # neighbours (one fused update, one shared instance)
    stack_order = sorted(
        range(len(runs)),
        key=lambda i: (
            repr(rules[i]),
            sharing[i] and sharing[i].config_id or "",
        ),
    )
    stacked = [runs[i] for i in stack_order]
    members = Stack(
        [r.model for r in stacked],
        [r.optimizer for r in stacked],
        [r.scheduler for r in stacked],
        setup.problem,
        setup.data,
        stack_class,
        [sharing[i] for i in stack_order],
        capturable,
    )
    paths = members.stepper.paths()
    if checkpoint is not None:  # one saved for another order or other paths is not used
        form = " (capturable)" if capturable else ""
        checkpoint.layout = [
            f"{r.out_dir.name}: {p}{form}" for r, p in zip(stacked, paths, strict=True)
        ]
    # one data order: one product for all models; else one per model
    one_order = len({r.order_seed for r in stacked}) == 1
    data_order = runs[0].order_generator() if one_order else [r.order_generator() for r in stacked]
    graph_notes: list[str | None] = [None] * len(stacked)
    if device.type == "cuda":
        n, batch = setup.problem.size(setup.data), setup.schedule.batch_size
        rows = probe_rows(n, batch, len(stacked), not one_order, device)
        graph_notes = list(attach(members, setting, rows))
    outcomes = engine.train(
        members,
        setup.problem,
        setup.data,
        setup.eval_train_idx,
        setup.schedule,
        data_order,
        divergence_factors=[r.setup.schedule.divergence_factor for r in stacked],
        progress=progress,
        checkpoint=checkpoint,
        sinks=None if streams is None else [streams[i] for i in stack_order],
    )
    by_run = {
        i: dataclasses.replace(outcome, update_path=path, cuda_graph=note)
        for i, outcome, path, note in zip(stack_order, outcomes, paths, graph_notes, strict=True)
    }
    return [by_run[i] for i in range(len(runs))]


def _sharing_of(
    runs: Sequence[run_module.PreparedRun], rules: Sequence[tuple | None]
) -> list[Sharing | None]:
    """How each run's seeds may share one optimizer instance in this stack (None: they may
    not): only configurations with several seeds here whose optimizer steps itself (no stacked
    rule: `rules`, each run's `rule_key` for the stepper's form) are probed, so a stack of one
    seed pays nothing."""
    ids = [config_id(r.cfg) for r in runs]
    seeds = Counter(ids)
    return [
        _sharing(run, config_id) if seeds[config_id] > 1 and rule is None else None
        for run, config_id, rule in zip(runs, ids, rules, strict=True)
    ]


def _sharing(run: run_module.PreparedRun, config_id: str) -> Sharing | None:
    """Its problem gives one optimizer all parameters and `sharing_refusal`'s probe passes."""
    problem = run.setup.problem
    if type(problem).parameter_groups is not Problem.parameter_groups:
        return None
    cfg, iterations = run.cfg, run.setup.schedule.iterations
    if sharing_probe(OptimizerNode(cfg.optimizer), iterations) is not None:
        return None
    build = functools.partial(
        optimizer_and_schedule, cfg.optimizer, cfg.schedule, iterations=iterations
    )
    return Sharing(config_id, build)


def execute_group(
    jobs: Sequence[Job], threads: int | None = None, checkpoint_every_s: float | None = None
) -> list[dict[str, Any]]:
    """Train the jobs, all with the same `stack_key` and none refused, together as one stack;
    write each job's results as run.execute does; return their run.json records in order.

    Every job is validated and built (run.prepare) before anything trains, so a job with a bad
    config raises the HarnessError run.execute would raise, and nothing is written. `threads`
    overrides the configs' torch thread count (the launcher's workers use 1). A sweep's stack
    checkpoints its training every `checkpoint_every_s` seconds, and goes on from its
    checkpoint (harness.training.checkpoint).
    """
    runs: list[run_module.PreparedRun] = []
    for job in jobs:
        prepared = run_module.prepare(job)
        if runs:  # one copy of the data for the whole stack
            prepared.setup = dataclasses.replace(prepared.setup, data=runs[0].setup.data)
        runs.append(prepared)
    if len({stack_key(job) for job in jobs}) != 1:  # prepare validated them
        raise ValueError("execute_group() needs jobs that share one stack_key")
    if threads is not None:
        torch.set_num_threads(threads)
    cfg = runs[0].cfg
    log.info(
        "training %d %s models stacked for %d iterations on %s",
        len(runs),
        runs[0].choices.get("model") or cfg.model._target_,
        runs[0].setup.schedule.iterations,
        runs[0].device,
    )
    checkpoint = task_checkpoint(jobs, True, checkpoint_every_s)
    progress = run_module.show_progress(cfg.train.progress)
    streams = open_streams(runs)
    with aborting(streams):
        outcomes = train_stack(runs, progress=progress, checkpoint=checkpoint, streams=streams)
    records = [
        finish(r, o, "stacked", o.update_path, s)
        for r, o, s in zip(runs, outcomes, streams, strict=True)
    ]
    if checkpoint is not None:
        checkpoint.remove()
    return records
