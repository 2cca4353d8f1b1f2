"""harness-recommend and the data beyond MNIST: a user's arrays and torchvision's data sets load
with MNIST's validation hold-out, bad data ends in one line before anything trains, and the
whole pipeline runs in smoke mode on a synthetic .npz and on LeNet."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import REPO, write_idx
from harness.errors import DataError
from harness.problems.classification.datasets import load_arrays, load_torchvision
from harness.recommend import settings


def synthetic_npz(path, n_train=1000, n_test=300, features=8, classes=3, **changes):
    """Three classes told apart by the first feature; `changes` replace arrays (None: drop)."""
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.integers(0, classes, n)
        x = rng.normal(size=(n, features)).astype(np.float32)
        x[:, 0] += 2 * y
        arrays |= {f"x_{split}": x, f"y_{split}": y}
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    np.savez(path, **arrays)
    return path


def recommend(*args: str, cwd=REPO, env_path: str = "") -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{REPO}:{env_path}", "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-m", "harness.recommend", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def test_arrays_hold_out_validation_as_mnist_does(tmp_path):
    path = synthetic_npz(tmp_path / "d.npz")
    data = load_arrays(path, val_size=200, test_size=100, subset_seed=3)
    again = load_arrays(path, val_size=200, test_size=100, subset_seed=3)
    assert (len(data.y_train), len(data.y_val), len(data.y_test)) == (800, 200, 100)
    assert torch.equal(data.x_val, again.x_val) and data.num_classes == 3
    raw = np.load(path)
    rows = {tuple(r) for r in np.round(raw["x_train"], 4).tolist()}
    # validation rows come out of the training file; standardised by the training rows
    assert data.x_train.mean(0).abs().max() < 1e-5
    assert abs(float(data.x_train.std(0)[0]) - 1) < 1e-3
    assert len(rows) == 1000
    images = synthetic_npz(
        tmp_path / "img.npz",
        x_train=np.zeros((1000, 4, 4), np.uint8),
        x_test=np.zeros((300, 4, 4), np.uint8),
    )
    assert load_arrays(images, val_size=0).num_features == 16  # images flattened


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"y_test": None}, "lacks y_test"),
        (
            {"x_test": np.zeros((0, 8), np.float32), "y_test": np.zeros(0, int)},
            "test split is empty",
        ),
        ({"y_train": -np.ones(1000, int)}, "negative label"),
        ({"y_train": np.full(1000, 0.5)}, "not whole numbers"),
        ({"x_test": np.zeros((300, 9), np.float32)}, "test examples of shape (9,)"),
        ({"y_train": np.zeros(999, int)}, "999 labels"),
    ],
)
def test_bad_arrays_are_refused_in_one_line(tmp_path, changes, message):
    path = synthetic_npz(tmp_path / "d.npz", **changes)
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_arrays(path, val_size=100)


def test_a_torchvision_data_set_by_name_from_its_files(tmp_path):
    """FashionMNIST's files in torchvision's layout (no download): read, scaled, validation held
    out; a name that is no torchvision data set is refused in one line."""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 60)):
        labels = np.arange(n) % 10
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    data = load_torchvision("FashionMNIST", tmp_path, val_size=100, normalization="unit")
    assert (len(data.y_train), len(data.y_val), len(data.y_test)) == (200, 100, 60)
    assert data.num_features == 784 and data.num_classes == 10
    assert float(data.x_train.min()) >= 0 and float(data.x_train.max()) <= 1
    with pytest.raises(DataError, match="not a data set of torchvision"):
        load_torchvision("NotAData", tmp_path)
    with pytest.raises(DataError, match="no KMNIST in data.root"):
        load_torchvision("KMNIST", tmp_path, download=False)


def test_the_zoos_best_k_by_the_stated_rule():
    base = (*settings.COURSE, settings.SCHEDULE_FREE)
    best = settings.zoo_best(10, base)
    assert len(best) == 10 and not set(best) & set(base)
    assert settings.zoo_best(3, base) == best[:3]  # one ranking, cut at K


@pytest.mark.parametrize(
    "args, message",
    [
        (["data=arrays", "data.path={nokey}", "model=net1"], "lacks y_test"),
        (["data=arrays", "data.path={empty}", "model=net1"], "the test split is empty"),
        (["data=arrays", "data.path={good}", "model=lenet"], "LeNet needs square images"),
        (["data=arrays", "data.path={good}", "model=net1", "K=-1"], "K must be"),
        (["data=arrays", "data.path={good}", "model=net1", "recommend.oops=1"], "unknown"),
    ],
)
def test_bad_input_ends_in_one_line_before_training(tmp_path, args, message):
    files = {
        "nokey": synthetic_npz(tmp_path / "nokey.npz", y_test=None),
        "empty": synthetic_npz(
            tmp_path / "empty.npz", x_test=np.zeros((0, 8), np.float32), y_test=np.zeros(0, int)
        ),
        "good": synthetic_npz(tmp_path / "good.npz"),
    }
    args = [a.format(**files) for a in args]
    done = recommend(*args, "recommend.smoke=true", f"recommend.root={tmp_path / 'out'}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_model_whose_outputs_do_not_match_the_labels_is_refused(tmp_path, monkeypatch):
    """A user's module giving 5 logits for 3 classes, and one that refuses 8 features."""
    (tmp_path / "user_nets.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Five(torch.nn.Module):
                def __init__(self, in_features):
                    super().__init__()
                    self.layer = torch.nn.Linear(in_features, 5)

                def forward(self, x):
                    return self.layer(x)

            class Wide(torch.nn.Module):
                def __init__(self, num_classes):
                    super().__init__()
                    self.layer = torch.nn.Linear(100, num_classes)

                def forward(self, x):
                    return self.layer(x)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from omegaconf import OmegaConf

    from harness.problems.classification.problem import Classification

    data = load_arrays(synthetic_npz(tmp_path / "d.npz"), val_size=100)
    problem = Classification()
    for target, message in (("user_nets.Five", r"shape \(2, 5\)"), ("user_nets.Wide", "refuses")):
        cfg = OmegaConf.create({"model": {"_target_": target}})
        with pytest.raises(DataError, match=message):
            problem.build_model(cfg, data, torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_smoke_answers_on_a_synthetic_npz(tmp_path):
    path = synthetic_npz(tmp_path / "mine.npz")
    done = recommend(
        "data=arrays",
        f"data.path={path}",
        "model=net1",
        "recommend.smoke=true",
        f"recommend.root={tmp_path}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.index("cost estimate") < done.stdout.index("phase tune")  # before
    folder = tmp_path / "net1_mine_smoke"
    ranks = pd.read_csv(folder / "ranks.csv")
    assert sorted(ranks["optimizer"]) == ["adam", "schedulefree_adamw", "sgd"]
    assert list(ranks["rank"]) == [1, 2, 3]
    assert ranks["val_accuracy"].is_monotonic_decreasing
    assert (folder / "convergence.png").stat().st_size > 0
    text = (folder / "README.md").read_text()
    assert "| 1 | " + ranks["optimizer"][0] in text
    # phase 3 trained 3 seeds of each contender at the rate phase 2 chose
    runs = pd.read_parquet(folder / "evaluate" / "runs.parquet")
    assert len(runs) == 9


@pytest.mark.slow
@pytest.mark.heavy  # a CNN through the same pipeline as test_smoke_answers_on_a_synthetic_npz
def test_smoke_answers_on_lenet(tmp_path, mnist_dir):
    done = recommend(
        "model=lenet",
        f"data.root={mnist_dir}",
        "recommend.smoke=true",
        "contenders=[sgd,adam]",
        f"recommend.root={tmp_path}",
        "name=lenet",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = pd.read_csv(tmp_path / "lenet" / "ranks.csv")
    assert sorted(ranks["optimizer"]) == ["adam", "sgd"]
