"""Hydra config source of optimizer-harness: `optimizer=<name>` for any optimizer class of
torch.optim, schedulefree and pytorch-optimizer (harness.optimizers.catalogue)."""
