"""optimizer-harness: compare optimizers on MNIST networks with Hydra-configured runs."""

__version__ = "0.1.0"
