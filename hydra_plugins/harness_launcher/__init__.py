"""Hydra launcher plugin of optimizer-harness (hydra/launcher=stacked)."""
