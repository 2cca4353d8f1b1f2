"""MLflow: one experiment per study, one MLflow run per run of the harness.

Each MLflow run holds the keys its study varies as params (`harness.loggers.varied`), the whole
resolved config as an artifact (`config.yaml`), tags for the study, engine, update path,
device, seed, config hash, run folder and package versions, the metrics with their iteration
as the step, `run.json` as an artifact, and its status: FINISHED (completed or diverged, with
the tag `diverged`), FAILED (its optimizer raised, or its training did) or KILLED (stopped).

The store is `logger.mlflow.tracking_uri`, else `$MLFLOW_TRACKING_URI`, else a local SQLite
file, `mlflow.db` in the working directory. A run is found again by its config hash (tag
`config_hash`, unique in a study): a resumed run continues its MLflow run from the last step
each metric holds.

Each call to a store costs ~10 ms whatever it carries (bench/README.md), so a run makes as few
as it can: its params go with its first metrics, its two artifacts go in one call when it ends,
and a process opens its client, store and experiments once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.loggers import study_of, varied

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from harness.training.run import PreparedRun

DEFAULT_STORE = "mlflow.db"  # in the working directory
BATCH = 1000  # MLflow's limit of metrics per log_batch call
STATUS = {"completed": "FINISHED", "diverged": "FINISHED", "failed": "FAILED"}


def tracking_uri(node: Any = None) -> str:
    """Where runs are logged: the config's URI, else $MLFLOW_TRACKING_URI, else the local
    SQLite store of the working directory."""
    given = node.get("tracking_uri") if node is not None else None
    if given:
        return str(given)
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(DEFAULT_STORE).resolve()}"


def experiment_name(node: Any, out_dir: Path) -> str:
    """The study's experiment: the config's name, else the study folder's."""
    given = node.get("experiment") if node is not None else None
    return str(given) if given else study_of(out_dir)


_clients: dict[str, Any] = {}  # per process: one client, and one store, per URI
_experiments: dict[tuple[str, str], str] = {}


def client(uri: str):
    """The process's client of the store at `uri` (a new store's tables made under
    `store_lock`: MLflow makes them when its client first opens the store)."""
    if uri not in _clients:
        from mlflow.tracking import MlflowClient

        with store_lock(uri):
            _clients[uri] = MlflowClient(tracking_uri=uri)
            _clients[uri].search_experiments(max_results=1)  # opens the store, here
    return _clients[uri]


@contextlib.contextmanager
def store_lock(uri: str):
    """Around a process's first use of a local SQLite store: one process at a time (worker
    processes that made a new store's tables together would race on them)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def study_experiment(uri: str, name: str) -> str:
    """The id of experiment `name` in the store at `uri`, made if new; once per process."""
    if (uri, name) not in _experiments:
        mlflow_client = client(uri)  # first: it takes the lock itself
        with store_lock(uri):
            _experiments[uri, name] = experiment_id(mlflow_client, uri, name)
    return _experiments[uri, name]


def experiment_id(mlflow_client, uri: str, name: str) -> str:
    """The id of experiment `name`, created if new (another process may create it meanwhile)."""
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return mlflow_client.create_experiment(name, artifact_location=artifacts_of(uri, name))
    except Exception:  # noqa: BLE001 - created by another process since
        found = mlflow_client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def artifacts_of(uri: str, name: str) -> str | None:
    """Where a local SQLite store keeps an experiment's artifacts: beside its file (MLflow's
    default, ./mlruns, is the working directory's, wherever the store is); None: the store's
    own default."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri.removeprefix("sqlite:///")).parent / "mlruns" / name).resolve().as_uri()


def find_run(mlflow_client, experiment: str, config_hash: str):
    """The MLflow run of the study's run with `config_hash`, or None."""
    runs = mlflow_client.search_runs(
        [experiment], filter_string=f"tags.config_hash = '{config_hash}'", max_results=1
    )
    return runs[0] if runs else None


def last_steps(mlflow_client, run) -> dict[str, int]:
    """The last step of each metric an MLflow run holds."""
    return {
        key: max(m.step for m in mlflow_client.get_metric_history(run.info.run_id, key))
        for key in run.data.metrics
    }


@dataclass(frozen=True)
class RunFacts:
    """What the MLflow run of a harness run is made from, known before it trains."""

    out_dir: Path
    config: dict[str, Any]
    config_hash: str
    params: dict[str, str]
    tags: dict[str, str]

    @classmethod
    def of(cls, run: PreparedRun) -> RunFacts:
        from omegaconf import OmegaConf

        from harness.config.identity import config_hash
        from harness.results.recording import package_versions

        config = OmegaConf.to_container(run.cfg, resolve=True)
        tags = {
            "study": study_of(run.out_dir),
            "run_dir": str(run.out_dir.resolve()),
            "device": str(run.device),
            "seed": str(run.cfg.seed),
            **{f"choice.{k}": str(v) for k, v in run.choices.items() if v is not None},
            **{f"version.{k}": str(v) for k, v in package_versions().items()},
        }
        return cls(run.out_dir, config, config_hash(config), varied(run.out_dir, run.choices), tags)


def record_tags(record: dict[str, Any]) -> dict[str, str]:
    """The tags a finished run's record adds: how it trained, whether it diverged, the
    versions of its optimizer's library."""
    tags = {
        "status": str(record["status"]),
        "diverged": str(record["status"] == "diverged").lower(),
        "engine": str(record.get("engine")),
        "update_path": str(record.get("update_path")),
        "device": str(record.get("device")),
    }
    for name, version in (record.get("optimizer_versions") or {}).items():
        tags[f"version.{name}"] = str(version)
    return tags


class MlflowLogger:
    """A run's MLflow run (`harness.loggers.Logger`); everything MLflow happens in `open` and
    after, in the logging thread."""

    def __init__(self, node: DictConfig | None, facts: RunFacts) -> None:
        self.uri, self.experiment = tracking_uri(node), experiment_name(node, facts.out_dir)
        self.facts = facts
        self.client: Any = None
        self.run_id = ""
        self.params: list = []  # sent with the first metrics (or the end): one call fewer

    def open(self) -> dict[str, int]:
        from mlflow.entities import Param

        self.client = client(self.uri)
        experiment = study_experiment(self.uri, self.experiment)
        # a resumed run's params go again: MLflow takes a param's same value twice
        self.params = [Param(k, v) for k, v in self.facts.params.items()]
        found = find_run(self.client, experiment, self.facts.config_hash)
        if found is not None:  # resumed: the same MLflow run goes on
            self.run_id = found.info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return last_steps(self.client, found)
        run = self.client.create_run(
            experiment,
            run_name=self.facts.out_dir.name,
            tags={"config_hash": self.facts.config_hash, **self.facts.tags},
        )
        self.run_id = run.info.run_id
        return {}

    def log(self, rows: Sequence[tuple[int, float, float, str, float]]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(metric, value, now, iteration) for iteration, _, _, metric, value in rows]
        for start in range(0, len(metrics), BATCH):
            self._batch(metrics=metrics[start : start + BATCH])

    def _batch(self, metrics: Sequence = (), tags: Sequence = ()) -> None:
        params, self.params = self.params, []
        self.client.log_batch(self.run_id, metrics=metrics, params=params, tags=tags)

    def _end(self, status: str, tags: dict[str, str], record: dict[str, Any] | None) -> None:
        """The run's last tags, its artifacts (config.yaml, and run.json where it has one) in
        one call, and its status."""
        from mlflow.entities import RunTag

        self._batch(tags=[RunTag(k, v) for k, v in tags.items()])
        with tempfile.TemporaryDirectory() as folder:
            files = {"config.yaml": self.facts.config, "run.json": record}
            for name, content in files.items():
                if content is not None:
                    Path(folder, name).write_text(_dumped(name, content))
            self.client.log_artifacts(self.run_id, folder)
        self.client.set_terminated(self.run_id, status)

    def finish(self, record: dict[str, Any]) -> None:
        self._end(STATUS.get(record["status"], "FAILED"), record_tags(record), record)

    def abort(self, status: str) -> None:
        self._end(status.upper(), {"status": status.lower()}, None)


def _dumped(name: str, content: dict[str, Any]) -> str:
    """An artifact's text: YAML or JSON by its name, as MLflow's log_dict writes them."""
    import json

    import yaml

    if name.endswith(".yaml"):
        return yaml.safe_dump(content, default_flow_style=False)
    return json.dumps(content, indent=2, default=str)
