"""optimizer-harness: compare optimizers on MNIST networks with Hydra-configured runs."""

from harness.config import resolvers  # noqa: F401  (registers the configs' resolvers)

__version__ = "0.1.0"
