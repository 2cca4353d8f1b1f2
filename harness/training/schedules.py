"""Learning-rate schedules torch does not ship as one class, built like torch's from a config
(`conf/schedule/`): `schedule(optimizer, T_max=..., ...)`, stepped once per iteration."""

from __future__ import annotations

import math

import torch

from harness.errors import ConfigError


class WarmupCosineFactor:
    """The factor on the rate at step t of a run of `total` steps: a linear warm-up over its
    first `warmup` steps, from 1/(warmup + 1) up to 1, then a cosine from 1 down to 0 at step
    `total`. A callable object, not a function, so that a checkpoint's LambdaLR state holds it
    (torch saves an lr_lambda's __dict__ only when it is an object)."""

    def __init__(self, warmup: int, total: int) -> None:
        self.warmup, self.total = warmup, total

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / (self.warmup + 1)
        progress = (step - self.warmup) / max(1, self.total - self.warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def warmup_cosine(
    optimizer: torch.optim.Optimizer, T_max: int, warmup: float = 0.02
) -> torch.optim.lr_scheduler.LambdaLR:
    """Cosine decay to zero over a run of `T_max` steps after a linear warm-up over its first
    `warmup` share of them."""
    if not 0 <= warmup < 1:
        raise ConfigError(f"schedule.warmup must be a share of the run in [0, 1), got {warmup}")
    factor = WarmupCosineFactor(round(warmup * T_max), T_max)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
