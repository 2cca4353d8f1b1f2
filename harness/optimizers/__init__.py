"""Optimizers that torch.optim does not ship, selectable by config like any torch.optim class."""

from harness.optimizers.yellowfin import YellowFin

__all__ = ["YellowFin"]
