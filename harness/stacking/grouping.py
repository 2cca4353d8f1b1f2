"""Which runs of a sweep can train together as one stack, and why a run cannot.

Runs that share architecture, batch size, data, length, dtype and device (`stack_key`) train on
batches of the same shape; a run cannot join a stack (`refusal` says why) if its problem does not
stack, its model is not an MLP and does not stack exactly on a probe, its optimizer needs
closures or second-order backward, or a third-party optimizer fails the stacking probe. Seeds of
one config may share one optimizer instance where the sharing probe passes (`sharing_probe`).
Each probe runs once per optimizer config (harness.training.preflight).
"""

from __future__ import annotations

import functools
import json

import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import node_key
from harness.config.validate import DTYPES
from harness.errors import HarnessError
from harness.problems import Problem
from harness.stacking.functional import stacking_refusal as module_refusal
from harness.stacking.probes import sharing_refusal, stacking_refusal
from harness.training import preflight
from harness.training.building import optimizer_factory
from harness.training.job import Job, load_data
from harness.training.stepping import Needs, needs_of_class


def refusal(job: Job) -> str | None:
    """Why the job's run cannot join a stack (None: it can). Its problem must stack; a model it
    calls hand-stacked (`Problem.hand_stacked`: an MLP) stacks by the hand-written path, any
    other model if `_module_probe` finds that it stacks exactly; torch.optim's classes update
    their parameters in place, any other optimizer class must pass `stacking_refusal`'s probe
    (StackedOptimizers checks the views after every step as well)."""
    cfg, problem = job.cfg, job.problem
    if not problem.stackable:
        return f"its problem {type(problem).__name__} does not stack"
    if not problem.hand_stacked(cfg.model):
        model_yaml = OmegaConf.to_yaml(cfg.model, resolve=True)
        reason = _module_probe(problem, model_yaml, cfg.train.dtype, job.data_key)
        if reason is not None:
            return f"its model {cfg.model._target_}: {reason}"
    needs = _optimizer_needs(cfg.optimizer._target_)
    if needs is None:  # not a class: the single-run engine reports it, as for any run
        return f"its optimizer {cfg.optimizer._target_} cannot be found"
    if needs.closure or needs.create_graph:  # a stack steps each model once per batch, with
        # first-order gradients (train/eval modes it switches around its evaluations)
        return f"optimizer {cfg.optimizer._target_} needs {needs.describe()}"
    if cfg.optimizer._target_.startswith("torch.optim."):
        return None
    reason = _probe(OptimizerNode(cfg.optimizer), cfg.train.dtype, job.run_length)
    return None if reason is None else f"optimizer {cfg.optimizer._target_}: {reason}"


@functools.cache
def _optimizer_needs(target: str) -> Needs | None:
    """What the optimizer class `target` needs of the step (None: no such class), once per
    class: the launcher asks for every job of a sweep."""
    try:
        return needs_of_class(get_class(target))
    except Exception:
        return None


class OptimizerNode:
    """A run's optimizer config, equal to another of the same values (the probes' cache key):
    probes build the optimizer from the node itself, as the run does; a node written out as
    YAML and read back can hold other values (an enum's name read back as a string)."""

    def __init__(self, node: DictConfig) -> None:
        self.node, self.key = node, node_key(node)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptimizerNode) and other.key == self.key


def _probe(optimizer: OptimizerNode, dtype: str, iterations: int) -> str | None:
    return preflight.outcome(
        "stacks",
        (optimizer.key, dtype, iterations),
        lambda: stacking_refusal(optimizer_factory(optimizer.node, iterations), DTYPES[dtype]),
    )


@functools.lru_cache(maxsize=64)
def _module_probe(problem: Problem, model_yaml: str, dtype: str, data_json: str) -> str | None:
    """`functional.stacking_refusal` on two copies of the model, built on the CPU for its
    data (loaded once per process: the sweep trains on it), on two training examples."""
    cfg = OmegaConf.create({"model": OmegaConf.create(model_yaml), "data": json.loads(data_json)})
    try:
        data = problem.to(load_data(cfg, problem), torch.device("cpu"), DTYPES[dtype])
        models = [
            problem.build_model(cfg, data, torch.Generator().manual_seed(seed)) for seed in (0, 1)
        ]
    except HarnessError as exc:  # the single-run engine reports it, as for any run
        return f"it cannot be built ({exc})"
    return module_refusal(problem, models, data, torch.arange(2))


def stack_key(job: Job) -> tuple:
    """The group of a valid run that can stack: model architecture, batch size, data config,
    length, evaluation and logging settings, dtype and device.

    The architecture is the problem's (`Problem.stack_architecture`). Optimizer,
    hyper-parameters, schedule, divergence_factor, the initialisation scheme and the
    seed may differ inside a group (each model is built by run.prepare with its own settings
    and draws its own data order); execution settings (threads, progress, train.engine) are
    ignored: the launcher decides on those. On CUDA, not train.cuda_graph: a stack has one.
    """
    cfg, device = job.cfg, job.device
    train = cfg.train
    return (
        *job.problem.stack_architecture(cfg.model),
        train.batch_size,
        train.iterations,
        train.epochs,
        train.eval_every,
        train.eval_train_size,
        train.log_every,
        train.dtype,
        str(device),
        cuda_graph_setting(cfg) if device.type == "cuda" else None,
        job.data_key,
    )


def cuda_graph_setting(cfg: DictConfig) -> str:
    """The run's train.cuda_graph (`auto` for a config from before the key)."""
    return cfg.train.get("cuda_graph", "auto")


def sharing_probe(optimizer: OptimizerNode, iterations: int) -> str | None:
    """Why seeds of one config cannot share one instance of its optimizer (`sharing_refusal`),
    probed once per optimizer config and run length (harness.training.preflight)."""
    return preflight.outcome(
        "shares",
        (optimizer.key, iterations),
        lambda: sharing_refusal(optimizer_factory(optimizer.node, iterations)),
    )
