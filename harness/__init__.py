"""optimizer-harness: compare optimizers on MNIST networks with Hydra-configured runs."""

# The configs' OmegaConf resolvers, registered for every way of composing a config.
from harness.config import resolvers  # noqa: F401
from harness.tuning import resolvers as tuning_resolvers  # noqa: F401

__version__ = "0.1.0"
