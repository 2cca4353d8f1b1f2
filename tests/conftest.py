import contextlib
import gzip
import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

# Torch's threads per test process: the cores shared among xdist's workers (one each for two
# workers on two cores), set before torch is imported; the harness-train processes that tests
# start inherit it (two workers of two threads each would oversubscribe two cores). A value set
# by hand is kept.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _WORKERS)))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from omegaconf import open_dict  # noqa: E402

from slurm_cluster import slurm_cluster  # noqa: E402, F401 - the fixture of the `slurm` tier

REPO = Path(__file__).resolve().parent.parent
CONF_DIR = REPO / "conf"
# The four canonical MNIST files, beside the repository (as in CI); override with HARNESS_DATA_ROOT.
MNIST_DIR = Path(os.environ.get("HARNESS_DATA_ROOT", REPO.parent / "shared" / "data" / "mnist"))


# A small run on real MNIST: 60 steps on a 2,000-image subset, evaluated every 20.
SMALL_RUN = [
    "data.train_size=2000",
    "data.test_size=500",
    "data.val_size=500",
    "train.iterations=60",
    "train.eval_every=20",
    "train.log_every=5",
    "train.eval_train_size=1000",
]


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> Path:
    """Write `array` (uint8) as an IDX file, as MNIST's files are laid out."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape
    )
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


@pytest.fixture
def tiny_mnist(tmp_path: Path) -> Path:
    """A tiny MNIST-format data set in torchvision's layout (<root>/MNIST/raw, uncompressed):
    200 training and 50 test images of 28x28 with labels 0-9."""
    rng = np.random.default_rng(0)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", 200), ("t10k", 50)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 50, size=(n, 28, 28))
        images[np.arange(n), labels, :] = 255  # a learnable pattern: the label's row is bright
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return tmp_path


@pytest.fixture(scope="session", autouse=True)
def harness_cache(tmp_path_factory) -> Iterator[Path]:
    """The harness's cache folder ($HARNESS_CACHE_DIR: decoded MNIST) in the session's temporary
    folder, shared by xdist's workers and inherited by the processes tests start: the suite
    writes nothing into the user's ~/.cache. A value set by hand is kept."""
    if os.environ.get("HARNESS_CACHE_DIR"):
        yield Path(os.environ["HARNESS_CACHE_DIR"])
        return
    # getbasetemp() is per xdist worker; its parent is shared by the workers of one session.
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HARNESS_CACHE_DIR", str(base / "cache"))
        yield base / "cache"


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    assert MNIST_DIR.is_dir(), f"the canonical MNIST files are expected in {MNIST_DIR}"
    return MNIST_DIR


def compose_config(overrides: list[str], return_hydra_config: bool = False):
    """Compose the app's config as Hydra would for `harness-train <overrides>`, with Hydra's
    runtime config set as in a job (so `${hydra:...}` interpolations resolve)."""
    if not GlobalHydra.instance().is_initialized():
        with hydra_context():
            return compose_config(overrides, return_hydra_config)
    cfg = compose("config", overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    if not return_hydra_config:
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def hydra_context():
    """Initialise Hydra once for many compose_config() calls."""
    return initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3")


HARNESS_TRAIN = (sys.executable, "-c", "from harness.cli import train; train()")


def train_in_process(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`harness-train *args` in `cwd` as `run_cli` runs it, through the same entry point, in
    this interpreter: the same route from the command line to the exit status and stderr,
    without the ~5 s of a fresh interpreter importing torch (for the many bad-input cases;
    a few of them also run as a real process, for what only a process shows)."""
    from harness.cli import train

    stdout, stderr, environ = io.StringIO(), io.StringIO(), dict(os.environ)
    argv, os.environ["HARNESS_DATA_ROOT"] = sys.argv, str(MNIST_DIR)
    sys.argv = ["harness-train", *args]
    try:
        with (
            contextlib.chdir(cwd),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            try:
                train()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
        os.environ.clear()
        os.environ.update(environ)
        GlobalHydra.instance().clear()
    return subprocess.CompletedProcess(sys.argv, code, stdout.getvalue(), stderr.getvalue())


def run_cli(
    *args: str, cwd: Path, timeout: float = 300, command: Sequence[str] = HARNESS_TRAIN
) -> subprocess.CompletedProcess:
    """Run harness-train (or another `command`) as a user would, in `cwd`."""
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HARNESS_DATA_ROOT": str(MNIST_DIR)},
    )


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory, mnist_dir) -> Path:
    """A consolidated sweep folder (runs.parquet + curves.parquet) of 40 short runs on real
    MNIST: see tests/smoke_sweep.py. Made once per test session, shared by xdist workers."""
    from smoke_sweep import shared_smoke_sweep

    # getbasetemp() is per xdist worker; its parent is shared by the workers of one session.
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return shared_smoke_sweep(base, mnist_dir)


# --- helpers shared by several test modules (no test module imports another) -------------


def small(dtype: str, iterations: int, eval_every: int, log_every: int) -> list[str]:
    return [
        "data.train_size=1000",
        "data.val_size=200",
        "data.test_size=200",
        f"train.iterations={iterations}",
        f"train.eval_every={eval_every}",
        f"train.log_every={log_every}",
        "train.eval_train_size=300",
        "train.batch_size=50",
        f"train.dtype={dtype}",
        "threads=1",
        "seed=7",
    ]


def max_difference(a: pd.DataFrame, b: pd.DataFrame) -> float:
    # Same measurements at the same steps; only the measured time differs.
    pd.testing.assert_frame_equal(
        a.drop(columns=["time_s", "value"]), b.drop(columns=["time_s", "value"])
    )
    return float(np.max(np.abs(a.value.to_numpy() - b.value.to_numpy())))


class BatchNormNet(torch.nn.Module):
    """A model with buffers (batch-norm statistics): it cannot stack."""

    def __init__(self, in_features: int, num_classes: int, **mlp_keys) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(in_features, num_classes)
        self.norm = torch.nn.BatchNorm1d(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


# A tiny ESGD study: every method, three generations of four individuals.
TINY = [
    "experiment=esgd",
    "data.train_size=1000",
    "data.val_size=200",
    "data.test_size=200",
    "train.batch_size=50",
    "threads=1",
    "esgd.population=4",
    "esgd.offspring=4",
    "esgd.elite=1",
    "esgd.generations=3",
    "esgd.sgd_steps=6",
    "esgd.backoff_every=3",
    "esgd.top_k=2",
]


def tiny_cfg(*overrides: str):
    return compose_config([f"data.root={MNIST_DIR}", *TINY, *overrides])


class FailingSGD(torch.optim.SGD):
    """SGD whose step raises at step `fail_at`: an optimizer that fails during training."""

    def __init__(self, params, fail_at: int = 7, **sgd) -> None:
        super().__init__(params, **sgd)
        self.fail_at, self.steps = fail_at, 0

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        self.steps += 1
        if self.steps == self.fail_at:
            raise torch.linalg.LinAlgError(f"the matrix is singular at step {self.steps}\nmore")
        return super().step(closure)


class CountingSGD(torch.optim.SGD):
    """SGD that counts its steps (over all instances: the first-step check builds its own)."""

    steps = 0
    seconds = 0.0  # slept at every step

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        type(self).steps += 1
        if self.seconds:  # (sleep(0) would give the core away, on a busy machine for long)
            time.sleep(self.seconds)
        return super().step(closure)


class SlowSGD(CountingSGD):
    """SGD as costly per step as Kron on net1 (~0.4 s)."""

    steps = 0
    seconds = 0.4


class NappingSGD(torch.optim.SGD):
    """SGD whose every step in a SLURM job sleeps `seconds` while the file named by $NAP_WHILE
    exists: a stack as slow as a test needs it while it waits for a stop to happen, as fast as
    SGD once the test removes the file (and outside a job: the command's checks, a reference
    sweep). Sleep changes no result."""

    seconds = 0.1

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        flag = os.environ.get("NAP_WHILE")
        if flag and "SLURM_JOB_ID" in os.environ and os.path.exists(flag):
            time.sleep(self.seconds)
        return super().step(closure)


class GreedySGD(torch.optim.SGD):
    """SGD whose first step takes 1.5 times the memory the machine has free, as Kron does on
    net2: the kernel lets such an allocation through and kills the process once it is written,
    unless the first-step check bounds it (harness.training.memory)."""

    def step(self, closure=None):  # noqa: ANN001, ANN201 - torch's signature
        from harness.training.memory import available_bytes

        self.greedy = torch.empty(int(1.5 * available_bytes()), dtype=torch.uint8).zero_()
        return super().step(closure)
