"""YellowFin (harness.optimizers.yellowfin): the SingleStep solution against the roots of its
cubic, both variants against the authors' update equations on a fixed gradient sequence, the
estimators against a hand computation, clipping, determinism, convergence on an
ill-conditioned quadratic, and a real harness run that records the tuned lr and momentum."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hydra.utils import instantiate

from conftest import SMALL_RUN, compose_config, run_cli
from harness.config.validate import validate_optimizer
from harness.optimizers.yellowfin import YellowFin, cubic_root, single_step
from harness.training.engine import logged_hyperparameters
from harness.training.run import execute


def robust_bound(h_min: float, h_max: float) -> float:
    """The smallest momentum whose robust region holds every curvature in [h_min, h_max]."""
    sqrt_kappa = math.sqrt(h_max / h_min)
    return ((sqrt_kappa - 1) / (sqrt_kappa + 1)) ** 2


@pytest.mark.parametrize(
    ("h_min", "h_max", "variance", "distance", "binding"),
    [
        (1.0, 1.5, 0.5, 0.8, "cubic"),  # narrow curvature range: the noise sets μ
        (0.2, 0.25, 2.0, 3.0, "cubic"),
        (0.5, 400.0, 0.1, 2.0, "bound"),  # wide range: the robust region's bound sets μ
    ],
)
def test_single_step_solves_the_cubic(h_min, h_max, variance, distance, binding):
    # The SingleStep objective in x = √μ once α = (1 - √μ)²/h_min is substituted, as a polynomial;
    # numpy finds its stationary points, independently of the closed form.
    objective = np.poly1d([distance**2, 0, 0]) + variance / h_min**2 * np.poly1d([-1, 1]) ** 4
    roots = [r.real for r in objective.deriv().roots if abs(r.imag) < 1e-9 and 0 <= r.real <= 1]
    assert len(roots) == 1
    bound = robust_bound(h_min, h_max)
    assert (roots[0] ** 2 > bound) == (binding == "cubic")  # the case covers the branch it names

    mu, lr = single_step(h_min, h_max, variance, distance)
    assert mu == pytest.approx(max(roots[0] ** 2, bound), rel=1e-9)
    assert lr == pytest.approx((1 - math.sqrt(mu)) ** 2 / h_min, rel=1e-12)
    # It is the minimum of μ·D² + α²·C over the robust region.
    grid = np.linspace(bound, 1, 100_001)
    values = grid * distance**2 + ((1 - np.sqrt(grid)) ** 2 / h_min) ** 2 * variance
    assert mu * distance**2 + lr**2 * variance <= values.min() + 1e-12
    assert mu == pytest.approx(grid[values.argmin()], abs=1e-4)


@pytest.mark.parametrize("p", np.logspace(-6, 6, 25))
def test_cubic_root_over_a_wide_range(p):
    # (1 - x)³ = p·x, i.e. x³ - 3x² + (3 + p)x - 1 = 0: one real root, in [0, 1].
    roots = [r.real for r in np.roots([1, -3, 3 + p, -1]) if abs(r.imag) < 1e-7]
    assert len(roots) == 1
    assert cubic_root(p) == pytest.approx(roots[0], rel=1e-6, abs=1e-12)


# A short gradient sequence for two parameters (a 2-vector and a 3-vector), flattened.
GRADIENTS = [
    [0.5, -1.0, 2.0, 0.3, -0.2],
    [0.4, -0.8, 1.5, 0.1, 0.0],
    [1.2, 0.3, -0.5, 0.2, 0.4],
    [0.1, -0.1, 0.2, -0.3, 0.05],
    [0.6, -0.9, 1.1, 0.0, -0.4],
    [0.2, 0.1, 0.3, 0.2, -0.1],
]


def by_hand(grads, beta, width, zero_debias, lr, mu):
    """Algorithms 1-4 of the paper in plain Python: the estimates, the tuned (smoothed) lr and
    momentum, and the heavy-ball iterate (from zero) after every step."""
    history, x, v = [], [0.0] * len(grads[0]), [0.0] * len(grads[0])
    h_min_avg = h_max_avg = sq_avg = norm_avg = dist_avg = 0.0
    g_avg = [0.0] * len(grads[0])
    for t, g in enumerate(grads, start=1):
        debias = 1 - beta**t if zero_debias else 1.0
        h = sum(gi * gi for gi in g)
        window = [sum(gi * gi for gi in grads[s]) for s in range(max(0, t - width), t)]
        h_min_avg = beta * h_min_avg + (1 - beta) * min(window)
        h_max_avg = beta * h_max_avg + (1 - beta) * max(window)
        sq_avg = beta * sq_avg + (1 - beta) * h
        g_avg = [beta * a + (1 - beta) * gi for a, gi in zip(g_avg, g, strict=True)]
        norm_avg = beta * norm_avg + (1 - beta) * math.sqrt(h)
        dist_avg = beta * dist_avg + (1 - beta) * norm_avg / sq_avg
        est = {
            "h_min": h_min_avg / debias,
            "h_max": h_max_avg / debias,
            "variance": sq_avg / debias - sum((a / debias) ** 2 for a in g_avg),
            "distance": dist_avg / debias,
        }
        if t > 1:
            mu_t, lr_t = single_step(est["h_min"], est["h_max"], est["variance"], est["distance"])
            mu, lr = beta * mu + (1 - beta) * mu_t, beta * lr + (1 - beta) * lr_t
        v = [mu * vi - lr * gi for vi, gi in zip(v, g, strict=True)]
        x = [xi + vi for xi, vi in zip(x, v, strict=True)]
        history.append({**est, "lr": lr, "momentum": mu, "x": x})
    return history


def feed(optimizer, params, flat_grad):
    """Set the parameters' gradients to `flat_grad` and take one step."""
    grad = torch.tensor(flat_grad, dtype=torch.float64)
    for p, g in zip(params, grad.split([p.numel() for p in params]), strict=True):
        p.grad = g.clone()
    optimizer.step()


@pytest.mark.parametrize("zero_debias", [True, False])
def test_estimators_match_a_hand_computation(zero_debias):
    params = [torch.zeros(2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)]
    optimizer = YellowFin(
        params,
        lr=0.5,
        momentum=0.2,
        beta=0.9,
        curv_win_width=3,
        zero_debias=zero_debias,
        adaptive_clip=False,
        variant="2017",  # the paper's Algorithm 1, which by_hand follows
    )
    expected = by_hand(GRADIENTS, beta=0.9, width=3, zero_debias=zero_debias, lr=0.5, mu=0.2)
    for g, want in zip(GRADIENTS, expected, strict=True):
        feed(optimizer, params, g)
        tuner = optimizer.state["yellowfin"]
        for key in ("h_min", "h_max", "variance", "distance"):
            assert tuner[key] == pytest.approx(want[key], rel=1e-12, abs=1e-12), key
        group = optimizer.param_groups[0]
        assert group["lr"] == pytest.approx(want["lr"], rel=1e-12)
        assert group["momentum"] == pytest.approx(want["momentum"], rel=1e-12, abs=1e-15)
        assert torch.cat(params).tolist() == pytest.approx(want["x"], rel=1e-12, abs=1e-15)
    # The window slid: it dropped the largest ||g||² of the sequence, which h_max saw at first.
    curvatures = [sum(gi * gi for gi in g) for g in GRADIENTS]
    assert tuner["window"] == pytest.approx(curvatures[-3:], rel=1e-12)
    assert max(tuner["window"]) < max(curvatures)
    # And μ and α were tuned, away from their initial values.
    assert group["lr"] != 0.5 and group["momentum"] != 0.2


def authors_equations(grads, *, beta, width, lr, mu, variant, stat_protect_fac=100.0):
    """The authors' update equations, step by step in float64 plain Python (no harness code):
    their TensorFlow code since October 2017 and its PyTorch port (variant "current"), or the
    paper's Algorithm 1 as their first code has it (variant "2017").

    Per step t = 1, 2, ...: adaptive clipping of the gradient for the estimates (norm at most
    √(stat_protect_fac·h_max) of the previous step, from t = 2 as in their TensorFlow code);
    h = ||g||²; a sliding window of h; h_min, h_max the zero-debiased moving averages of the
    window's extremes (of their logs, then exp, for "current"); C = avg(||g||²) - ||avg(g)||²;
    D = avg(avg(||g||) / avg(||g||²)); from t = 2, SingleStep by Vieta's substitution,
    μ_t = max(x², ((√κ - 1)/(√κ + 1))²), α_t = (1 - √μ_t)²/h_min, times min(1, t/(10·w))
    ("current"); the applied μ, α: μ_t, α_t ("current") or their moving averages ("2017");
    α cut to 100/||g|| when α·||g|| ≥ 100 ("current"); the update gradient scaled to √h_max
    (previous step) when larger; the step x ← x - α·b with b ← μ·b + g ("current", SGD's
    velocity) or x ← x + v with v ← μ·v - α·g ("2017", the paper's heavy ball).
    Returns per step the estimates, the applied lr and momentum, x, and which clips fired."""
    current = variant == "current"
    n = len(grads[0])
    log, unlog = (math.log, math.exp) if current else ((lambda v: v), (lambda v: v))
    window, x, velocity, g_avg = [], [0.0] * n, [0.0] * n, [0.0] * n
    h_min_avg = h_max_avg = sq_avg = norm_avg = dist_avg = 0.0
    lr_avg, mu_avg, lr_t, mu_t, h_max_prev = lr, mu, lr, mu, None
    history = []
    for t, g in enumerate(grads, start=1):
        g = list(g)
        debias = 1 - beta**t
        h = sum(gi * gi for gi in g)
        protected = h_max_prev is not None and h > stat_protect_fac * h_max_prev
        if protected:
            g = [gi * math.sqrt(stat_protect_fac * h_max_prev / h) for gi in g]
            h = sum(gi * gi for gi in g)
        window = (window + [h])[-width:]
        h_min_avg = beta * h_min_avg + (1 - beta) * log(min(window))
        h_max_avg = beta * h_max_avg + (1 - beta) * log(max(window))
        h_min, h_max = unlog(h_min_avg / debias), unlog(h_max_avg / debias)
        sq_avg = beta * sq_avg + (1 - beta) * h
        g_avg = [beta * a + (1 - beta) * gi for a, gi in zip(g_avg, g, strict=True)]
        variance = sq_avg / debias - sum(a * a for a in g_avg) / debias**2
        norm_avg = beta * norm_avg + (1 - beta) * math.sqrt(h)
        dist_avg = beta * dist_avg + (1 - beta) * norm_avg / sq_avg
        distance = dist_avg / debias
        if t > 1:
            p = distance**2 * h_min**2 / (2 * variance)
            w3 = (-math.sqrt(p**2 + 4 / 27 * p**3) - p) / 2
            w = math.copysign(abs(w3) ** (1 / 3), w3)
            root = w - p / (3 * w) + 1
            sqrt_kappa = math.sqrt(h_max / h_min)
            mu_t = max(root**2, ((sqrt_kappa - 1) / (sqrt_kappa + 1)) ** 2)
            lr_t = (1 - math.sqrt(mu_t)) ** 2 / h_min
            if current:
                lr_t = min(lr_t, lr_t * t / (10 * width))
            lr_avg = beta * lr_avg + (1 - beta) * lr_t
            mu_avg = beta * mu_avg + (1 - beta) * mu_t
        step_lr, step_mu = (lr_t, mu_t) if current else (lr_avg, mu_avg)
        clamped = current and step_lr * math.sqrt(h) >= 100
        if clamped:
            step_lr = 100 / math.sqrt(h)
        spike = h_max_prev is not None and h > h_max_prev
        if spike:
            g = [gi * math.sqrt(h_max_prev / h) for gi in g]
        if current:
            velocity = [step_mu * b + gi for b, gi in zip(velocity, g, strict=True)]
            x = [xi - step_lr * b for xi, b in zip(x, velocity, strict=True)]
        else:
            velocity = [step_mu * v - step_lr * gi for v, gi in zip(velocity, g, strict=True)]
            x = [xi + v for xi, v in zip(x, velocity, strict=True)]
        h_max_prev = h_max
        history.append(
            dict(
                h_min=h_min,
                h_max=h_max,
                variance=variance,
                distance=distance,
                lr=step_lr,
                momentum=step_mu,
                x=x,
                fired={
                    k
                    for k, on in [("protect", protected), ("clamp", clamped), ("spike", spike)]
                    if on
                },
            )
        )
    return history


def fixed_sequence() -> list[list[float]]:
    """40 gradients of 5 coordinates: ordinary ones, a quiet stretch (the curvature estimate
    falls) and spikes, so that both adaptive clips fire."""
    rng = np.random.default_rng(21)
    scales = [1.0] * 12 + [0.01] * 10 + [3.0, 1.0, 2e3, 1.0] + [1.0] * 14
    return [(s * rng.standard_normal(5)).tolist() for s in scales]


@pytest.mark.parametrize("variant", ["current", "2017"])
def test_both_variants_match_the_authors_equations(variant):
    grads = fixed_sequence()
    # An initial α of 50 makes the first step (α·||g|| ≈ 110) a catastrophic move.
    expected = authors_equations(grads, beta=0.9, width=3, lr=50.0, mu=0.2, variant=variant)
    # The sequence exercises what differs: the slow start (10·w = 30 steps), the clips, and for
    # "current" the cut of a catastrophic move.
    fired = set().union(*(step["fired"] for step in expected))
    assert fired == (
        {"protect", "spike", "clamp"} if variant == "current" else {"protect", "spike"}
    )

    params = [torch.zeros(2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)]
    settings = {} if variant == "current" else {"variant": "2017"}  # "current" is the default
    optimizer = YellowFin(params, lr=50.0, momentum=0.2, beta=0.9, curv_win_width=3, **settings)
    for t, (g, want) in enumerate(zip(grads, expected, strict=True), start=1):
        feed(optimizer, params, g)
        tuner, group = optimizer.state["yellowfin"], optimizer.param_groups[0]
        for key in ("h_min", "h_max", "variance", "distance"):
            assert tuner[key] == pytest.approx(want[key], rel=1e-10), (t, key)
        assert group["lr"] == pytest.approx(want["lr"], rel=1e-10), t
        assert group["momentum"] == pytest.approx(want["momentum"], rel=1e-10, abs=1e-15), t
        assert torch.cat(params).tolist() == pytest.approx(want["x"], rel=1e-9, abs=1e-12), t


def test_the_variants_differ_and_each_setting_overrides_its_variant():
    grads = fixed_sequence()[:8]
    runs = {}
    for name, settings in {
        "current": {},
        "2017": {"variant": 2017},  # as YAML and Hydra's command line read it
        "2017 by its five settings": dict(
            log_smooth_curvature=False,
            apply_unsmoothed=False,
            slow_start=False,
            catastrophic_move_thresh=math.inf,
            velocity="heavy_ball",
        ),
    }.items():
        params = [torch.zeros(5, dtype=torch.float64)]
        optimizer = YellowFin(params, beta=0.9, curv_win_width=3, **settings)
        for g in grads:
            feed(optimizer, params, g)
        runs[name] = params[0].tolist()
    assert runs["2017"] == runs["2017 by its five settings"]
    assert runs["current"] != runs["2017"]
    with pytest.raises(ValueError, match="variant must be one of"):
        YellowFin([torch.zeros(1)], variant="2018")
    with pytest.raises(ValueError, match="velocity"):
        YellowFin([torch.zeros(1)], velocity="nesterov")


def test_clipping_by_threshold_and_by_the_curvature_range():
    # A fixed threshold on the gradient norm: the estimates and the step see the clipped gradient.
    x = torch.zeros(2, dtype=torch.float64)
    optimizer = YellowFin([x], lr=0.5, clip_thresh=0.5, adaptive_clip=False)
    x.grad = torch.tensor([3.0, 4.0], dtype=torch.float64)  # norm 5
    optimizer.step()
    assert optimizer.state["yellowfin"]["window"] == [pytest.approx(0.25)]
    assert x.tolist() == pytest.approx([-0.5 * 0.3, -0.5 * 0.4])

    # Adaptive clipping: a spike is capped at √(100·h_max) for the estimates and at √h_max (the
    # envelope before it) for the step.
    x = torch.zeros(2, dtype=torch.float64)
    optimizer = YellowFin([x], beta=0.9)
    for g in ([1.0, 0.0], [0.0, 1.2], [0.8, 0.6]):
        x.grad = torch.tensor(g, dtype=torch.float64)
        optimizer.step()
    h_max = optimizer.state["yellowfin"]["h_max"]
    velocity = optimizer.state[x]["velocity"].clone()
    x.grad = torch.tensor([3e3, 4e3], dtype=torch.float64)
    optimizer.step()
    assert optimizer.state["yellowfin"]["window"][-1] == pytest.approx(100 * h_max)
    # The default step keeps SGD's buffer b ← μ·b + g: the gradient it took is b_new - μ·b_old.
    applied = optimizer.state[x]["velocity"] - optimizer.param_groups[0]["momentum"] * velocity
    assert applied.norm().item() == pytest.approx(math.sqrt(h_max))
    assert applied.tolist() == pytest.approx([0.6 * math.sqrt(h_max), 0.8 * math.sqrt(h_max)])


def noisy_quadratic(
    seed: int, steps: int, dtype: torch.dtype = torch.float64, variant: str = "current"
):
    """YellowFin (defaults, or the 2017 variant) on f(x) = ½·Σ λ_i·x_i², λ from 1e-3 to 1
    (condition number 1000), with Gaussian gradient noise (σ = 0.3) as from mini-batches, from
    x ~ N(0, 100²).

    The noise matters: YellowFin's curvature estimate is ||g||² (the eigenvalue of g·gᵀ), which
    tracks curvature for stochastic gradients; on a noiseless quadratic ||g||² → 0 near the
    optimum, α = (1 - √μ)²/h_min grows until the iteration is unstable, and it recovers only
    after the loss has grown again. Returns the relative losses f/f0, tuned lr and momentum,
    and iterates of every step."""
    gen = torch.Generator().manual_seed(seed)
    lam = torch.logspace(-3, 0, 10, dtype=dtype)
    x = (100 * torch.randn(10, generator=gen, dtype=dtype)).requires_grad_()
    optimizer = YellowFin([x], variant=variant)
    f0 = 0.5 * (lam * x.detach() ** 2).sum().item()
    trajectory = []
    for _ in range(steps):
        x.grad = lam * x.detach() + 0.3 * torch.randn(10, generator=gen, dtype=dtype)
        optimizer.step()
        group = optimizer.param_groups[0]
        loss = 0.5 * (lam * x.detach() ** 2).sum().item() / f0
        trajectory.append((loss, group["lr"], group["momentum"], x.detach().clone()))
    return trajectory


def test_same_seed_same_trajectory_bit_for_bit():
    a, b, c = (noisy_quadratic(seed, 300, torch.float32) for seed in (1, 1, 2))
    for (*scalars_a, x_a), (*scalars_b, x_b) in zip(a, b, strict=True):
        assert scalars_a == scalars_b and torch.equal(x_a, x_b)
    assert not torch.equal(a[-1][-1], c[-1][-1])


# From x ~ N(0, 100²) the gradients' norm is ~100 and the curvature estimate ||g||² ~1e4, so the
# current variant's α_t = (1 - √μ)²/h_min starts near 1e-4 and grows as ||g|| shrinks: it needs
# ~10,000 steps. The 2017 variant applies a moving average of α_t started at 1 (β = 0.999), whose
# large early values do most of its first 3,000 steps' work.
@pytest.mark.slow
@pytest.mark.parametrize(("variant", "steps"), [("current", 10_000), ("2017", 3000)])
def test_optimises_an_ill_conditioned_quadratic(variant, steps):
    trajectory = noisy_quadratic(seed=0, steps=steps, variant=variant)
    losses, lrs, momenta = (np.array([step[k] for step in trajectory]) for k in range(3))
    assert losses[-1] < 1e-3  # three orders of magnitude below the initial loss
    assert losses[-500:].max() < 1e-2  # and it stays down
    # It tuned: momentum rose from 0 towards the ill-conditioned range's, lr fell from 1.
    assert momenta[-1] > 0.3 and lrs[-1] < 0.5
    assert np.all((momenta >= 0) & (momenta < 1)) and np.all(lrs > 0)


def test_logged_hyperparameters_are_lr_plus_what_an_optimizer_tunes():
    x = torch.zeros(2, requires_grad=True)
    assert logged_hyperparameters(torch.optim.SGD([x], lr=0.1, momentum=0.9)) == {"lr": 0.1}
    assert logged_hyperparameters(YellowFin([x])) == {"lr": 1.0, "momentum": 0.0}


def test_real_run_records_the_tuned_lr_and_momentum(tmp_path, mnist_dir):
    cfg = compose_config(
        [f"data.root={mnist_dir}", *SMALL_RUN, "model=net1", "optimizer=yellowfin"]
    )
    choices = {"model": "net1", "optimizer": "yellowfin", "schedule": "constant", "data": "mnist"}
    record = execute(cfg, tmp_path / "run", choices)
    assert record["status"] == "completed"
    assert record["config"]["optimizer"]["beta"] == 0.999

    curves = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    tuned = curves[curves.metric.isin(["lr", "momentum"])].pivot(
        index="iteration", columns="metric", values="value"
    )
    assert tuned.index.tolist() == list(range(5, 61, 5))  # every log step
    assert tuned.lr.iloc[0] < 1.0 and tuned.lr.nunique() == len(tuned)  # tuned at every step
    assert tuned.momentum.nunique() == len(tuned) and tuned.momentum.between(0, 1).all()
    assert tuned.lr.is_monotonic_increasing  # the slow start: α_t·t/(10·w) over these 60 steps
    train_loss = curves[curves.metric == "train_loss"].value
    assert train_loss.iloc[-1] < 0.7 * train_loss.iloc[0]


def test_config_selects_it_with_every_hyperparameter_overridable():
    cfg = compose_config(["optimizer=yellowfin", "optimizer.beta=0.99", "optimizer.lr=0.5"])
    validate_optimizer(cfg.optimizer)
    optimizer = instantiate(cfg.optimizer, _convert_="all")([torch.zeros(1, requires_grad=True)])
    assert isinstance(optimizer, YellowFin) and optimizer.beta == 0.99
    assert optimizer.param_groups[0]["lr"] == 0.5
    assert set(cfg.optimizer) - {"_target_", "_partial_"} == {
        "lr",
        "momentum",
        "beta",
        "curv_win_width",
        "zero_debias",
        "clip_thresh",
        "adaptive_clip",
        "stat_protect_fac",
        "weight_decay",
        "variant",
        "log_smooth_curvature",
        "apply_unsmoothed",
        "slow_start",
        "catastrophic_move_thresh",
        "velocity",
    }


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["step", "cosine", "exponential"])
def test_a_learning_rate_schedule_is_refused_with_one_line(tmp_path, schedule):
    result = run_cli(
        "optimizer=yellowfin", f"schedule={schedule}", *SMALL_RUN, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "harness-train: error: harness.optimizers.yellowfin.YellowFin sets its own learning "
        "rate at every step; use schedule=constant"
    )
    assert not list(tmp_path.rglob("run.json"))
