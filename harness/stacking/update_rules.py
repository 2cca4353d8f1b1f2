"""The stacked update rules: the course's eight torch.optim classes re-expressed so that one set
of tensor operations updates a slice of a stack's models, each with its own hyper-parameters
(exact against torch.optim: tests/test_stacked.py), and which rule, if any, a model's optimizer
takes (`rule_key`). `StackedOptimizers` (harness.stacking.member_optimizers) applies them."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.optimizer import _get_scalar_dtype

# Each built-in torch.optim class below is re-expressed with per-model hyper-parameters as [K, 1, 1]
# (weights) or [K, 1] (biases) tensors, following torch's single-tensor implementation operation
# by operation (same per-model scalars computed in Python doubles, same state initialisation), so
# that one set of tensor operations updates every model of the slice. The learning rate (and any
# other hyper-parameter) is read each step from the model's own optimizer, whose own LR scheduler
# keeps running. Anything else (another class, fused/capturable/differentiable/maximize settings)
# is stepped by its own optimizer instance on views of the stack.


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


def rule_key(optimizer: torch.optim.Optimizer, capturable: bool = False) -> tuple | None:
    """Which stacked rule updates this optimizer's model, and the settings that must be shared
    to update models in one slice; None: its own step() runs. `capturable` (a stack on CUDA):
    the classes torch would fuse (`use_fused`) take their rule too."""
    cls = type(optimizer)
    if cls not in RULES or len(optimizer.param_groups) != 1:
        return None
    if not capturable and use_fused(optimizer):
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
