"""Hydra sweeper plugin of optimizer-harness (hydra/sweeper=tune: tuning studies)."""
