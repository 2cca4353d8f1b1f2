"""Console entry points. User mistakes end as one line on stderr and exit status 2; anything
else is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness import storage
from harness.errors import ConfigError, HarnessError, exit_with_error, harness_error_in
from harness.results import RUN_FILE, RunRecord
from harness.storage import compact
from harness.sweeps.callback import discard_invocation
from harness.sweeps.consolidate import consolidate
from harness.sweeps.progress import log_progress
from harness.sweeps.resume import resumed

log = logging.getLogger("harness")
# The repository's conf/ folder (the package is installed in editable mode from the repository).
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def _config_error_message(exc: Exception) -> str:
    wrapped = harness_error_in(exc)
    if wrapped is not None:  # a resolver's own message, without OmegaConf's wrapping
        return str(wrapped)
    if isinstance(exc, MissingConfigException) and exc.options:
        group = (exc.missing_cfg_file or "").rsplit("/", 1)[0]
        # The files of the group, then how many more the optimizer catalogue names.
        files = [o for o in exc.options if (CONF_DIR / group / f"{o}.yaml").exists()]
        more = len(exc.options) - len(files)
        catalogue = f", or one of {more} more by name (harness-optimizers lists them)"
        return (
            f"no config '{exc.missing_cfg_file}'; valid {group} options: {', '.join(files)}"
            f"{catalogue if more else ''}"
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
def _train_app(cfg: DictConfig) -> RunRecord | None:
    """One run: a single run, or a job of a sweep run by a launcher other than the stacked one
    (which trains its jobs itself)."""
    # torch imported here, not at the top: --help and config errors stay fast
    from harness.sweeps.plan import requested_engine
    from harness.training.run import execute

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    if "esgd" in cfg:  # experiment=esgd: a population study, not a run
        _esgd_study(cfg, run_dir, hydra_cfg.mode)
        return
    try:
        if hydra_cfg.mode == RunMode.MULTIRUN:
            log_progress(hydra_cfg)
            config = OmegaConf.to_container(cfg, resolve=True)
            choices = dict(hydra_cfg.runtime.choices)
            record = resumed(config, Path(hydra_cfg.sweep.dir), run_dir, choices)
            if record is not None:
                return record
            if requested_engine(cfg) == "stacked":
                log.info("train.engine=stacked: only hydra/launcher=stacked stacks runs")
        # the record, which a sweeper that optimises (Optuna) reads as the run's objective
        return RunRecord(execute(cfg, run_dir, dict(hydra_cfg.runtime.choices)))
    except (HarnessError, OmegaConfBaseException) as exc:
        # here, not in Hydra, which would log its own line about the job first
        if not isinstance(exc, HarnessError) and harness_error_in(exc) is None:
            raise
        _discard_unfinished(run_dir)
        exit_with_error("harness-train", _config_error_message(exc))


def _esgd_study(cfg: DictConfig, run_dir: Path, mode: RunMode) -> None:
    """The ESGD study of `cfg` (harness.esgd), in its own folder (results/esgd/<model>)."""
    from harness.config.validate import ONE_STUDY_PER_COMMAND
    from harness.esgd.app import execute

    try:
        if mode == RunMode.MULTIRUN:
            raise ConfigError(ONE_STUDY_PER_COMMAND)
        execute(cfg, run_dir)
    except HarnessError as exc:
        exit_with_error("harness-train", str(exc))


class Stopped(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's stop), raised where Ctrl-C raises KeyboardInterrupt: the
    same way out (the launcher stops its workers, what finished is kept)."""


def _stop(signum: int, frame: object) -> None:
    raise Stopped


def train() -> None:
    """`harness-train`: the Hydra app that trains one run, or a sweep with -m."""
    # Hydra would print its own multi-line report of config errors; have them raised instead
    # and turned into one line here.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    signal.signal(signal.SIGTERM, _stop)
    if any("_target_" in arg for arg in sys.argv[1:]):  # (torch imported only then)
        from harness.optimizers.own import as_class_choice

        try:  # optimizer._target_=X: X from its own defaults, not the default config's keys
            sys.argv[1:] = as_class_choice(sys.argv[1:])
        except HarnessError as exc:
            exit_with_error("harness-train", str(exc))
    try:
        _train_app()
    except HarnessError as exc:  # raised outside a job: by the stacked launcher
        discard_invocation()
        exit_with_error("harness-train", str(exc))
    except (HydraException, OmegaConfBaseException) as exc:
        discard_invocation()
        exit_with_error("harness-train", _config_error_message(exc))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: what finished and the checkpoints stay
        print(
            "harness-train: interrupted; the runs that finished are kept, and the same command "
            "resumes the rest (from their last checkpoints)",
            file=sys.stderr,
        )
        signum = signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT
        raise SystemExit(128 + signum) from None


def collect_main(argv: list[str] | None = None) -> None:
    """`harness-collect SWEEP_DIR...`: consolidate the finished runs of sweep folders that their
    tables do not hold yet into a new part of them (also done when a sweep ends); with
    --compact, fold a finished study's parts into one runs.parquet and curves.parquet; with
    --check, verify a study's tables (a line per check; exit status 1 where one fails), and with
    --repair fix what can be fixed."""
    parser = argparse.ArgumentParser(prog="harness-collect", description=collect_main.__doc__)
    parser.add_argument("sweep_dirs", nargs="+", type=Path, metavar="SWEEP_DIR")
    parser.add_argument(
        "--compact", action="store_true", help="fold the parts into one pair of tables"
    )
    parser.add_argument(
        "--check", action="store_true", help="verify the study's tables; consolidate nothing"
    )
    parser.add_argument("--repair", action="store_true", help="with --check: fix what can be fixed")
    args = parser.parse_args(argv)
    if args.repair and not args.check:
        exit_with_error("harness-collect", "--repair goes with --check")
    if args.check and args.compact:
        exit_with_error("harness-collect", "--check and --compact are separate commands")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    failed = False
    for sweep_dir in args.sweep_dirs:
        if not sweep_dir.is_dir():
            exit_with_error("harness-collect", f"{sweep_dir} is not a folder")
        if args.check:
            failed |= not _check(sweep_dir, args.repair)
            continue
        try:
            runs, rows = consolidate(sweep_dir)
            if args.compact:
                runs, rows = compact(sweep_dir)
        except HarnessError as exc:  # a damaged table; a table written before runs recorded ids
            exit_with_error("harness-collect", str(exc))
        if runs == 0:
            exit_with_error("harness-collect", f"no finished runs under {sweep_dir}")
        parts = len(storage.parts(sweep_dir))
        kept = (
            f"runs.parquet, curves.parquet and {parts} parts"
            if parts
            else "runs.parquet, curves.parquet"
        )
        print(f"{sweep_dir}: {runs} runs, {rows} curve rows -> {kept}")
    if failed:
        sys.exit(1)


def _check(sweep_dir: Path, repair: bool) -> bool:
    """`harness-collect --check [--repair]` of one study: a line per check; True if all pass."""
    from harness.sweeps.integrity import check
    from harness.sweeps.integrity import repair as repair_study

    try:
        if repair:
            for line in repair_study(sweep_dir):
                print(f"{sweep_dir}: repaired: {line}")
        findings, counts = check(sweep_dir)
    except HarnessError as exc:  # a damaged table: named, left as it is
        exit_with_error("harness-collect", str(exc))
    if not counts["tables"]:
        exit_with_error("harness-collect", f"{sweep_dir} holds no tables")
    details = {
        "runs unique": f"{counts['runs']} runs",
        "curve rows unique": f"{counts['rows']} rows",
        "parts complete": f"{counts['tables']} tables",
        "config hashes": f"{counts['runs']} runs",
        "finished.json": "agrees" if (sweep_dir / "finished.json").exists() else "none kept",
    }
    for finding in findings:
        print(f"{sweep_dir}: {finding.line(details[finding.check])}")
    return all(finding.ok for finding in findings)


def optimizers_main() -> None:
    """`harness-optimizers`: every name `optimizer=<name>` takes, with its class: the curated
    files of conf/optimizer/, then the catalogue (torch.optim, schedulefree, pytorch-optimizer)."""
    from harness.optimizers.catalogue import catalogue

    parser = argparse.ArgumentParser(prog="harness-optimizers", description=optimizers_main.__doc__)
    parser.parse_args()
    files = sorted((CONF_DIR / "optimizer").glob("*.yaml"))
    for path in files:
        target = OmegaConf.load(path).get("_target_")
        print(f"{path.stem:28s} {target}  (conf/optimizer/{path.name})")
    for name, cls in catalogue().items():
        if not any(path.stem == name for path in files):
            print(f"{name:28s} {cls.__module__}.{cls.__qualname__}")
