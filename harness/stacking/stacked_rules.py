"""Update rules of a stack: each model's optimizer steps its slice of the stacked tensors.

A model's update takes one of these paths (`StackedOptimizers.paths`, recorded in run.json as
`update_path`):

* ``stacked_rule``: the eight course optimizer classes in their default implementation are
  updated slice-wise by `RULES`, torch's single-tensor update rewritten with per-model
  [K, 1, 1] coefficients (one set of tensor operations for all models of a class; exact against
  torch.optim, see tests/test_stacked.py);
* ``torch_fused``: SGD, Adam, AdamW and Adagrad on models of >= 50,000 parameters step through
  torch's own fused implementation (one pass over memory; ~1e-7 from the default one in
  float32), in a stack on the CPU (on CUDA they take their stacked rule: see below);
* ``optimizer_step``: any other optimizer (RAdam, classes outside torch.optim, unusual settings)
  runs its own ``step()`` on its model's parameters, which are views of the stacked tensors.
  That is exact only if ``step()`` updates them in place: `stacking_refusal` checks it on a
  probe before a run joins a stack, and `StackedOptimizers.step` after every step;
* ``shared_step``: the seeds of one configuration (same optimizer, hyper-parameters and
  schedule) whose optimizer would run its own ``step()`` share one instance of it over their
  slice of the stacked tensors: one step for all of them. Exact for an optimizer whose update
  is element-wise; `sharing_refusal` checks it on a probe (one instance against one per model,
  a model dropped half-way) before they share.

A stack on CUDA steps its rules `capturable` (unless train.cuda_graph=off): each step's
per-model coefficients are rows of one tensor on the device, loaded once per step without a
synchronisation (`_DeviceCoefficients`), and the classes torch would fuse take their stacked
rule as well (one set of kernels for the slice instead of a fused kernel per model), so that the
rules' updates are device work alone, which a CUDA graph of the step can capture
(harness.stacking.stacked_graph). They are the rules' per-model tensor form, which a slice already
takes for the values its models do not share.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.optimizer import _get_scalar_dtype

from harness.errors import HarnessError
from harness.stacking.stacked_model import StackedMLP
from harness.stacking.stacked_module import StackedModule
from harness.training.restoring import load_optimizer_state
from harness.training.stepping import failure_reason, in_train_mode

STACKED_RULE, TORCH_FUSED, OPTIMIZER_STEP = "stacked_rule", "torch_fused", "optimizer_step"
SHARED_STEP = "shared_step"

# Each built-in torch.optim class below is re-expressed with per-model hyper-parameters as [K, 1, 1]
# (weights) or [K, 1] (biases) tensors, following torch's single-tensor implementation operation
# by operation (same per-model scalars computed in Python doubles, same state initialisation), so
# that one set of tensor operations updates every model of the slice. The learning rate (and any
# other hyper-parameter) is read each step from the model's own optimizer, whose own LR scheduler
# keeps running. Anything else (another class, fused/capturable/differentiable/maximize settings)
# is stepped by its own optimizer instance on views of the stack.


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


OptimizerFactory = Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]
# params -> (optimizer, its LR schedule), as a run's config builds them (building)
ScheduledFactory = Callable[[list[torch.nn.Parameter]], tuple[torch.optim.Optimizer, Any]]


@dataclass(frozen=True)
class Sharing:
    """What lets members of a stack share one optimizer instance: `config_id`, the identity of
    their configuration (runs with the same one are its seeds), and how to build its optimizer
    and schedule over their slice of the stacked tensors."""

    config_id: str
    build: ScheduledFactory


# The probe's model: a hidden matrix, a head and its bias (Muon's split sees both of its parts).
PROBE_SHAPES = ((3, 8), (2, 3), (2,))


@torch.no_grad()
def stacking_refusal(make_optimizer: OptimizerFactory, dtype: torch.dtype) -> str | None:
    """Why the optimizers `make_optimizer` builds cannot run their own step() in a stack, or
    None: two steps on parameters that are views of stacked tensors (whose gradients are views
    of stacked gradients) must leave both views, must not write into the neighbouring model,
    must not draw random numbers (Gravity's random initial state), and must not amplify float
    rounding (`_amplifies_rounding`)."""
    generator = torch.Generator().manual_seed(0)
    stacked = [torch.zeros(2, *shape, dtype=dtype) for shape in PROBE_SHAPES]  # two models
    grads = [torch.randn(2, *shape, dtype=dtype, generator=generator) for shape in PROBE_SHAPES]
    params = [torch.nn.Parameter(tensor[0]) for tensor in stacked]  # the first is probed
    for param, grad in zip(params, grads, strict=True):
        param.grad = grad[0]
    with torch.random.fork_rng():
        drawn_before = torch.random.get_rng_state()
        try:
            optimizer = in_train_mode(make_optimizer(params))  # as in a stack
            for _ in range(2):
                optimizer.step()
            amplifies = _amplifies_rounding(make_optimizer)
        except Exception as exc:  # any failure on a probe: this class cannot be trusted here
            # (FAdam's float32 state, its library's default, fails the float64 rounding probe)
            return f"it failed on a probe ({type(exc).__name__}: {exc})"
        # Alone, a run's draws follow its own seed; in a stack, its neighbours' steps draw too.
        if not torch.equal(drawn_before, torch.random.get_rng_state()):
            return "its step draws torch's global random numbers, which a stack's models share"
        if not all(_views(p, t[0], g[0]) for p, t, g in zip(params, stacked, grads, strict=True)):
            return "its step() replaces its parameters' tensors instead of updating them in place"
        if any(t[1].any() for t in stacked):
            return "its step() wrote outside its own parameters"
        if amplifies:
            return (
                "its update amplifies float rounding (an eigendecomposition of a low-rank "
                "statistic): the stack's and a lone run's gradients differ in their last bits"
            )
    return None


ROUNDING = 1e-12  # relative change of the probe's gradients: far above float64's rounding
AMPLIFIED = 1e-6  # relative change of the parameters above which rounding is amplified


def _amplifies_rounding(make_optimizer: OptimizerFactory) -> bool:
    """Whether gradients that differ by ROUNDING (a stack computes them with other kernels than
    a lone run, in another order) give parameters that differ by more than AMPLIFIED after a
    few steps: such an optimizer (SOAP) cannot be exact in a stack."""
    generator = torch.Generator().manual_seed(1)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=torch.float64, generator=generator)

    # A layer's gradient has rank <= its batch size: rank one here, as degenerate as they come.
    steps = [
        [randn(*s[:1], 1) @ randn(1, *s[1:]) if len(s) == 2 else randn(*s) for s in PROBE_SHAPES]
        for _ in range(4)
    ]
    noise = [[randn(*shape) for shape in PROBE_SHAPES] for _ in range(4)]
    trained = []
    for scale in (0.0, ROUNDING):
        params = [torch.nn.Parameter(torch.ones(*s, dtype=torch.float64)) for s in PROBE_SHAPES]
        optimizer = in_train_mode(make_optimizer(params))
        for grads, noises in zip(steps, noise, strict=True):
            for param, g, n in zip(params, grads, noises, strict=True):
                param.grad = g + scale * n * g.abs()
            optimizer.step()
        trained.append(torch.cat([p.detach().flatten() for p in params]))
    change = (trained[0] - trained[1]).abs().max() / trained[0].abs().max().clamp_min(1e-30)
    return bool(change > AMPLIFIED)


SHARING_PROBE_MODELS = 4  # no dimension of PROBE_SHAPES: a state indexed wrongly shows
SHARING_TOLERANCE = 1e-12  # relative, in float64: rounding only
SHARING_STEPS, SHARING_DROP = 8, 4  # the probe's steps, and the step before which it drops
# Each model's gradient at a step, from its own weights (in its own shapes), the model's index
# and the step: the probe's regimes.
GradientOf = Callable[[list[torch.Tensor], int, int], list[torch.Tensor]]


def _probe_regimes() -> dict[str, GradientOf]:
    """The gradients the sharing probe trains its models on, each regime a way an update may
    couple the entries of a tensor: a quadratic per model (its own minimum and curvature, so
    that a step size worked out from all parameters differs between models), the same made
    orthogonal to each row of the weights (where projections such as AdamP's act), a tiny MLP
    on its own data (the probe's shapes: a hidden matrix, a head and its bias; gradients of low
    rank, as a network's are), and heavy-tailed noise (norms that jump up and down, where
    adaptive step sizes such as ASGD's react)."""
    generator = torch.Generator().manual_seed(2)
    k = SHARING_PROBE_MODELS

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, dtype=torch.float64, generator=generator)

    minima = [[draw(*s) for s in PROBE_SHAPES] for _ in range(k)]
    curvature = [1.0, 30.0, 0.05, 4.0]
    inputs = [draw(16, PROBE_SHAPES[0][1]) for _ in range(k)]
    labels = [torch.randint(0, 2, (16,), generator=generator) for _ in range(k)]
    noise = [[[draw(*s) for s in PROBE_SHAPES] for _ in range(SHARING_STEPS)] for _ in range(k)]
    scales = torch.exp(3 * draw(k, SHARING_STEPS))

    def quadratic(weights: list[torch.Tensor], m: int, step: int) -> list[torch.Tensor]:
        return [(w - low) * curvature[m] for w, low in zip(weights, minima[m], strict=True)]

    def orthogonal(weights: list[torch.Tensor], m: int, step: int) -> list[torch.Tensor]:
        grads = quadratic(weights, m, step)
        return [
            g - (g * w).sum(-1, keepdim=True) / (w * w).sum(-1, keepdim=True) * w
            for g, w in zip(grads, weights, strict=True)
        ]

    def network(weights: list[torch.Tensor], m: int, step: int) -> list[torch.Tensor]:
        with torch.enable_grad():
            hidden, head, bias = (w.detach().requires_grad_() for w in weights)
            logits = torch.tanh(inputs[m] @ hidden.T) @ head.T + bias
            loss = torch.nn.functional.cross_entropy(logits, labels[m])
            return list(torch.autograd.grad(loss, (hidden, head, bias)))

    def heavy_tailed(weights: list[torch.Tensor], m: int, step: int) -> list[torch.Tensor]:
        return [n * scales[m, step] for n in noise[m][step]]

    return {
        "quadratic": quadratic,
        "orthogonal": orthogonal,
        "network": network,
        "heavy_tailed": heavy_tailed,
    }


@torch.no_grad()
def sharing_refusal(make_optimizer: OptimizerFactory) -> str | None:
    """Why one instance of the optimizers `make_optimizer` builds, stepping the stacked tensors
    of several models with the same hyper-parameters, would not give each model what its own
    instance gives it (None: it does), on a probe in float64: SHARING_PROBE_MODELS models
    trained by their own instances and by one shared instance in each regime of
    `_probe_regimes`, the second and fourth models dropped half-way (their state dropped with
    them, as `StackedOptimizers.keep` does). An element-wise update passes; a norm, a scalar,
    a projection or a matrix shared across a tensor does not."""
    generator = torch.Generator().manual_seed(3)
    start = [
        torch.randn(SHARING_PROBE_MODELS, *s, dtype=torch.float64, generator=generator)
        for s in PROBE_SHAPES
    ]
    for name, gradient_of in _probe_regimes().items():
        try:
            own, shared = _shared_against_own(make_optimizer, gradient_of, start)
        except Exception as exc:  # any failure on the probe: do not share
            return f"one instance for its seeds failed on a probe ({type(exc).__name__}: {exc})"
        for mine, together in zip(own, shared, strict=True):
            scale = mine.abs().max().clamp_min(1e-30)
            if not (mine - together).abs().max() / scale <= SHARING_TOLERANCE:
                return (
                    "its update is not element-wise: one instance for its seeds would mix them "
                    f"(found on the probe's {name.replace('_', '-')} gradients)"
                )
    return None


def _shared_against_own(
    make_optimizer: OptimizerFactory, gradient_of: GradientOf, start: list[torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The kept models' weights after SHARING_STEPS steps, each with its own instance and all
    with one shared instance (flattened, one tensor per kept model)."""
    kept = [0, 2]
    own = []
    for m in kept:
        params = [torch.nn.Parameter(t[m].clone()) for t in start]
        optimizer = in_train_mode(make_optimizer(params))
        for step in range(SHARING_STEPS):
            for param, grad in zip(params, gradient_of(list(params), m, step), strict=True):
                param.grad = grad
            optimizer.step()
        own.append(torch.cat([p.detach().flatten() for p in params]))
    stacked = [t.clone() for t in start]
    params = [torch.nn.Parameter(t) for t in stacked]
    optimizer = in_train_mode(make_optimizer(params))
    rows = list(range(SHARING_PROBE_MODELS))
    for step in range(SHARING_STEPS):
        if step == SHARING_DROP:
            stacked, rows = [t[kept].clone() for t in stacked], kept
            params, optimizer, _ = _resliced(
                optimizer, params, stacked, kept, lambda ps: (make_optimizer(ps), None)
            )
            in_train_mode(optimizer)
        per_model = [gradient_of([p[j] for p in params], m, step) for j, m in enumerate(rows)]
        for i, param in enumerate(params):
            param.grad = torch.stack([grads[i] for grads in per_model])
        optimizer.step()
    shared = [torch.cat([t[j].flatten() for t in stacked]) for j in range(len(kept))]
    return own, shared


def _resliced(
    optimizer: torch.optim.Optimizer,
    params: Sequence[torch.nn.Parameter],
    tensors: Sequence[torch.Tensor],
    rows: Sequence[int],
    build: ScheduledFactory,
) -> tuple[list[torch.nn.Parameter], torch.optim.Optimizer, Any]:
    """A new instance and schedule (`build`) over `tensors`, the `rows` of the stacked tensors
    `params` were, carrying `optimizer`'s state over: a state tensor laid out like its
    parameter (first dimension the models) keeps the rows, any other state (a step count) is
    kept as it is; its groups' values (counters some optimizers keep there) too. Returns
    (parameters, optimizer, schedule)."""
    new_params = [torch.nn.Parameter(t) for t in tensors]
    fresh, schedule = build(new_params)
    index = torch.tensor(list(rows), device=tensors[0].device)
    for old, new in zip(params, new_params, strict=True):
        state = optimizer.state.get(old)
        if state:
            fresh.state[new] = {
                name: value[index]
                if isinstance(value, torch.Tensor)
                and value.dim() == old.dim()
                and value.shape[0] == old.shape[0]
                else value
                for name, value in state.items()
            }
    for old_group, group in zip(optimizer.param_groups, fresh.param_groups, strict=True):
        group.update({key: value for key, value in old_group.items() if key != "params"})
    return new_params, fresh, schedule


def _views(param: torch.Tensor, data: torch.Tensor, grad: torch.Tensor) -> bool:
    return (
        param.data_ptr() == data.data_ptr()
        and param.grad is not None
        and param.grad.data_ptr() == grad.data_ptr()
    )


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


class _DeviceCoefficients:
    """One step's per-model scalars of every rule slice of a stack as rows of one tensor on the
    stack's device, which the rules read through views (`getter`): a CUDA graph of the rules
    reads each step's values from it. Every value the first model of a slice has is a row of
    per-model values (the form `_Coefficients` gives values the models do not share)."""

    def __init__(self) -> None:
        self.layout: list[tuple[int, str, int]] = []  # (slice, name, models) of each row
        self.rows: dict[tuple[int, str], torch.Tensor] = {}
        self.flat = torch.empty(0)  # the rows, one after another

    def load(self, per_slice: dict[int, list[dict[str, float | None]]], like: torch.Tensor) -> bool:
        """Write one step's values (slice index -> per-model scalars); whether the rows were
        made again (other values in use, other slices): what reads the old ones must read anew."""
        layout = [
            (i, name, len(per_model))
            for i, per_model in per_slice.items()
            for name, value in per_model[0].items()
            if value is not None
        ]
        values = [float(m[name]) for i, name, _ in layout for m in per_slice[i]]
        remade = layout != self.layout
        if remade:
            flat = torch.empty(len(values), dtype=like.dtype, device=like.device)
            self.rows, start = {}, 0
            for i, name, models in layout:
                self.rows[(i, name)] = flat[start : start + models]
                start += models
            self.layout, self.flat = layout, flat
        # from pinned memory without waiting: the copy is ordered before the step that reads it
        on_cuda = like.device.type == "cuda"
        host = torch.tensor(values, dtype=like.dtype, pin_memory=on_cuda)
        self.flat.copy_(host, non_blocking=on_cuda)
        return remade

    def getter(self, index: int) -> Callable[[str, torch.Tensor], Coef | None]:
        """Slice `index`'s coefficient of a name, shaped to broadcast against `like` ([K, ...])."""

        def get(name: str, like: torch.Tensor) -> Coef | None:
            row = self.rows.get((index, name))
            return None if row is None else row.view(-1, *(1,) * (like.dim() - 1))

        return get


@dataclass
class _SharedInstance:
    """The one optimizer (and schedule) that steps the slice of a stack's tensors holding the
    seeds of one configuration, and the parameters it steps: aliases of that slice."""

    sharing: Sharing
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: Any


class StackedOptimizers:
    """Steps the optimizers of a stack's models: a slice of models that share a rule (see
    `rule_key`) is updated with one set of tensor operations; a slice of seeds of one
    configuration that may share an instance (`sharing`, per model: a `Sharing` or None) by
    one instance of their optimizer; other models by their own optimizer (whose parameters are
    views of the stack). `capturable` (a stack on CUDA): the rules read their coefficients from
    one tensor on the device (`_DeviceCoefficients`) and take torch's fused classes too.

    A step is `begin_step` (host: the step count, and a capturable stepper's coefficients),
    `update_rules` (the rule slices: device work alone where capturable, what a CUDA graph of
    the step captures) and `step_others` (every optimizer that runs its own step()); `step`
    is the three."""

    def __init__(
        self,
        stack: StackedMLP | StackedModule,
        optimizers: Sequence[torch.optim.Optimizer],
        sharing: Sequence[Sharing | None] | None = None,
        capturable: bool = False,
    ) -> None:
        self.stack = stack
        self.optimizers = list(optimizers)
        self.step_count = 0
        self.capturable = capturable
        self.coefficients = _DeviceCoefficients()
        self.remade = False  # whether the last begin_step made the coefficients' rows again
        keys = [rule_key(o, capturable) for o in self.optimizers]
        sharing = list(sharing or [None] * len(self.optimizers))
        # before any is set to fused
        fused = [not capturable and use_fused(o) for o in self.optimizers]
        for optimizer, fuse in zip(self.optimizers, fused, strict=True):
            if fuse:
                optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
        # per slice: (start, stop, rule key); one state dict per stacked tensor and per model
        self.slices: list[tuple[int, int, tuple | None]] = []
        for k, (key, share) in enumerate(zip(keys, sharing, strict=True)):
            if key is None and share is not None:
                key = (SHARED_STEP, share.config_id)
            if key is not None and self.slices and self.slices[-1][2] == key:
                start, _, _ = self.slices[-1]
                self.slices[-1] = (start, k + 1, key)
            else:
                self.slices.append((k, k + 1, key))
        # a configuration with one seed here steps its own optimizer
        self.slices = [
            (start, stop, None if _shared(key) and stop - start == 1 else key)
            for start, stop, key in self.slices
        ]
        self.states: list[list[dict[str, torch.Tensor]]] = [
            [{} for _ in self._tensors()] for _ in self.slices
        ]
        self.extras: list[dict] = [{} for _ in self.optimizers]
        self.shared: dict[int, _SharedInstance] = {}  # slice start -> its instance
        tensors = self._tensors()
        for start, stop, key in self.slices:
            if _shared(key):
                share = sharing[start]
                params = [torch.nn.Parameter(p[start:stop]) for p, _ in tensors]
                optimizer, scheduler = share.build(params)
                if fused[start]:  # the seeds' own optimizers would step fused: so does theirs
                    optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
                in_train_mode(optimizer)
                self.shared[start] = _SharedInstance(share, params, optimizer, scheduler)
                self._bind_gradients(start, stop)

    def _tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return self.stack.tensors()

    def _bind_gradients(self, start: int, stop: int) -> None:
        instance = self.shared[start]
        for param, (_, grad) in zip(instance.params, self._tensors(), strict=True):
            param.grad = grad[start:stop]

    def paths(self) -> list[str]:
        """Each model's update path in the stack: SHARED_STEP, STACKED_RULE, or its own step()
        (TORCH_FUSED where torch's fused implementation runs, else OPTIMIZER_STEP)."""
        return [
            _path(key, self.optimizers[k])
            for start, stop, key in self.slices
            for k in range(start, stop)
        ]

    def stepping(self) -> list[torch.optim.Optimizer]:
        """The optimizers that step: each shared instance once, every other model's own (the
        ones whose modes a stack switches, whose state is the models')."""
        return [
            self.shared[start].optimizer if start in self.shared else self.optimizers[k]
            for start, stop, _ in self.slices
            for k in ([start] if start in self.shared else range(start, stop))
        ]

    def optimizer_of(self, k: int) -> torch.optim.Optimizer:
        """The optimizer that steps model k (its own, or its seeds' shared instance)."""
        for start, stop, _ in self.slices:
            if start <= k < stop:
                return self.shared[start].optimizer if start in self.shared else self.optimizers[k]
        raise IndexError(k)

    def keep(self, kept: Sequence[int]) -> None:
        """Keep only the models at positions `kept` (call after the stack was restacked)."""
        states, slices, position, shared = [], [], 0, {}
        tensors = self._tensors()
        for (start, stop, key), state in zip(self.slices, self.states, strict=True):
            rows = [k - start for k in kept if start <= k < stop]
            if rows:
                index = torch.tensor(rows, device=tensors[0][0].device)
                states.append([{n: t[index] for n, t in st.items()} for st in state])
                slices.append((position, position + len(rows), key))
                if start in self.shared:
                    old = self.shared[start]
                    span = slice(position, position + len(rows))
                    params, optimizer, scheduler = _resliced(
                        old.optimizer,
                        old.params,
                        [p[span] for p, _ in tensors],
                        rows,
                        old.sharing.build,
                    )
                    scheduler.load_state_dict(old.scheduler.state_dict())
                    in_train_mode(optimizer)  # as the probe does after its drop
                    if old.optimizer.defaults.get("fused"):
                        optimizer.param_groups[0]["fused"] = optimizer.defaults["fused"] = True
                    shared[position] = _SharedInstance(old.sharing, params, optimizer, scheduler)
                position += len(rows)
        self.slices, self.states, self.shared = slices, states, shared
        for start, stop, _ in self.slices:
            if start in self.shared:
                self._bind_gradients(start, stop)
        self.optimizers = [self.optimizers[k] for k in kept]
        self.extras = [self.extras[k] for k in kept]

    def state_dict(self) -> dict[str, Any]:
        """What the stepper itself carries: the stacked rules' states and per-model extras, its
        step count, and each shared instance's optimizer and schedule states (the models' own
        optimizers are the stack's to save)."""
        return {
            "step_count": self.step_count,
            "states": self.states,
            "extras": self.extras,
            "shared": {
                start: (instance.optimizer.state_dict(), instance.scheduler.state_dict())
                for start, instance in self.shared.items()
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from `state`, saved by a stepper of the same models (kept alike)."""
        self.step_count, self.extras = state["step_count"], state["extras"]
        device = self._tensors()[0][0].device
        self.states = [
            [{name: t.to(device) for name, t in st.items()} for st in slice_states]
            for slice_states in state["states"]
        ]
        if state["shared"].keys() != self.shared.keys():
            raise ValueError("the saved stepper shared other slices")
        for start, (optimizer, scheduler) in state["shared"].items():
            load_optimizer_state(self.shared[start].optimizer, optimizer)
            self.shared[start].scheduler.load_state_dict(scheduler)

    def _check_views(self, k: int) -> None:
        """After model k's own step(): its parameters must still be views of the stack, or its
        update went elsewhere and the stack would silently train something else."""
        if not all(_views(p, data, grad) for p, data, grad in self.stack.views(k)):
            raise HarnessError(
                f"{type(self.optimizers[k]).__name__}.step() replaced its parameters' "
                "tensors in a stack, so it cannot train stacked; use train.engine=single"
            )

    def _check_shared_views(self, start: int, stop: int) -> None:
        instance = self.shared[start]
        pairs = zip(instance.params, self._tensors(), strict=True)
        if not all(_views(p, data[start:stop], grad[start:stop]) for p, (data, grad) in pairs):
            raise HarnessError(
                f"{type(instance.optimizer).__name__}.step() replaced its parameters' tensors "
                "in a stack, so it cannot train stacked; use train.engine=single"
            )

    def restart(self) -> None:
        """Back to before the first step, for the rule slices (the only ones a CUDA graph probe
        steps): no step counted, no state, no per-model extras."""
        self.step_count = 0
        self.states = [[{} for _ in self._tensors()] for _ in self.slices]
        self.extras = [{} for _ in self.optimizers]

    def rule_states(self) -> list[torch.Tensor]:
        """The rule slices' state tensors, in a fixed order."""
        return [t for state in self.states for st in state for t in st.values()]

    def _scalars(self, start: int, stop: int) -> list[dict[str, float | None]]:
        """This step's scalars of each model of a rule slice (once per step: NAdam's extras
        keep a running product)."""
        _, scalars_of = RULES[type(self.optimizers[start])]
        return [
            scalars_of(o.param_groups[0], self.step_count, e)
            for o, e in zip(self.optimizers[start:stop], self.extras[start:stop], strict=True)
        ]

    def _ruled(self) -> list[tuple[int, int, int]]:
        """(slice index, start, stop) of the slices a stacked rule updates."""
        return [
            (i, start, stop)
            for i, (start, stop, key) in enumerate(self.slices)
            if key is not None and not _shared(key)
        ]

    def begin_step(self) -> None:
        """Count the step; a capturable stepper loads its coefficients (`remade` says whether
        their tensor was made again)."""
        self.step_count += 1
        if self.capturable:
            per_slice = {i: self._scalars(start, stop) for i, start, stop in self._ruled()}
            like = self._tensors()[0][0]
            self.remade = bool(per_slice) and self.coefficients.load(per_slice, like)

    @torch.no_grad()
    def update_rules(self) -> None:
        """Update the models of every rule slice (after `begin_step`)."""
        tensors = self._tensors()
        for i, start, stop in self._ruled():
            update, _ = RULES[type(self.optimizers[start])]
            if self.capturable:
                coefficient = self.coefficients.getter(i)
            else:
                coefficient = _Coefficients(self._scalars(start, stop)).get
            for (p, g), st in zip(tensors, self.states[i], strict=True):
                p, g = p[start:stop], g[start:stop]
                update(p, g, st, functools.partial(coefficient, like=p), self.step_count)

    @torch.no_grad()
    def step_others(self) -> dict[int, str]:
        """Step every optimizer that runs its own step() (and the shared instances'
        schedules); the models whose optimizer raised (position -> why, one line): their
        slices may be half-updated, the others' are not touched."""
        failed: dict[int, str] = {}
        for start, stop, key in self.slices:
            if start in self.shared:
                instance = self.shared[start]
                try:
                    instance.optimizer.step()
                except Exception as exc:  # noqa: BLE001 - the optimizer's result
                    failed |= dict.fromkeys(range(start, stop), failure_reason(exc))
                    continue
                self._check_shared_views(start, stop)
                instance.scheduler.step()
            elif key is None:
                for k in range(start, stop):
                    try:
                        self.optimizers[k].step()
                    except Exception as exc:  # noqa: BLE001 - the optimizer's result
                        failed[k] = failure_reason(exc)
                        continue
                    self._check_views(k)
        return failed

    def step(self) -> dict[int, str]:
        """Update every model (and step the shared instances' schedules): `begin_step`,
        `update_rules`, `step_others`; the models whose optimizer raised, as `step_others`."""
        self.begin_step()
        self.update_rules()
        return self.step_others()


def _path(key: tuple | None, optimizer: torch.optim.Optimizer) -> str:
    """The update path of a model in a slice of rule key `key` (see `StackedOptimizers`)."""
    if _shared(key):
        return SHARED_STEP
    if key is not None:
        return STACKED_RULE
    return TORCH_FUSED if optimizer.param_groups[0].get("fused") else OPTIMIZER_STEP


def _shared(key: tuple | None) -> bool:
    return key is not None and key[0] == SHARED_STEP
