"""Classification of MNIST digits by MLPs (the course's problem): cross-entropy loss, accuracy."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from omegaconf import DictConfig
from torch.nn import functional as F

from harness.config.class_paths import build, located, target_object
from harness.errors import ConfigError, DataError
from harness.problems import Problem
from harness.problems.classification.checks import validate_data, validate_model
from harness.problems.classification.mnist import TensorData
from harness.problems.classification.networks import (
    INIT_KEYS,
    LENET_TARGET,
    MLP,
    MLP_TARGET,
    lenet_multiply_adds,
    resolve_activations,
)

EVAL_CHUNK = 10_000  # rows per forward pass during evaluation: bounds memory on any device


class Classification(Problem):
    """Data: `mnist.TensorData` (features and labels); model: `cfg.model`, built with the data's
    number of features and classes (`networks.MLP` for the course's nets)."""

    quality = "accuracy"
    higher_is_better = True
    stackable = True  # harness.stacking.stack trains MLPs of one architecture together
    eval_chunk = EVAL_CHUNK
    init_keys = INIT_KEYS

    def load(self, cfg: DictConfig) -> TensorData:
        return build(cfg.data)

    def to(self, data: TensorData, device: torch.device, dtype: torch.dtype) -> TensorData:
        return data.to(device, dtype)

    def size(self, data: TensorData) -> int:
        return len(data.y_train)

    def build_model(
        self, cfg: DictConfig, data: TensorData, generator: torch.Generator
    ) -> torch.nn.Module:
        target = located(cfg.model.get("_target_"))
        given = {
            "in_features": data.num_features,
            "num_classes": data.num_classes,
            "generator": generator,
        }
        if target in (MLP_TARGET, LENET_TARGET):
            model = build(cfg.model, **given)
            return model.to(device=data.x_train.device, dtype=data.x_train.dtype)
        # A user's module: given what its constructor takes of the three, then tried on two
        # training rows, so that data it cannot take ends in one line, not in a traceback.
        model = build(cfg.model, **_accepted(target_object(target), given))
        model = model.to(device=data.x_train.device, dtype=data.x_train.dtype)
        _try_on(model, target, data)
        return model

    def loss(self, model: torch.nn.Module, data: TensorData, rows: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(data.x_train[rows]), data.y_train[rows])

    def evaluate(
        self, model: torch.nn.Module, data: TensorData, split: str, rows: torch.Tensor | None
    ) -> dict[str, float]:
        """Mean cross-entropy and accuracy on the training rows `rows` or a held-out split."""
        x, y = _examples(data, split, rows)
        return _metrics(lambda chunk: model(chunk).T.unsqueeze(0), 1, x, y)[0]

    @torch.no_grad()
    def stacked_loss(self, stack, data: TensorData, rows: torch.Tensor) -> torch.Tensor:
        """The K mean cross-entropies of the mini-batch, with their gradient w.r.t. the logits
        written out (`cross_entropy_and_gradient`) and handed to the stack's backward. `rows`
        is shared (``[batch]``) or one mini-batch per model (``[K, batch]``)."""
        logits = stack.forward(data.x_train[rows], keep=True, per_model=rows.dim() == 2)
        loss, grad = cross_entropy_and_gradient(logits, data.y_train[rows], stack.class_dim)
        stack.backward(grad)
        return loss

    def stacked_evaluate(
        self, stack, data: TensorData, split: str, rows: torch.Tensor | None
    ) -> list[dict[str, float]]:
        x, y = _examples(data, split, rows)
        if stack.class_dim == 1:
            return _metrics(stack.forward, len(stack), x, y)
        return _metrics(lambda chunk: stack.forward(chunk).transpose(1, 2), len(stack), x, y)

    def stack_architecture(self, model: DictConfig) -> tuple:
        """An MLP's layers and activations; any other model's config but for `init_keys`."""
        if self.hand_stacked(model):
            hidden = tuple(int(h) for h in model.hidden)
            return MLP_TARGET, hidden, tuple(resolve_activations(hidden, model.activations))
        return super().stack_architecture(model)

    def hand_stacked(self, model: DictConfig) -> bool:
        return located(model.get("_target_")) == MLP_TARGET

    def is_hand_stacked(self, model: torch.nn.Module) -> bool:
        return isinstance(model, MLP)

    def held_out(self, data: TensorData) -> tuple[str, ...]:
        return ("test",) if data.y_val is None else ("val", "test")

    def check(self, cfg: DictConfig) -> None:
        if str(located(cfg.model.get("_target_", ""))).startswith("harness.problems.ratings."):
            raise ConfigError(
                f"{cfg.model._target_} is a model of ratings: add +problem=ratings "
                "data=synthetic_ratings (or data=movielens)"
            )
        validate_model(cfg.model)
        validate_data(cfg.data)

    def flops(self, cfg: DictConfig, in_features: int = 784, classes: int = 10) -> float:
        """One training step (forward + backward) of an MLP: 2 FLOPs per multiply-add, forward,
        weight gradients, and input gradients of all layers but the first; of LeNet, three
        times its forward (other models count as an MLP of their `hidden`)."""
        if located(cfg.model.get("_target_")) == LENET_TARGET:
            forward = lenet_multiply_adds(
                in_features, classes, cfg.model.channels, cfg.model.hidden
            )
            return 2.0 * 3 * cfg.train.batch_size * forward
        sizes = [in_features, *cfg.model.get("hidden", []), classes]
        weights = [a * b for a, b in zip(sizes, sizes[1:], strict=False)]
        return 2.0 * cfg.train.batch_size * (2 * sum(weights) + sum(weights[1:]))


def _accepted(factory: Callable, given: dict) -> dict:
    """The arguments of `given` that `factory` takes (all of them if it takes **kwargs)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature: give it everything
        return given
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return given
    return {k: v for k, v in given.items() if k in parameters}


def _try_on(model: torch.nn.Module, target: str, data: TensorData) -> None:
    """A DataError in one line if `model` refuses two training rows or gives other than one
    logit per class; in eval mode, under no_grad and a forked random state: nothing of the run
    changes."""
    rows = data.x_train[:2]
    was_training = model.training
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            model.eval()
            out = model(rows)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(
            f"model {target} refuses the data's examples (rows of {data.num_features} "
            f"features): {first}"
        ) from exc
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (len(rows), data.num_classes):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise DataError(
            f"model {target} gives outputs of shape {shape} for {len(rows)} examples; the "
            f"data's labels need ({len(rows)}, {data.num_classes}): one logit per class"
        )


def _examples(data: TensorData, split: str, rows: torch.Tensor | None):
    return (data.x_train[rows], data.y_train[rows]) if split == "train" else data.split(split)


@torch.no_grad()
def _metrics(
    logits_of: Callable[[torch.Tensor], torch.Tensor], k: int, x: torch.Tensor, y: torch.Tensor
) -> list[dict[str, float]]:
    """Mean cross-entropy and accuracy of each of K models on (x, y), in chunks of EVAL_CHUNK
    examples (memory stays bounded on any device); `logits_of` maps examples to the K models'
    logits, [K, classes, examples]."""
    loss_sum = torch.zeros(k, device=x.device, dtype=torch.float64)
    correct = torch.zeros(k, device=x.device, dtype=torch.int64)
    for start in range(0, len(y), EVAL_CHUNK):
        logits = logits_of(x[start : start + EVAL_CHUNK])
        target = y[start : start + EVAL_CHUNK].expand(k, -1)
        loss_sum += F.cross_entropy(logits, target, reduction="none").sum(1).double()
        correct += (logits.argmax(1) == target).sum(1)
    losses, accuracies = (loss_sum / len(y)).tolist(), (correct.double() / len(y)).tolist()
    return [{"loss": a, "accuracy": b} for a, b in zip(losses, accuracies, strict=True)]


def cross_entropy_and_gradient(
    logits: torch.Tensor, y: torch.Tensor, class_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The K mean cross-entropies of the logits of K models against the labels `y` (``[batch]``,
    shared, or ``[K, batch]``, one mini-batch per model), and their gradient w.r.t. the logits,
    written out: d(mean NLL)/d(logits) = (softmax - onehot) / batch, as nll_loss_backward and
    _log_softmax_backward_data compute it. `logits` are [K, classes, batch] (`class_dim` 1,
    StackedMLP's) or [K, batch, classes] (`class_dim` 2, StackedModule's): each stack's own
    layout, read contiguously."""
    log_p = torch.log_softmax(logits, dim=class_dim)
    k, batch = log_p.shape[0], y.shape[-1]
    batch_dim = 3 - class_dim
    shape = [-1, 1, 1]
    shape[batch_dim] = batch
    target = y.view(shape).expand(k, *shape[1:])
    loss = log_p.gather(class_dim, target).mean(dim=batch_dim).neg_().view(k)
    rows = slice(None) if y.dim() == 2 else slice(1)  # a one-hot per model, or one for all
    onehot = torch.zeros_like(log_p[rows])
    onehot.scatter_(class_dim, target[rows], -(1.0 / batch))
    grad = torch.exp(log_p).mul_(1.0 / batch).add_(onehot)
    return loss, grad
