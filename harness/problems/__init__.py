"""Problems: what a run trains and how it is measured.

A problem brings its data, its model, its loss and its evaluation metrics through one interface,
so that the run, the engines, sweeps, resume, tables, the report and the notebooks serve every
workload without knowing which it is. Two are built in: `classification` (MNIST and the MLPs of
the course) and `ratings` (user x item ratings learned through embedding tables: sparse
gradients). A config selects one with the `problem` group; its `data` and `model` groups are the
problem's own.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import DEFAULT_PROBLEM, build


class Problem(ABC):
    """Data, model, loss and metrics of a workload.

    `quality` names the evaluation metric that ranks runs (val_<quality> in the tables picks
    configurations, test_<quality> reports them); the engine records `loss` and every metric of
    `evaluate` on the training subset and on each held-out split (`held_out`).
    """

    quality: str = "accuracy"
    higher_is_better: bool = True
    # Whether the stacked engine can train runs of this problem together.
    stackable: bool = False
    # Examples per forward pass when a whole split is evaluated: bounds memory on any device
    # (harness.sweeps.gpu_workers counts it in a worker's memory).
    eval_chunk: int = 10_000
    # The model config's keys of initialisation only: models that differ in nothing else share a
    # stack (`stack_architecture`).
    init_keys: tuple[str, ...] = ()

    @abstractmethod
    def load(self, cfg: DictConfig) -> Any:
        """The data of `cfg` on the CPU (loaded once per process by harness.training.run)."""

    @abstractmethod
    def to(self, data: Any, device: torch.device, dtype: torch.dtype) -> Any:
        """`data` moved to where the run trains."""

    @abstractmethod
    def size(self, data: Any) -> int:
        """The number of training examples (rows a mini-batch is drawn from)."""

    @abstractmethod
    def build_model(self, cfg: DictConfig, data: Any, generator: torch.Generator) -> Any:
        """The model of `cfg`, initialised from `generator`, placed on the run's device."""

    @abstractmethod
    def loss(self, model: Any, data: Any, rows: torch.Tensor) -> torch.Tensor:
        """The mean training loss of the mini-batch `rows` (a scalar with a graph)."""

    @abstractmethod
    def evaluate(self, model: Any, data: Any, split: str, rows: torch.Tensor | None) -> dict:
        """{"loss": ..., <metric>: ...} on the `rows` of the training data (split "train") or
        on a held-out split ("val" or "test", rows None)."""

    @abstractmethod
    def held_out(self, data: Any) -> tuple[str, ...]:
        """The held-out splits of `data`, evaluated in this order: ("val", "test") when the data
        holds validation examples out of the training data (`data.val_size`), else ("test",).
        Selection (a rate, a best config) reads val_*; the test set only reports."""

    @abstractmethod
    def check(self, cfg: DictConfig) -> None:
        """Raise a ConfigError for a value of the problem's own keys that cannot work."""

    def flops(self, cfg: DictConfig) -> float:
        """Floating-point operations of one training step: what sweeps are planned by."""
        return 0.0

    def stacked_loss(self, stack: Any, data: Any, rows: torch.Tensor) -> torch.Tensor:
        """The K mean training losses of the models of `stack` (harness.stacking.mlp,
        harness.stacking.functional) on the mini-batch `rows`, their gradients written into the
        stack: its `forward(inputs, keep=True)` gives the K models' outputs (classes along its
        `class_dim`), its `backward(grad)` takes the loss gradient w.r.t. them. Needed if
        `stackable`."""
        raise NotImplementedError(f"{type(self).__name__} does not stack")

    def stacked_evaluate(
        self, stack: Any, data: Any, split: str, rows: torch.Tensor | None
    ) -> list[dict[str, float]]:
        """`evaluate` for each of the K models of `stack`. Needed if `stackable`."""
        raise NotImplementedError(f"{type(self).__name__} does not stack")

    def stack_architecture(self, model: DictConfig) -> tuple:
        """What models of one stack share (part of harness.stacking.grouping.stack_key): by
        default the model config but for its `init_keys`."""
        config = OmegaConf.to_container(model, resolve=True)
        for key in self.init_keys:
            config.pop(key, None)
        return (json.dumps(config, sort_keys=True),)

    def hand_stacked(self, model: DictConfig) -> bool:
        """Whether models of this config are chains of `nn.Linear` layers (`model.layers`) with
        a named activation of harness.problems.layers after each hidden one
        (`model.activations`): the hand-written stack (harness.stacking.mlp) trains them, and
        no probe is needed. Other models stack through torch.func where a probe allows."""
        return False

    def is_hand_stacked(self, model: torch.nn.Module) -> bool:
        """`hand_stacked` for a built model."""
        return False

    def tensors(self, data: Any) -> list[torch.Tensor]:
        """The tensors of `data` (what a copy on a device holds: harness.sweeps.gpu_workers
        estimates its memory from them); by default every tensor attribute."""
        return [t for t in vars(data).values() if isinstance(t, torch.Tensor)]

    def parameter_groups(self, cfg: DictConfig, model: Any) -> list[tuple[list, DictConfig]]:
        """(parameters, optimizer config) pairs: one optimizer per pair. By default the config's
        `optimizer` updates every parameter."""
        return [(list(model.parameters()), cfg.optimizer)]


@functools.lru_cache(maxsize=8)
def _problem(yaml: str) -> Problem:
    return build(OmegaConf.create(yaml))


def problem_of(cfg: DictConfig) -> Problem:
    """The problem a config selects (`problem` group); classification when it names none."""
    node = cfg.get("problem")
    if node is None:
        node = {"_target_": DEFAULT_PROBLEM}
    return _problem(OmegaConf.to_yaml(node, resolve=True))
