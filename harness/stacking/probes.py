"""The probes that decide, before a run joins a stack, whether its optimizer can: run its own
step() on views of the stacked tensors (`stacking_refusal`), and share one instance among the
seeds of one configuration (`sharing_refusal`). Each is a few float64 steps on tiny tensors,
against the optimizer alone."""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness.stacking.member_optimizers import OptimizerFactory, resliced, still_views
from harness.training.stepping import PROBE_SHAPES, in_train_mode


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
        views = zip(params, stacked, grads, strict=True)
        if not all(still_views(p, t[0], g[0]) for p, t, g in views):
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
            params, optimizer, _ = resliced(
                optimizer, params, stacked, kept, lambda ps: (make_optimizer(ps), None)
            )
            in_train_mode(optimizer)
        per_model = [gradient_of([p[j] for p in params], m, step) for j, m in enumerate(rows)]
        for i, param in enumerate(params):
            param.grad = torch.stack([grads[i] for grads in per_model])
        optimizer.step()
    shared = [torch.cat([t[j].flatten() for t in stacked]) for j in range(len(kept))]
    return own, shared
