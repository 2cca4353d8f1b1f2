"""`python -m harness.esgd [overrides]`: `harness-train experiment=esgd [overrides]`."""

import sys

from harness.cli import train

if not any(arg.startswith("experiment=") for arg in sys.argv[1:]):
    sys.argv.insert(1, "experiment=esgd")
train()
