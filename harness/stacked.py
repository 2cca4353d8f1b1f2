"""The stacked engine: the runs of a sweep that differ only in their optimizer, hyper-parameters
and schedule are trained together as one stacked model.

Runs that share architecture, batch size, data, seed (hence data order) and length (see
`group_key`) see the very same mini-batches, so their K networks are held as stacked tensors with
a leading model dimension and trained with one pass over each batch:

* the first layer of all K models is one matrix product, ``W1[K*out, in] @ x.T``; later layers
  are batched products (``baddbmm``); activations are kept transposed, ``[K, features, batch]``,
  so that every product reads and writes contiguous memory;
* forward and backward are written out (no autograd): gradients land directly in stacked
  gradient tensors, using the same ATen backward kernels autograd would call;
* each model keeps its own ``nn.Module``, optimizer and LR scheduler exactly as `run.prepare`
  built them (so initialisation is the single-run engine's by construction): its parameters'
  ``.data`` and ``.grad`` are views into the stacked tensors, and its scheduler steps its own
  optimizer's hyper-parameters. The update itself takes one of three paths (`StackedOptimizers`):
  the eight course optimizer classes in their default implementation are updated slice-wise by
  `RULES`, torch's single-tensor update rewritten with per-model [K, 1, 1] coefficients (one set
  of tensor operations for all models of a class; exact against torch.optim, see the tests);
  SGD, Adam, AdamW and Adagrad on models of >= 50,000 parameters step through torch's own fused
  implementation instead (one pass over memory; ~1e-7 from the default one in float32); any
  other optimizer (RAdam, third-party classes, unusual settings) runs its own ``step()``;
* a model whose loss diverges is recorded as diverged and removed from the stack (the stack is
  rebuilt without it), so it neither slows down nor disturbs the others.

Each model writes the same metrics and run.json as `run.execute` (through `run.finish`); its
``time_s`` is the stack's optimisation time.

`execute_jobs` is what a sweep launcher calls: it groups jobs by `group_key`, splits the groups
into sub-stacks and trains them in single-threaded worker processes, one per core (on a GPU, in
this process).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import logging
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn import functional as F
from torch.optim.optimizer import _get_scalar_dtype
from tqdm.auto import tqdm

from harness import run as run_module
from harness.engine import (
    EVAL_CHUNK,
    Outcome,
    Recorder,
    batch_indices,
    divergence_limit,
    diverging,
)
from harness.errors import HarnessError
from harness.models import ACTIVATIONS, MLP, resolve_activations
from harness.validate import validate_run

log = logging.getLogger(__name__)

Job = tuple[DictConfig, Path, dict[str, str]]
MLP_TARGET = f"{MLP.__module__}.{MLP.__qualname__}"

_aten = torch.ops.aten


# Backward of each activation: (gradient w.r.t. its output, its input z, its output h) -> gradient
# w.r.t. z, with the ATen kernels autograd itself uses.
ACTIVATION_BACKWARD: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]
ACTIVATION_BACKWARD = {
    "sigmoid": lambda g, z, h: _aten.sigmoid_backward(g, h),
    "relu": lambda g, z, h: _aten.threshold_backward(g, h, 0),
    "tanh": lambda g, z, h: _aten.tanh_backward(g, h),
    "gelu": lambda g, z, h: _aten.gelu_backward(g, z),
    "elu": lambda g, z, h: _aten.elu_backward(g, 1.0, 1, 1, False, z),
    "leaky_relu": lambda g, z, h: _aten.leaky_relu_backward(g, z, 0.01, False),
    "identity": lambda g, z, h: g,
}
assert set(ACTIVATION_BACKWARD) == set(ACTIVATIONS)


def group_key(cfg: DictConfig) -> tuple | None:
    """Key under which runs may be stacked: model architecture, batch size, data config, seed
    (data order), length, evaluation and logging settings, dtype and device. None if this run
    cannot be stacked (a model other than harness.models.MLP, or a config that does not validate:
    the single-run engine then reports its error).

    Optimizer, hyper-parameters, schedule, divergence_factor and the initialisation scheme may
    differ inside a group (each model is built by run.prepare with its own settings); execution
    settings (threads, progress, train.engine) are ignored: the launcher decides on those.
    """
    try:
        validate_run(cfg)
        model = cfg.model
        if model.get("_target_") != MLP_TARGET:
            return None
        hidden = tuple(int(h) for h in model.hidden)
        activations = tuple(resolve_activations(hidden, model.activations))
        train = cfg.train
        device = run_module.resolve_device(cfg.device)
        return (
            MLP_TARGET,
            hidden,
            activations,
            train.batch_size,
            train.iterations,
            train.epochs,
            train.eval_every,
            train.eval_train_size,
            train.log_every,
            train.dtype,
            cfg.seed,
            str(device),
            OmegaConf.to_yaml(cfg.data, resolve=True),
        )
    except HarnessError:
        return None


class StackedMLP:
    """K MLPs of one architecture as stacked tensors, bound to the K models' own parameters.

    Layer l's weights are one tensor ``[K, out, in]`` and its biases ``[K, out]`` (likewise their
    gradients); model k's ``layers[l].weight`` is the view ``[k]`` of it, for data and gradient.
    Activations are transposed, ``[K, features, batch]``; logits are ``[K, classes, batch]``.
    """

    def __init__(self, models: Sequence[MLP]) -> None:
        self.activations = list(models[0].activations)
        self.models: list[MLP] = []
        self.weights: list[torch.Tensor] = []
        self.biases: list[torch.Tensor] = []
        self.weight_grads: list[torch.Tensor] = []
        self.bias_grads: list[torch.Tensor] = []
        self._saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._x: torch.Tensor | None = None
        self.restack(models)

    def __len__(self) -> int:
        return len(self.models)

    @torch.no_grad()
    def restack(self, models: Sequence[MLP]) -> None:
        """(Re)build the stacked tensors from `models`' current weights and bind each model's
        parameters and gradients to views of them."""
        self.models = list(models)
        n_layers = len(self.models[0].layers)
        self.weights = [torch.stack([m.layers[i].weight for m in models]) for i in range(n_layers)]
        self.biases = [torch.stack([m.layers[i].bias for m in models]) for i in range(n_layers)]
        self.weight_grads = [torch.zeros_like(w) for w in self.weights]
        self.bias_grads = [torch.zeros_like(b) for b in self.biases]
        for k, model in enumerate(self.models):
            for i, layer in enumerate(model.layers):
                layer.weight.data = self.weights[i][k]
                layer.weight.grad = self.weight_grads[i][k]
                layer.bias.data = self.biases[i][k]
                layer.bias.grad = self.bias_grads[i][k]
        self._saved, self._x = [], None

    @torch.no_grad()
    def forward(self, x: torch.Tensor, keep: bool = False) -> torch.Tensor:
        """Logits ``[K, classes, batch]`` of the K models for the shared input `x` ``[batch, in]``;
        `keep` saves what `backward` needs."""
        k, batch = len(self.models), len(x)
        w0 = self.weights[0]
        z = torch.addmm(self.biases[0].reshape(-1, 1), w0.reshape(-1, w0.shape[-1]), x.T)
        z = z.view(k, -1, batch)
        saved = []
        for i, name in enumerate(self.activations, start=1):
            h = ACTIVATIONS[name](z)
            saved.append((z, h))
            z = torch.baddbmm(self.biases[i].unsqueeze(-1), self.weights[i], h)
        if keep:
            self._saved, self._x = saved, x
        return z

    @torch.no_grad()
    def backward(self, grad: torch.Tensor) -> None:
        """Write the gradients of the K models' losses into the stacked gradient tensors, given
        `grad`, the gradient w.r.t. the logits of the last `forward(..., keep=True)`."""
        assert self._x is not None, "backward() needs a forward(keep=True) first"
        for i in range(len(self.activations), 0, -1):
            z, h = self._saved[i - 1]
            torch.bmm(grad, h.transpose(1, 2), out=self.weight_grads[i])
            torch.sum(grad, dim=2, out=self.bias_grads[i])
            grad_h = torch.bmm(self.weights[i].transpose(1, 2), grad)
            grad = ACTIVATION_BACKWARD[self.activations[i - 1]](grad_h, z, h)
        g0 = self.weight_grads[0]
        torch.mm(grad.reshape(-1, grad.shape[-1]), self._x, out=g0.view(-1, g0.shape[-1]))
        torch.sum(grad, dim=2, out=self.bias_grads[0])

    @torch.no_grad()
    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward on one shared mini-batch; returns the K mean cross-entropies."""
        logits = self.forward(x, keep=True)
        log_p = torch.log_softmax(logits, dim=1)
        k, classes, batch = log_p.shape
        target = y.view(1, 1, batch).expand(k, 1, batch)
        loss = log_p.gather(1, target).mean(dim=2).neg_().view(k)
        # d(mean NLL)/d(logits) = (softmax - onehot) / batch, as nll_loss_backward and
        # _log_softmax_backward_data compute it.
        onehot = torch.zeros(1, classes, batch, device=y.device, dtype=log_p.dtype)
        onehot.scatter_(1, y.view(1, 1, batch), -(1.0 / batch))
        grad = torch.exp(log_p).mul_(1.0 / batch).add_(onehot)
        self.backward(grad)
        return loss

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], list[float]]:
        """Mean cross-entropy and accuracy of each of the K models on (x, y)."""
        k = len(self.models)
        loss_sum = torch.zeros(k, device=x.device, dtype=torch.float64)
        correct = torch.zeros(k, device=x.device, dtype=torch.int64)
        for start in range(0, len(y), EVAL_CHUNK):
            logits = self.forward(x[start : start + EVAL_CHUNK])
            target = y[start : start + EVAL_CHUNK].expand(k, -1)
            loss_sum += F.cross_entropy(logits, target, reduction="none").sum(1).double()
            correct += (logits.argmax(1) == target).sum(1)
        return (loss_sum / len(y)).tolist(), (correct.double() / len(y)).tolist()


# --- Optimizers: torch.optim's update rules, applied to slices of the stack at once. ----------
#
# Each built-in torch.optim class below is re-expressed with per-model hyper-parameters as [K, 1, 1]
# (weights) or [K, 1] (biases) tensors, following torch's single-tensor implementation operation
# by operation (same per-model scalars computed in Python doubles, same state initialisation), so
# that one set of tensor operations updates every model of the slice. The learning rate (and any
# other hyper-parameter) is read each step from the model's own optimizer, whose own LR scheduler
# keeps running. Anything else (another class, fused/capturable/differentiable/maximize settings)
# is stepped by its own torch.optim instance on views of the stack.


def _bc(values: Sequence[float], like: torch.Tensor) -> torch.Tensor:
    """Per-model scalars as a tensor that broadcasts against `like` ([K, ...])."""
    shape = (len(values),) + (1,) * (like.dim() - 1)
    return torch.tensor(values, dtype=like.dtype, device=like.device).view(shape)


def _state(st: dict, name: str, like: torch.Tensor, fill: torch.Tensor | None = None):
    """The state tensor `name`, created (zeros, or `fill`) at the first step."""
    if name not in st:
        st[name] = torch.zeros_like(like) if fill is None else torch.ones_like(like) * fill
    return st[name]


Coef = torch.Tensor | float  # per-model values, or one value shared by the whole slice


def _add_(t: torch.Tensor, x: torch.Tensor, c: Coef) -> torch.Tensor:
    return t.add_(x, alpha=c) if isinstance(c, float) else t.add_(x * c)


def _addcmul_(t: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: Coef) -> torch.Tensor:
    return t.addcmul_(a, b, value=c) if isinstance(c, float) else t.addcmul_(a * c, b)


def _addcdiv_(t: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: Coef) -> torch.Tensor:
    return t.addcdiv_(a, b, value=c) if isinstance(c, float) else t.addcdiv_(a * c, b)


def _decayed(p: torch.Tensor, g: torch.Tensor, wd: Coef | None) -> torch.Tensor:
    if wd is None:
        return g
    return g.add(p, alpha=wd) if isinstance(wd, float) else g.add(p * wd)


def _sgd(p, g, st, c, step):  # noqa: ANN001 - tensors, state dict, coefficient getter, step
    g = _decayed(p, g, c("weight_decay"))
    if c("momentum") is not None:
        buf = st.get("momentum_buffer")
        if buf is None:
            buf = st["momentum_buffer"] = g.clone()
        else:
            _add_(buf.mul_(c("momentum")), g, c("one_minus_dampening"))
        g = _add_(g.clone(), buf, c("momentum")) if c("nesterov") is not None else buf
    _add_(p, g, c("neg_lr"))


def _adam(p, g, st, c, step):  # noqa: ANN001
    if c("decay") is not None:
        p.mul_(c("decay"))  # decoupled (AdamW)
    g = _decayed(p, g, c("weight_decay"))
    exp_avg = _state(st, "exp_avg", p)
    exp_avg_sq = _state(st, "exp_avg_sq", p)
    exp_avg.lerp_(g, c("one_minus_beta1"))
    _addcmul_(exp_avg_sq.mul_(c("beta2")), g, g, c("one_minus_beta2"))
    if c("amsgrad") is not None:
        top = _state(st, "max_exp_avg_sq", p)
        torch.maximum(top, exp_avg_sq, out=top)
        denom = (top.sqrt() / c("bias_correction2_sqrt")).add_(c("eps"))
    else:
        denom = (exp_avg_sq.sqrt() / c("bias_correction2_sqrt")).add_(c("eps"))
    _addcdiv_(p, exp_avg, denom, c("neg_step_size"))


def _adagrad(p, g, st, c, step):  # noqa: ANN001
    g = _decayed(p, g, c("weight_decay"))
    state_sum = _state(st, "sum", p, c("initial_accumulator_value"))
    state_sum.addcmul_(g, g)
    _addcdiv_(p, g, state_sum.sqrt().add_(c("eps")), c("neg_clr"))


def _adadelta(p, g, st, c, step):  # noqa: ANN001
    g = _decayed(p, g, c("weight_decay"))
    square_avg = _state(st, "square_avg", p)
    acc_delta = _state(st, "acc_delta", p)
    _addcmul_(square_avg.mul_(c("rho")), g, g, c("one_minus_rho"))
    std = square_avg.add(c("eps")).sqrt_()
    delta = acc_delta.add(c("eps")).sqrt_()
    delta.div_(std).mul_(g)
    _addcmul_(acc_delta.mul_(c("rho")), delta, delta, c("one_minus_rho"))
    _add_(p, delta, c("neg_lr"))


def _rmsprop(p, g, st, c, step):  # noqa: ANN001
    g = _decayed(p, g, c("weight_decay"))
    square_avg = _state(st, "square_avg", p)
    _addcmul_(square_avg.mul_(c("alpha")), g, g, c("one_minus_alpha"))
    if c("centered") is not None:
        grad_avg = _state(st, "grad_avg", p)
        grad_avg.lerp_(g, c("one_minus_alpha"))
        avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
    else:
        avg = square_avg.sqrt()
    avg = avg.add_(c("eps"))
    if c("momentum") is not None:
        buf = _state(st, "momentum_buffer", p)
        buf.mul_(c("momentum")).addcdiv_(g, avg)
        _add_(p, buf, c("neg_lr"))
    else:
        _addcdiv_(p, g, avg, c("neg_lr"))


def _adamax(p, g, st, c, step):  # noqa: ANN001
    g = _decayed(p, g, c("weight_decay"))
    exp_avg = _state(st, "exp_avg", p)
    exp_inf = _state(st, "exp_inf", p)
    exp_avg.lerp_(g, c("one_minus_beta1"))
    torch.maximum(exp_inf.mul_(c("beta2")), g.abs().add_(c("eps")), out=exp_inf)
    _addcdiv_(p, exp_avg, exp_inf, c("neg_clr"))


def _nadam(p, g, st, c, step):  # noqa: ANN001
    if c("decay") is not None:
        p.mul_(c("decay"))
    g = _decayed(p, g, c("weight_decay"))
    exp_avg = _state(st, "exp_avg", p)
    exp_avg_sq = _state(st, "exp_avg_sq", p)
    exp_avg.lerp_(g, c("one_minus_beta1"))
    _addcmul_(exp_avg_sq.mul_(c("beta2")), g, g, c("one_minus_beta2"))
    denom = exp_avg_sq.div(c("bias_correction2")).sqrt().add_(c("eps"))
    _addcdiv_(p, g, denom, c("grad_coef"))
    _addcdiv_(p, exp_avg, denom, c("avg_coef"))


def _sgd_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    momentum = h["momentum"] != 0
    return {
        "neg_lr": -h["lr"],
        "weight_decay": h["weight_decay"] if h["weight_decay"] != 0 else None,
        "momentum": h["momentum"] if momentum else None,
        "one_minus_dampening": 1 - h["dampening"] if momentum else None,
        "nesterov": 1.0 if h["nesterov"] else None,
    }


def _adam_family_scalars(h: dict) -> dict[str, float | None]:
    """Scalars Adam, AdamW and NAdam share: (decoupled) weight decay and the betas."""
    beta1, beta2 = h["betas"]
    lr, wd, decoupled = h["lr"], h["weight_decay"], h["decoupled_weight_decay"]
    return {
        "decay": 1 - lr * wd if wd != 0 and decoupled else None,
        "weight_decay": wd if wd != 0 and not decoupled else None,
        "one_minus_beta1": 1 - beta1,
        "beta2": beta2,
        "one_minus_beta2": 1 - beta2,
    }


def _adam_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    beta1, beta2 = h["betas"]
    lr = h["lr"]
    return {
        **_adam_family_scalars(h),
        "amsgrad": 1.0 if h["amsgrad"] else None,
        "bias_correction2_sqrt": (1 - beta2**step) ** 0.5,
        "eps": h["eps"],
        "neg_step_size": -(lr / (1 - beta1**step)),
    }


def _adagrad_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    return {
        "weight_decay": h["weight_decay"] if h["weight_decay"] != 0 else None,
        "initial_accumulator_value": h["initial_accumulator_value"],
        "neg_clr": -(h["lr"] / (1 + (step - 1) * h["lr_decay"])),
        "eps": h["eps"],
    }


def _adadelta_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    return {
        "weight_decay": h["weight_decay"] if h["weight_decay"] != 0 else None,
        "rho": h["rho"],
        "one_minus_rho": 1 - h["rho"],
        "eps": h["eps"],
        "neg_lr": -h["lr"],
    }


def _rmsprop_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    return {
        "weight_decay": h["weight_decay"] if h["weight_decay"] != 0 else None,
        "alpha": h["alpha"],
        "one_minus_alpha": 1 - h["alpha"],
        "centered": 1.0 if h["centered"] else None,
        "eps": h["eps"],
        "momentum": h["momentum"] if h["momentum"] > 0 else None,
        "neg_lr": -h["lr"],
    }


def _adamax_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    beta1, beta2 = h["betas"]
    return {
        "weight_decay": h["weight_decay"] if h["weight_decay"] != 0 else None,
        "one_minus_beta1": 1 - beta1,
        "beta2": beta2,
        "eps": h["eps"],
        "neg_clr": -(h["lr"] / (1 - beta1**step)),
    }


def _nadam_scalars(h: dict, step: int, extra: dict) -> dict[str, float | None]:
    beta1, beta2 = h["betas"]
    lr, decay = h["lr"], h["momentum_decay"]
    mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * decay)))
    mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * decay)))
    # torch keeps the product of the mu's in a scalar tensor of the default scalar dtype
    mu_product = extra.setdefault("mu_product", torch.ones((), dtype=_get_scalar_dtype()))
    mu_product *= mu
    product = mu_product.item()
    return {
        **_adam_family_scalars(h),
        "bias_correction2": 1 - beta2**step,
        "eps": h["eps"],
        "grad_coef": -lr * (1.0 - mu) / (1.0 - product),
        "avg_coef": (-lr * mu_next) / (1.0 - product * mu_next),
    }


# torch.optim class -> (update of one tensor slice, per-model scalars of one step)
RULES: dict[type, tuple[Callable, Callable[[dict, int, dict], dict[str, float | None]]]] = {
    torch.optim.SGD: (_sgd, _sgd_scalars),
    torch.optim.Adam: (_adam, _adam_scalars),
    torch.optim.AdamW: (_adam, _adam_scalars),
    torch.optim.Adagrad: (_adagrad, _adagrad_scalars),
    torch.optim.Adadelta: (_adadelta, _adadelta_scalars),
    torch.optim.RMSprop: (_rmsprop, _rmsprop_scalars),
    torch.optim.Adamax: (_adamax, _adamax_scalars),
    torch.optim.NAdam: (_nadam, _nadam_scalars),
}
# Settings under which torch runs another implementation (or one the rules above do not mirror).
_OTHER_IMPLEMENTATION = ("fused", "capturable", "differentiable", "maximize")


# Classes with a fused (one pass over memory) torch implementation, used for models this large:
# their update is memory-bound, and torch's default implementation makes ~10 passes.
FUSED = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad)
FUSED_MIN_PARAMETERS = 50_000


def use_fused(optimizer: torch.optim.Optimizer) -> bool:
    """Whether this optimizer should step with torch's fused implementation of its class."""
    group = optimizer.param_groups[0]
    size = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    return (
        isinstance(optimizer, FUSED)
        and size >= FUSED_MIN_PARAMETERS
        and not any(group.get(name) for name in ("foreach", *_OTHER_IMPLEMENTATION))
    )


def rule_key(optimizer: torch.optim.Optimizer) -> tuple | None:
    """Which stacked rule updates this optimizer's model, and the settings that must be shared
    to update models in one slice; None: its own step() runs."""
    cls = type(optimizer)
    if cls not in RULES or len(optimizer.param_groups) != 1 or use_fused(optimizer):
        return None
    group = optimizer.param_groups[0]
    if any(group.get(name) for name in _OTHER_IMPLEMENTATION):
        return None
    values = [v for k, v in group.items() if k != "params"]
    values += [x for v in values if isinstance(v, tuple | list) for x in v]
    if any(isinstance(v, torch.Tensor) for v in values):
        return None
    scalars = RULES[cls][1](dict(group), 1, {})
    return (cls.__name__, tuple(sorted(k for k, v in scalars.items() if v is None)))


class _Coefficients:
    """One step's per-model scalars of a slice, as tensors broadcasting against [K, ...]."""

    def __init__(self, per_model: list[dict[str, float | None]]) -> None:
        self.per_model = per_model
        self.cache: dict[tuple[str, int], Coef | None] = {}

    def get(self, name: str, like: torch.Tensor) -> Coef | None:
        key = (name, like.dim())
        if key not in self.cache:
            first = self.per_model[0][name]
            values = None if first is None else [m[name] for m in self.per_model]
            if values is None or all(v == first for v in values):
                self.cache[key] = None if first is None else float(first)
            else:
                self.cache[key] = _bc(values, like)
        return self.cache[key]


class StackedOptimizers:
    """Steps the optimizers of a stack's models: a slice of models that share a rule (see
    `rule_key`) is updated with one set of tensor operations; other models by their own
    optimizer (whose parameters are views of the stack)."""

    def __init__(self, stack: StackedMLP, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        self.stack = stack
        self.optimizers = list(optimizers)
        self.step_count = 0
        keys = [rule_key(o) for o in self.optimizers]
        for optimizer in self.optimizers:
            if use_fused(optimizer):
                optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
        # per slice: (start, stop, rule key); one state dict per stacked tensor and per model
        self.slices: list[tuple[int, int, tuple | None]] = []
        for k, key in enumerate(keys):
            if key is not None and self.slices and self.slices[-1][2] == key:
                start, _, _ = self.slices[-1]
                self.slices[-1] = (start, k + 1, key)
            else:
                self.slices.append((k, k + 1, key))
        self.states: list[list[dict[str, torch.Tensor]]] = [
            [{} for _ in self._tensors()] for _ in self.slices
        ]
        self.extras: list[dict] = [{} for _ in self.optimizers]

    def _tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        s = self.stack
        return list(zip(s.weights + s.biases, s.weight_grads + s.bias_grads, strict=True))

    def keep(self, kept: Sequence[int]) -> None:
        """Keep only the models at positions `kept` (call after the stack was restacked)."""
        states, slices, position = [], [], 0
        for (start, stop, key), state in zip(self.slices, self.states, strict=True):
            rows = [k - start for k in kept if start <= k < stop]
            if rows:
                index = torch.tensor(rows, device=self.stack.weights[0].device)
                states.append([{n: t[index] for n, t in st.items()} for st in state])
                slices.append((position, position + len(rows), key))
                position += len(rows)
        self.slices, self.states = slices, states
        self.optimizers = [self.optimizers[k] for k in kept]
        self.extras = [self.extras[k] for k in kept]

    @torch.no_grad()
    def step(self) -> None:
        self.step_count += 1
        tensors = self._tensors()
        for (start, stop, key), state in zip(self.slices, self.states, strict=True):
            if key is None:
                for optimizer in self.optimizers[start:stop]:
                    optimizer.step()
                continue
            update, scalars_of = RULES[type(self.optimizers[start])]
            per_model = [
                scalars_of(o.param_groups[0], self.step_count, e)
                for o, e in zip(self.optimizers[start:stop], self.extras[start:stop], strict=True)
            ]
            coefficients = _Coefficients(per_model)
            for (p, g), st in zip(tensors, state, strict=True):
                p, g = p[start:stop], g[start:stop]
                coefficient = functools.partial(coefficients.get, like=p)
                update(p, g, st, coefficient, self.step_count)


def train_stack(runs: Sequence[run_module.PreparedRun], progress: bool = False) -> list[Outcome]:
    """Train prepared runs of one group (see `group_key`) together; one Outcome per run, as
    engine.train would return it for that run alone."""
    problem = runs[0].problem
    data, schedule = problem.data, problem.schedule
    x, y = data.x_train, data.y_train
    x_eval, y_eval = x[problem.eval_train_idx], y[problem.eval_train_idx]
    n, bs, log_every = len(y), schedule.batch_size, schedule.log_every
    steps_per_epoch = n // bs
    recorders = [Recorder(steps_per_epoch) for _ in runs]
    status: list[str] = ["completed"] * len(runs)
    diverged_at: list[int | None] = [None] * len(runs)
    # runs still training, in stack order: models that share an update rule are neighbours
    active = sorted(range(len(runs)), key=lambda i: repr(rule_key(runs[i].optimizer)))
    stack = StackedMLP([runs[i].model for i in active])
    optimizers = StackedOptimizers(stack, [runs[i].optimizer for i in active])
    losses = torch.zeros(len(runs), log_every, device=x.device, dtype=x.dtype)
    train_time = 0.0
    bar = tqdm(total=schedule.iterations, disable=not progress, mininterval=1.0, unit="it")

    def run_evaluation(iteration: int) -> list[float]:
        train_loss, train_acc = stack.evaluate(x_eval, y_eval)
        test_loss, test_acc = stack.evaluate(data.x_test, data.y_test)
        for j, i in enumerate(active):
            recorders[i].add(
                iteration,
                train_time,
                train_loss=train_loss[j],
                train_accuracy=train_acc[j],
                test_loss=test_loss[j],
                test_accuracy=test_acc[j],
            )
        return train_loss

    def drop(failed: list[int], iteration: int) -> None:
        nonlocal active, losses
        if not failed:
            return
        for j in failed:
            status[active[j]], diverged_at[active[j]] = "diverged", iteration
        kept = [j for j in range(len(active)) if j not in failed]
        active = [active[j] for j in kept]
        if active:
            stack.restack([runs[i].model for i in active])
            optimizers.keep(kept)
            losses = torch.zeros(len(active), log_every, device=x.device, dtype=x.dtype)

    initial = run_evaluation(0)
    limits = [
        divergence_limit(r.problem.schedule.divergence_factor, v)
        for r, v in zip(runs, initial, strict=True)
    ]
    batches = batch_indices(n, bs, schedule.iterations, runs[0].order_generator(), x.device)
    tic = time.perf_counter()
    for it, idx in batches:
        losses[:, (it - 1) % log_every] = stack.train_step(x[idx], y[idx])
        optimizers.step()
        with warnings.catch_warnings():
            # optimizers updated by a stacked rule never call their own step()
            warnings.filterwarnings("ignore", "Detected call of")
            for i in active:
                runs[i].scheduler.step()

        if it % log_every == 0 or it == schedule.iterations:
            k = (it - 1) % log_every + 1
            batch_loss = losses[:, :k].mean(dim=1).tolist()  # synchronises: time is exact
            train_time += time.perf_counter() - tic
            for j, i in enumerate(active):
                lr = runs[i].optimizer.param_groups[0]["lr"]
                recorders[i].add(it, train_time, batch_loss=batch_loss[j], lr=lr)
            bar.update(it - bar.n)
            drop([j for j, i in enumerate(active) if diverging(batch_loss[j], limits[i])], it)
            if active and (it % schedule.eval_every == 0 or it == schedule.iterations):
                train_loss = run_evaluation(it)
                drop([j for j, i in enumerate(active) if diverging(train_loss[j], limits[i])], it)
            if not active:
                break
            tic = time.perf_counter()
    bar.close()
    return [
        Outcome(s, r, d, train_time) for s, r, d in zip(status, recorders, diverged_at, strict=True)
    ]


def execute_group(jobs: Sequence[Job], threads: int | None = None) -> list[dict[str, Any]]:
    """Train the jobs (cfg, out_dir, choices), all with the same `group_key`, together as one
    stack; write each job's results as run.execute does; return their run.json records in order.

    Every job is validated and built (run.prepare) before anything trains, so a job with a bad
    config raises the HarnessError run.execute would raise, and nothing is written. `threads`
    overrides the configs' torch thread count (the launcher's workers use 1).
    """
    runs: list[run_module.PreparedRun] = []
    for cfg, out_dir, choices in jobs:
        prepared = run_module.prepare(cfg, Path(out_dir), choices)
        if runs:  # one copy of the data for the whole stack
            prepared.problem = dataclasses.replace(prepared.problem, data=runs[0].problem.data)
        runs.append(prepared)
    keys = {group_key(r.cfg) for r in runs}
    if len(keys) != 1 or None in keys:
        raise ValueError("execute_group() needs jobs that share one group_key (not None)")
    if threads is not None:
        torch.set_num_threads(threads)
    cfg = runs[0].cfg
    log.info(
        "training %d %s models stacked for %d iterations on %s",
        len(runs),
        runs[0].choices.get("model"),
        runs[0].problem.schedule.iterations,
        runs[0].device,
    )
    outcomes = train_stack(runs, progress=run_module.show_progress(cfg.train.progress))
    return [run_module.finish(r, o) for r, o in zip(runs, outcomes, strict=True)]


# --- Launching a sweep: groups, sub-stacks, one single-threaded worker process per core. -------


def model_flops(cfg: DictConfig, in_features: int = 784, classes: int = 10) -> float:
    """FLOPs of one training step (forward + backward) of one model of `cfg`'s MLP: 2 per
    multiply-add, forward, weight gradients, and input gradients of all layers but the first."""
    sizes = [in_features, *cfg.model.hidden, classes]
    weights = [a * b for a, b in zip(sizes, sizes[1:], strict=False)]
    return 2.0 * cfg.train.batch_size * (2 * sum(weights) + sum(weights[1:]))


def _task_cost(jobs: Sequence[Job]) -> float:
    cfg = jobs[0][0]
    # A fixed per-model cost (optimizer step and Python overhead) plus the arithmetic.
    return len(jobs) * (model_flops(cfg) + 5e6) * (cfg.train.iterations or cfg.train.epochs * 400)


def plan(jobs: Sequence[Job], workers: int) -> list[list[int]]:
    """Split jobs into tasks (lists of job indices), largest first: each stackable group is split
    into up to `workers` sub-stacks of near-equal size so that all workers stay busy; jobs that
    cannot be stacked (or ask for train.engine=single, or train.engine=auto alone in their group)
    are tasks of one run for the single-run engine."""
    groups: dict[tuple, list[int]] = {}
    singles: list[list[int]] = []
    for index, (cfg, _, _) in enumerate(jobs):
        key = None if cfg.train.get("engine") == "single" else group_key(cfg)
        if key is None:
            singles.append([index])
        else:
            groups.setdefault(key, []).append(index)
    tasks = list(singles)
    for members in groups.values():
        if len(members) == 1 and jobs[members[0]][0].train.get("engine") == "auto":
            tasks.append(members)
            continue
        parts = min(workers, len(members))
        tasks += [members[p::parts] for p in range(parts)]
    return sorted(tasks, key=lambda t: -_task_cost([jobs[i] for i in t]))


def _run_task(jobs: Sequence[Job], threads: int | None) -> list[dict[str, Any]]:
    cfg = jobs[0][0]
    single = len(jobs) == 1 and (
        cfg.train.get("engine") in ("single", "auto") or group_key(cfg) is None
    )
    if single:
        if threads is not None:
            cfg = cfg.copy()
            cfg.threads = threads
        return [run_module.execute(cfg, Path(jobs[0][1]), jobs[0][2])]
    return execute_group(jobs, threads=threads)


def _worker_init(level: int) -> None:
    torch.set_num_threads(1)
    logging.basicConfig(level=level, format="[%(processName)s] %(message)s")


class _Progress:
    """Logs where a batch of tasks is: task i of N, elapsed, estimated time left."""

    def __init__(self, tasks: int, runs: int) -> None:
        self.tasks, self.finished, self.started = tasks, 0, time.perf_counter()
        log.info("training %d runs as %d tasks", runs, tasks)

    def done(self, runs: int) -> None:
        self.finished += 1
        elapsed = time.perf_counter() - self.started
        left = elapsed / self.finished * (self.tasks - self.finished)
        log.info(
            "task %d of %d done (%d runs), elapsed %.0f s, ~%.0f s left",
            self.finished,
            self.tasks,
            runs,
            elapsed,
            left,
        )


def execute_jobs(jobs: Sequence[Job], workers: int | None = None) -> list[dict[str, Any]]:
    """Run a sweep's jobs (cfg, out_dir, choices) with the engine each asks for and return their
    run.json records in job order: what a launcher calls.

    On the CPU, `workers` single-threaded processes (default: one per core) train the tasks of
    `plan` (largest first); on CUDA, or with workers=1, everything runs here, one task after
    another. All configs are validated first: a HarnessError is raised before anything trains.
    """
    jobs = list(jobs)
    if not jobs:  # e.g. every job of a resumed sweep had finished already
        return []
    for cfg, _, _ in jobs:
        validate_run(cfg)
        run_module.resolve_device(cfg.device)
    on_gpu = any(run_module.resolve_device(cfg.device).type != "cpu" for cfg, _, _ in jobs)
    if workers is None:
        workers = 1 if on_gpu else (os.cpu_count() or 1)
    tasks = plan(jobs, workers)
    records: list[dict[str, Any] | None] = [None] * len(jobs)
    progress = _Progress(len(tasks), len(jobs))
    if workers <= 1 or len(tasks) <= 1 and len(tasks[0]) <= 1:
        for task in tasks:
            for i, record in zip(task, _run_task([jobs[i] for i in task], None), strict=True):
                records[i] = record
            progress.done(len(task))
        return records  # type: ignore[return-value]
    context = multiprocessing.get_context("spawn")  # no fork after torch started its threads
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(workers, len(tasks)),
        mp_context=context,
        initializer=_worker_init,
        initargs=(logging.getLogger("harness").getEffectiveLevel(),),
    ) as pool:
        futures = {pool.submit(_run_task, [jobs[i] for i in task], 1): task for task in tasks}
        for future in concurrent.futures.as_completed(futures):
            for i, record in zip(futures[future], future.result(), strict=True):
                records[i] = record
            progress.done(len(futures[future]))
    return records  # type: ignore[return-value]
