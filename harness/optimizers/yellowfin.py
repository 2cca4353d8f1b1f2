"""YellowFin: momentum SGD that tunes its own learning rate and momentum at every step.

Zhang & Mitliagkas, "YellowFin and the Art of Momentum Tuning" (arXiv:1706.03471, MLSys 2019).
Each step measures the gradient and updates three running estimates (paper §3):

* the curvature range [h_min, h_max] (Algorithm 2): the extremes of h_t = ||g_t||² (the
  eigenvalue of g_t·g_tᵀ, the paper's curvature proxy) over a sliding window of the last
  `curv_win_width` steps, each smoothed by a moving average (of the values, or of their logs);
* the gradient variance C (Algorithm 3): sum(avg(g ⊙ g) - avg(g) ⊙ avg(g));
* the distance to the optimum D (Algorithm 4): the moving average of avg(||g||) / avg(||g||²).

SingleStep turns them into the momentum μ_t and learning rate α_t that minimise the
expected squared distance to the optimum after one step on a noisy quadratic, μ·D² + α²·C,
while keeping every curvature in [h_min, h_max] inside momentum's robust region (where the
spectral radius of the momentum operator is √μ, whatever the curvature). The learning rate and
momentum applied are written into every parameter group (`group["lr"]`, `group["momentum"]`),
where the harness records them.

Two versions of the authors' code differ in how μ_t and α_t become a step; `variant` picks one:

* "current" (the default): the authors' code since October 2017, TensorFlow
  (JianGoForIt/YellowFin, tuner_utils/yellowfin.py) and their PyTorch port
  (JianGoForIt/YellowFin_Pytorch). h_min and h_max are moving averages of log ||g||² (so one
  large gradient moves them by a factor, not by its size); the step applies the unsmoothed μ_t
  and α_t of this step; α_t starts slowly, α_t·min(1, t/(10·w)) at step t = 1, 2, ...; a step
  with α·||g|| ≥ 100 has its α cut to 100/||g|| (the PyTorch port's clamp of catastrophic
  moves); the velocity is torch.optim.SGD's (b ← μ·b + g, x ← x - α·b), as in both codes.
* "2017": the paper's Algorithm 1 as the authors' first TensorFlow code (May 2017) has it, and
  as this module ran before: linear smoothing of h_min and h_max, μ and α moved towards μ_t and
  α_t by a moving average and those applied, no slow start, no clamp, and the heavy-ball step
  of the paper, x ← x + v with v = μ·v - α·g. Unlike that code it applies the tuned values at
  the step that measured them (the May 2017 code stepped first, with the previous values),
  steps as the paper writes it (the code used TensorFlow's MomentumOptimizer, SGD's velocity)
  and keeps the adaptive clipping, which the authors added in October 2017.

Each of the five differences is also a setting of its own (None: as the variant says), so one
can be changed alone. Fed the same gradients, the two variants give different trajectories
from the second step on; tests/test_yellowfin.py checks both against the authors' equations.

Where "current" still differs from the authors' code: the starting lr is the paper's 1.0 (their
code's default is 1e-4; it only sets the first step); the cap that protects the estimates
applies from the second step (their TensorFlow code; the PyTorch port waits a step more);
their ε additions (1e-6) are floors here; their options for sparse gradients, an external lr
factor, a non-increasing step and checkpoint recovery are left out.

All moving averages use `beta` and, with `zero_debias`, are divided by 1 - beta^t (as Adam's
moments), so early estimates are not pulled towards their zero initial value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

EPS = 1e-12  # floor of the variance, curvature and SNR estimates: guards divisions by zero


def cubic_root(p: float) -> float:
    """The root x in [0, 1] of (1 - x)³ = p·x, for p > 0.

    With y = x - 1 this is the depressed cubic y³ + p·y + p = 0, whose single real root Vieta's
    substitution y = w - p/(3w) gives in closed form: w³ = -(p + √(p² + 4p³/27))/2 (the branch
    whose two terms share a sign, so nothing cancels), and w its real cube root.
    """
    # Beyond [EPS, 1/EPS] the root is within ~1e-4 of 1 or ~1e-12 of 0; the clamp also keeps
    # inf (a vanishing variance) finite.
    p = min(max(p, EPS), 1.0 / EPS)
    w = -((p * (1.0 + math.sqrt(1.0 + 4.0 * p / 27.0)) / 2.0) ** (1.0 / 3.0))
    return min(max(1.0 + w - p / (3.0 * w), 0.0), 1.0)


def single_step(
    h_min: float, h_max: float, variance: float, distance: float
) -> tuple[float, float]:
    """SingleStep: the momentum μ and learning rate α that minimise μ·D² + α²·C subject
    to μ ≥ ((√κ - 1)/(√κ + 1))², κ = h_max/h_min, and α = (1 - √μ)²/h_min.

    The constraints keep all curvatures of [h_min, h_max] in the robust region, (1 - √μ)² ≤ α·h
    ≤ (1 + √μ)², where momentum converges at the rate √μ. Substituting α, the objective in
    x = √μ is x²·D² + (1 - x)⁴·C/h_min²; its stationary point solves (1 - x)³ = p·x with
    p = D²·h_min²/(2C), and the convex objective's constrained minimum is the larger of x² and
    the robust region's bound.
    """
    h_min = max(h_min, EPS)
    signal = distance * h_min  # products, not powers: overflow gives inf, not an error
    x = cubic_root(signal * signal / (2.0 * max(variance, EPS)))
    sqrt_kappa = math.sqrt(max(h_max / h_min, 1.0))
    mu = max(x**2, ((sqrt_kappa - 1.0) / (sqrt_kappa + 1.0)) ** 2)
    return mu, (1.0 - math.sqrt(mu)) ** 2 / h_min


# What each variant sets (see the module docstring); a setting given explicitly overrides it.
VARIANTS = {
    "current": dict(
        log_smooth_curvature=True,
        apply_unsmoothed=True,
        slow_start=True,
        catastrophic_move_thresh=100.0,
        velocity="sgd",
    ),
    "2017": dict(
        log_smooth_curvature=False,
        apply_unsmoothed=False,
        slow_start=False,
        catastrophic_move_thresh=math.inf,
        velocity="heavy_ball",
    ),
}
VELOCITIES = ("sgd", "heavy_ball")


class YellowFin(torch.optim.Optimizer):
    """YellowFin (Zhang & Mitliagkas, arXiv:1706.03471): momentum SGD with automatically tuned
    learning rate and momentum; one tuner for all parameters (all groups share α and μ).

    Defaults are the authors' current code (variant "current") with the paper's starting values
    (lr=1.0, momentum=0.0), beta=0.999, window 20, zero-debiased averages and the adaptive
    gradient clipping of the authors' code on.

    Args:
        params: parameters or parameter groups (groups may differ only in `weight_decay`).
        lr: initial learning rate α: the first step's (paper: 1.0); with variant "2017" the
            start of its moving average.
        momentum: initial momentum μ, likewise (paper: 0.0).
        beta: smoothing of every moving average (0.999).
        curv_win_width: width w of the sliding window of ||g||² giving h_min, h_max (20).
        zero_debias: divide the moving averages by 1 - beta^t (True).
        clip_thresh: optional fixed threshold on the global gradient norm; None: no fixed clip.
        adaptive_clip: clip gradients by the curvature range (the paper's adaptive gradient
            clipping, on by default in the authors' code): before the estimates see a gradient,
            its norm is capped at √(stat_protect_fac·h_max), so one exploding gradient cannot
            wreck them; before the update, a gradient with ||g||² > h_max is scaled to norm
            √h_max (h_max of the previous step: the envelope the new gradient is judged
            against) (True).
        stat_protect_fac: the loose cap on ||g||² for the estimates, in units of h_max (100).
        weight_decay: L2 penalty added to the gradient before everything else (0.0).
        variant: "current" (the authors' code since October 2017) or "2017" (the paper's
            Algorithm 1, as the first code and this module before); it sets the five below.
        log_smooth_curvature: smooth log h_min and log h_max instead of h_min and h_max.
        apply_unsmoothed: step with this step's μ_t and α_t instead of their moving averages.
        slow_start: scale α_t by min(1, t/(10·w)) at step t.
        catastrophic_move_thresh: cut α to this / ||g|| when α·||g|| reaches it (inf: never).
        velocity: "sgd" (b ← μ·b + g, x ← x - α·b: the authors' codes) or "heavy_ball"
            (v ← μ·v - α·g, x ← x + v: the paper's equation); the two differ when α changes.

    The tuned values are `param_groups[i]["lr"]` and `["momentum"]` after each step (the ones
    that step applied); the estimates are in `state["yellowfin"]`. YellowFin sets the learning
    rate itself: an LR scheduler's changes to `group["lr"]` are overwritten at the next step.
    """

    # The hyper-parameters this optimizer sets itself, recorded at each log step
    # (harness.training.engine.logged_hyperparameters).
    tuned_hyperparameters = ("lr", "momentum")

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1.0,
        momentum: float = 0.0,
        beta: float = 0.999,
        curv_win_width: int = 20,
        zero_debias: bool = True,
        clip_thresh: float | None = None,
        adaptive_clip: bool = True,
        stat_protect_fac: float = 100.0,
        weight_decay: float = 0.0,
        variant: str = "current",
        log_smooth_curvature: bool | None = None,
        apply_unsmoothed: bool | None = None,
        slow_start: bool | None = None,
        catastrophic_move_thresh: float | None = None,
        velocity: str | None = None,
    ) -> None:
        variant = str(variant)  # YAML and Hydra's command line read 2017 as an int
        if variant not in VARIANTS:
            raise ValueError(f"YellowFin's variant must be one of {list(VARIANTS)}, got {variant}")
        given = dict(
            log_smooth_curvature=log_smooth_curvature,
            apply_unsmoothed=apply_unsmoothed,
            slow_start=slow_start,
            catastrophic_move_thresh=catastrophic_move_thresh,
            velocity=velocity,
        )
        settings = {k: VARIANTS[variant][k] if v is None else v for k, v in given.items()}
        checks = {
            "lr > 0": lr > 0,
            "0 <= momentum < 1": 0 <= momentum < 1,
            "0 < beta < 1": 0 < beta < 1,
            "curv_win_width >= 1": curv_win_width >= 1,
            "clip_thresh > 0 or None": clip_thresh is None or clip_thresh > 0,
            "stat_protect_fac > 0": stat_protect_fac > 0,
            "weight_decay >= 0": weight_decay >= 0,
            "catastrophic_move_thresh > 0": settings["catastrophic_move_thresh"] > 0,
            f"velocity in {VELOCITIES}": settings["velocity"] in VELOCITIES,
        }
        for rule, ok in checks.items():
            if not ok:
                raise ValueError(f"YellowFin needs {rule}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.beta, self.curv_win_width, self.zero_debias = beta, int(curv_win_width), zero_debias
        self.clip_thresh, self.adaptive_clip = clip_thresh, adaptive_clip
        self.stat_protect_fac = stat_protect_fac
        self.variant = variant
        self.log_smooth_curvature = bool(settings["log_smooth_curvature"])
        self.apply_unsmoothed = bool(settings["apply_unsmoothed"])
        self.slow_start = bool(settings["slow_start"])
        self.catastrophic_move_thresh = float(settings["catastrophic_move_thresh"])
        self.velocity = settings["velocity"]
        # Global (not per-parameter) state under a string key: state_dict() keeps it as is.
        self.state["yellowfin"] = dict(
            step=0,
            lr=float(lr),  # the smoothed α and μ of Algorithm 1
            momentum=float(momentum),
            window=[],  # the last curv_win_width values of ||g||²
            h_min_avg=0.0,  # of h_min or of log h_min (log_smooth_curvature)
            h_max_avg=0.0,
            norm_avg=0.0,  # of ||g||
            norm_sq_avg=0.0,  # of ||g||²
            distance_avg=0.0,
        )

    def _debias(self) -> float:
        """What a moving average started at zero holds of its inputs' weight at step t = 1, 2,
        ...: 1 - beta^t (1 without zero-debiasing)."""
        return 1 - self.beta ** self.state["yellowfin"]["step"] if self.zero_debias else 1.0

    def _average(self, key: str, value: float) -> float:
        """Update the moving average `key` of the tuner's state with `value`; return it
        zero-debiased."""
        tuner = self.state["yellowfin"]
        tuner[key] = self.beta * tuner[key] + (1 - self.beta) * value
        return tuner[key] / self._debias()

    def _curvature(self, key: str, extreme: float) -> float:
        """The smoothed h_min or h_max: a moving average of the window's extreme, or (log
        smoothing) the exponential of a moving average of its log."""
        if not self.log_smooth_curvature:
            return self._average(key, extreme)
        return math.exp(self._average(key, math.log(max(extreme, EPS))))

    def _estimate(self, grads: list[torch.Tensor], params: list[torch.Tensor], h_t: float) -> None:
        """Update the estimates of Algorithms 2-4 with a gradient whose ||g||² is `h_t`."""
        tuner, w = self.state["yellowfin"], self.curv_win_width
        # Algorithm 2, curvature range: extremes of the sliding window, each then smoothed.
        tuner["window"] = (tuner["window"] + [h_t])[-w:]
        tuner["h_min"] = self._curvature("h_min_avg", min(tuner["window"]))
        tuner["h_max"] = self._curvature("h_max_avg", max(tuner["window"]))
        # Algorithm 3, variance: C = avg(||g||²) - ||avg(g)||², the sum over coordinates of
        # E[g²] - E[g]². The per-coordinate average of g is debiased as a whole vector, so its
        # squared norm divides by the square of the debiasing factor.
        norm_sq = self._average("norm_sq_avg", h_t)
        avg_sq = 0.0
        for p, g in zip(params, grads, strict=True):
            grad_avg = self.state[p].setdefault("grad_avg", torch.zeros_like(g))
            grad_avg.lerp_(g, 1 - self.beta)
            avg_sq += grad_avg.square().sum()
        tuner["variance"] = max(norm_sq - float(avg_sq) / self._debias() ** 2, EPS)
        # Algorithm 4, distance to the optimum: for a quadratic, ||x - x*|| ≈ ||g|| / h with
        # h = ||g||² the curvature estimate; the ratio of the two (debiased) averages is itself
        # averaged.
        norm = self._average("norm_avg", math.sqrt(h_t))
        tuner["distance"] = self._average("distance_avg", norm / max(norm_sq, EPS))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        params, grads = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    wd = group["weight_decay"]
                    params.append(p)
                    grads.append(p.grad.add(p, alpha=wd) if wd else p.grad)
        if not params:
            return loss
        tuner = self.state["yellowfin"]
        tuner["step"] += 1
        h_prev = tuner.get("h_max")  # the curvature envelope before this gradient (None at first)

        # Clipping: a fixed threshold, then (adaptive) the loose cap that protects the estimates.
        h_t = float(sum(g.square().sum() for g in grads))
        caps = [self.clip_thresh**2 if self.clip_thresh is not None else math.inf]
        if self.adaptive_clip and h_prev is not None:
            caps.append(self.stat_protect_fac * h_prev)
        scale = math.sqrt(min(1.0, min(caps) / h_t)) if h_t > 0 else 1.0
        if scale < 1.0:
            grads, h_t = [g * scale for g in grads], h_t * scale**2

        self._estimate(grads, params, h_t)

        # Algorithm 1: from the second step on (the first has no variance to go by), tune μ_t and
        # α_t; the moving averages of μ and α follow them (applied by variant "2017").
        if tuner["step"] > 1:
            mu_t, lr_t = single_step(
                tuner["h_min"], tuner["h_max"], tuner["variance"], tuner["distance"]
            )
            if self.slow_start:  # the estimates of the first steps are short averages
                lr_t *= min(1.0, tuner["step"] / (10.0 * self.curv_win_width))
            tuner["mu_t"], tuner["lr_t"] = mu_t, lr_t
            tuner["momentum"] = self.beta * tuner["momentum"] + (1 - self.beta) * mu_t
            tuner["lr"] = self.beta * tuner["lr"] + (1 - self.beta) * lr_t
        if self.apply_unsmoothed:
            lr = tuner.get("lr_t", self.defaults["lr"])
            mu = tuner.get("mu_t", self.defaults["momentum"])
        else:
            lr, mu = tuner["lr"], tuner["momentum"]
        # A catastrophic move (α·||g|| at the threshold or beyond) is cut back to it.
        norm = math.sqrt(h_t)
        if lr * norm >= self.catastrophic_move_thresh:
            lr = self.catastrophic_move_thresh / norm

        # Adaptive clipping of the update: a gradient beyond the curvature envelope is scaled
        # back onto it, so a sudden spike cannot throw the iterate far off.
        if self.adaptive_clip and h_prev is not None and h_t > h_prev:
            shrink = math.sqrt(h_prev / h_t)
            grads = [g * shrink for g in grads]

        for p, g in zip(params, grads, strict=True):
            velocity = self.state[p].setdefault("velocity", torch.zeros_like(p))
            if self.velocity == "sgd":
                # torch.optim.SGD's buffer, the authors' step: x ← x - α·(μ·b + g).
                velocity.mul_(mu).add_(g)
                p.add_(velocity, alpha=-lr)
            else:
                # The paper's heavy ball: x ← x + v with v = μ·v - α·g, v being the previous
                # step x - x_prev (so a change of α does not rescale the momentum already built).
                velocity.mul_(mu).add_(g, alpha=-lr)
                p.add_(velocity)
        for group in self.param_groups:
            group["lr"], group["momentum"] = lr, mu
        return loss
