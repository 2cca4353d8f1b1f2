"""The zoo's three phases run for other optimizers or on another problem (harness-rank,
harness-recommend): each phase a `harness-train -m` process of its preset, so that Hydra's
global state stays its own, its output appended to a log; and configs composed here as
harness-train composes them, for the checks and estimates made before anything trains."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.errors import ConfigError, HarnessError, harness_error_in

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
PHASES = ("tune", "shortlist", "evaluate")
# The same command line as `harness-train`, in this interpreter's environment.
TRAIN = (sys.executable, "-c", "from harness.cli import train; train()")


@dataclass
class Phase:
    name: str
    command: list[str]
    folder: Path
    seconds: float = 0.0
    runs: int = 0
    trained: int = 0


def run_phase(phase: Phase, log: Path) -> None:
    """Run one phase as its own harness-train process, its output appended to `log`; a user's
    mistake it reports (exit status 2: an unknown optimizer setting, a class that cannot be
    imported) becomes this command's one line. Sets the phase's time, runs and runs trained."""
    from harness.storage import read_runs

    start = time.perf_counter()
    before = log.stat().st_size if log.exists() else 0
    with log.open("a") as sink:
        sink.write(f"$ harness-train {' '.join(phase.command[len(TRAIN) :])}\n")
        sink.flush()
        done = subprocess.run(phase.command, stdout=sink, stderr=subprocess.PIPE, text=True)
        sink.write(done.stderr)
    phase.seconds = time.perf_counter() - start
    if done.returncode:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {done.returncode}"
        if done.returncode == 2:
            raise ConfigError(f"phase {phase.name}: {last.removeprefix('harness-train: error: ')}")
        raise RuntimeError(f"phase {phase.name} failed ({last}); its log: {log}")
    phase.runs = len(read_runs(phase.folder, columns=["run_dir"]))
    phase.trained = phase.runs - _reused(log, before)


def _reused(log: Path, start: int) -> int:
    """Runs a phase copied from another study or skipped (finished before), from what its
    harness-train process wrote into `log` from byte `start` on (the log keeps every
    invocation's)."""
    with log.open("rb") as handle:
        handle.seek(start)
        text = handle.read().decode(errors="replace")
    return text.count("reused: this config finished") + text.count("skipped: this config")


@contextlib.contextmanager
def composing() -> Iterator:
    """Hydra initialised on the harness's configs, for `composed` (restored afterwards)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        yield
        return
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def composed(overrides: list[str]) -> DictConfig:
    """The resolved config of a run of `harness-train <overrides>` (its hydra node left out;
    Hydra's runtime config set, as interpolations of it resolve); a HarnessError in one line
    for a config that cannot be composed or resolved."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from harness.cli import _config_error_message

    try:
        cfg = compose("config", overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        task = OmegaConf.create({k: cfg[k] for k in cfg if k != "hydra"})
        return OmegaConf.create(OmegaConf.to_container(task, resolve=True))
    except HarnessError:
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        wrapped = harness_error_in(exc)
        if wrapped is not None:
            raise wrapped from None
        raise ConfigError(_config_error_message(exc)) from None


def key_value(arg: str, command: str, examples: str) -> tuple[str, str]:
    """One argument of a command that takes Hydra overrides only, as (key, value); one line
    naming `command` and its `examples` for anything else (a flag, a bare word)."""
    if arg.startswith("-"):
        raise ConfigError(f"{arg}: {command} takes Hydra overrides only ({examples})")
    if "=" not in arg:
        raise ConfigError(f"{arg}: an override is key=value")
    key, value = arg.split("=", 1)
    return key, value
