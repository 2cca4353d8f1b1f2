"""Console entry points. User mistakes end as one line on stderr and exit status 2; anything
else is a bug and keeps its traceback."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from harness.errors import HarnessError
from harness.results import RUN_FILE

log = logging.getLogger("harness")
# The repository's conf/ folder (the package is installed in editable mode from the repository).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def _config_error_message(exc: Exception) -> str:
    if isinstance(exc, MissingConfigException) and exc.options:
        group = (exc.missing_cfg_file or "").rsplit("/", 1)[0]
        return (
            f"no config '{exc.missing_cfg_file}'; valid {group} options: {', '.join(exc.options)}"
        )
    # Hydra's and OmegaConf's messages put the useful part first and details on later lines.
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " ".join(lines[:2])[:500] if lines else type(exc).__name__


def _discard_unfinished(run_dir: Path) -> None:
    """Remove a run folder that holds no result (only Hydra's config copy and log), so that a
    rejected run leaves nothing behind that looks like one."""
    if run_dir.is_dir() and not (run_dir / RUN_FILE).exists():
        shutil.rmtree(run_dir, ignore_errors=True)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def _train_app(cfg: DictConfig) -> None:
    from harness.run import execute  # torch import deferred: --help and config errors stay fast

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        execute(cfg, run_dir, dict(hydra_cfg.runtime.choices))
    except HarnessError as exc:
        _discard_unfinished(run_dir)
        fail("harness-train", str(exc))


def train() -> None:
    """`harness-train`: the Hydra app that trains one run, or a sweep with -m."""
    # Hydra would print its own multi-line report of config errors; have them raised instead
    # and turned into one line here.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _train_app()
    except (HydraException, OmegaConfBaseException) as exc:
        fail("harness-train", _config_error_message(exc))
