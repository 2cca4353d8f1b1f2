"""The ratings workload: synthetic and MovieLens data, the rating models, bad input."""

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import compose_config, hydra_context, run_cli
from harness.errors import ConfigError, DataError
from harness.problems.ratings.data import load_movielens, synthetic_ratings
from harness.problems.ratings.models import MatrixFactorization, NeuralCF


def test_synthetic_ratings_are_seeded_zipfian_and_low_rank_plus_noise():
    a = synthetic_ratings(2000, 500, 20_000, rank=4, noise=0.5, seed=3)
    b = synthetic_ratings(2000, 500, 20_000, rank=4, noise=0.5, seed=3)
    assert torch.equal(a.users_train, b.users_train) and torch.equal(a.ratings_test, b.ratings_test)
    assert len(a) + len(a.ratings_test) == 20_000 and len(a.ratings_test) == 2000
    # Zipf popularity: the most frequent user is far above the mean count.
    counts = torch.bincount(a.users_train, minlength=2000).double()
    assert counts.max() > 50 * counts.mean()
    # Ratings = truth + N(0, 0.5^2): the noise is what separates them.
    noise = a.ratings_test - a.truth_test
    assert float(noise.std()) == pytest.approx(0.5, rel=0.1)
    assert float(a.truth_test.std()) == pytest.approx(1.0, rel=0.25)
    other = synthetic_ratings(2000, 500, 20_000, rank=4, noise=0.5, seed=4)
    assert not torch.equal(a.users_train, other.users_train)


def test_movielens_files_in_both_formats(tmp_path):
    csv = tmp_path / "ratings.csv"
    csv.write_text(
        "userId,movieId,rating,timestamp\n"
        + "".join(f"{u},{10 + i},{(u + i) % 5 + 1},0\n" for u in range(1, 6) for i in range(4))
    )
    data = load_movielens(csv, test_fraction=0.25)
    assert (data.num_users, data.num_items) == (5, 4)
    assert len(data) == 15 and len(data.ratings_test) == 5 and data.truth_test is None
    tab = tmp_path / "u.data"
    tab.write_text(
        "".join(f"{u}\t{i}\t{(u * i) % 5 + 1}\t881250949\n" for u in range(7) for i in range(3))
    )
    data = load_movielens(tab)
    assert (data.num_users, data.num_items) == (7, 3) and len(data) + len(data.ratings_test) == 21
    held = load_movielens(tab, val_size=5)  # validation: 5 of the 19 training ratings
    assert len(held) == 14 and len(held.ratings_val) == 5 and held.truth_val is None
    assert torch.equal(held.ratings_test, data.ratings_test)

    def pairs(users, items):
        return set(zip(users.tolist(), items.tolist(), strict=True))

    val = pairs(held.users_val, held.items_val)  # each (user, item) occurs once in this file
    assert len(val) == 5 and val <= pairs(data.users_train, data.items_train)
    assert not val & pairs(held.users_train, held.items_train)


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "is empty"),
        ("userId,movieId,rating,timestamp\n", "holds no ratings"),
        ("user,item,score\n1,2,3\n", "expected the header"),
        ("userId,movieId,rating,timestamp\n1,2\n", "line 2: expected user, item, rating"),
        ("userId,movieId,rating,timestamp\n1,2,five,0\n", "a rating is not a number"),
    ],
)
def test_an_empty_or_malformed_ratings_file_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "ratings.csv"
    path.write_text(text)
    with pytest.raises(DataError, match=message):
        load_movielens(path)


def test_a_missing_ratings_file_is_named(tmp_path):
    with pytest.raises(DataError, match="no ratings file at"):
        load_movielens(tmp_path / "nothing.csv")


@pytest.mark.parametrize("dim", [0, -3])
def test_an_embedding_dimension_of_zero_or_less_is_refused(dim):
    for model in (MatrixFactorization, NeuralCF):
        with pytest.raises(ConfigError, match="model.dim must be a positive integer"):
            model(10, 10, dim)


def test_sparse_tables_give_sparse_gradients_of_the_batch_rows_only():
    model = MatrixFactorization(1000, 50, 8, sparse=True)
    users, items = torch.tensor([3, 3, 7]), torch.tensor([1, 2, 1])
    model(users, items).pow(2).mean().backward()
    grad = model.users.weight.grad
    assert grad.is_sparse
    assert sorted(set(grad.coalesce().indices()[0].tolist())) == [3, 7]
    dense = MatrixFactorization(1000, 50, 8, sparse=False)
    dense.load_state_dict(model.state_dict())
    dense(users, items).pow(2).mean().backward()
    np.testing.assert_allclose(grad.to_dense(), dense.users.weight.grad, rtol=1e-6)
    assert {id(model.users.weight), id(model.items.weight)} <= set(map(id, model.tables()))
    assert all(t.grad.is_sparse for t in model.tables())  # the tables are what gets sparse grads
    assert model.dense_parameters() == []  # matrix factorisation: tables only
    assert len(NeuralCF(10, 10, 4).dense_parameters()) == 4  # the MLP's weights and biases


# A small ratings run through the harness (synthetic data, seconds).
RATINGS_RUN = [
    "+problem=ratings",
    "data=synthetic_ratings",
    "data.num_users=2000",
    "data.num_items=300",
    "data.num_interactions=20000",
    "data.val_size=2000",
    "model=mf",
    "model.dim=8",
    "train.batch_size=256",
    "train.iterations=40",
    "train.eval_every=20",
    "train.log_every=5",
    "train.eval_train_size=2000",
    "train.progress=false",
    "train.dtype=float64",
]


def ratings_run(tmp_path, name, *overrides):
    from harness.training.run import execute

    with hydra_context():
        cfg = compose_config([*RATINGS_RUN, *overrides])
        choices = {"model": "mf", "optimizer": cfg.optimizer._target_.rsplit(".")[-1].lower()}
        record = execute(cfg, tmp_path / name, choices)
    return record, pd.read_parquet(tmp_path / name / "metrics.parquet")


def test_sparse_and_dense_tables_agree_with_plain_sgd(tmp_path):
    """SGD without momentum or weight decay is lazy and exact at once: a row absent from the
    batch has a zero gradient and does not move either way."""
    dense, dense_metrics = ratings_run(
        tmp_path, "dense", "optimizer=sgd", "optimizer.lr=2.0", "problem.tables=dense"
    )
    sparse, sparse_metrics = ratings_run(
        tmp_path, "sparse", "optimizer=sgd", "problem.tables=sgd", "problem.table_lr=2.0"
    )
    assert dense["problem"]["quality"] == "rmse"
    assert list(dense_metrics["metric"]) == list(sparse_metrics["metric"])
    # float64, but summed in another order (sparse rows coalesced, dense gradients added) and
    # amplified by lr 2 over 40 steps: ~2e-8 apart; a lazy update that differed would be ~1e-2.
    np.testing.assert_allclose(sparse_metrics["value"], dense_metrics["value"], rtol=1e-7)
    # It learned: the held-out RMSE fell.
    rmse = dense_metrics[dense_metrics["metric"] == "test_rmse"]["value"].tolist()
    assert rmse[-1] < rmse[0]
    # Adam's dense (exact) and SparseAdam's lazy semantics do differ.
    _, adam = ratings_run(tmp_path, "adam", "optimizer=adam", "optimizer.lr=0.01")
    _, lazy = ratings_run(
        tmp_path, "lazy", "optimizer=adam", "problem.tables=sparse_adam", "problem.table_lr=0.01"
    )
    assert not np.allclose(adam["value"], lazy["value"], rtol=1e-6)


def test_the_mixed_setup_steps_both_optimizers(tmp_path):
    record, metrics = ratings_run(
        tmp_path,
        "ncf",
        "model=ncf",
        "model.hidden=[16]",
        "optimizer=adam",
        "problem.tables=sparse_adam",
    )
    assert record["status"] == "completed"
    assert {"train_rmse", "test_rmse", "test_truth_rmse", "lr"} <= set(metrics["metric"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,message",
    [
        (["data.num_users=100000000000"], "need about"),
        (["model.dim=0"], "model.dim must be a positive integer"),
        (["problem.tables=lazy"], "problem.tables must be one of"),
    ],
)
def test_bad_ratings_settings_are_one_line_and_nothing_written(tmp_path, overrides, message):
    result = run_cli(*RATINGS_RUN, *overrides, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert not list(tmp_path.rglob("run.json"))


@pytest.mark.slow
@pytest.mark.parametrize("text", ["", "userId,movieId,rating,timestamp\n1,2\n"])
def test_a_bad_ratings_file_from_the_command_line_is_one_line(tmp_path, text):
    path = tmp_path / "ratings.csv"
    path.write_text(text)
    result = run_cli(
        "+problem=ratings",
        "data=movielens",
        f"data.path={path}",
        "model=mf",
        "train.iterations=10",
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("harness-train: error: ") and result.stderr.count("\n") == 1
    assert not list(tmp_path.rglob("run.json"))


def test_validation_interactions_are_held_out_of_training_and_evaluated():
    from harness.problems.ratings.data import synthetic_ratings

    kwargs = {"num_users": 300, "num_items": 50, "num_interactions": 5000, "seed": 3}
    before = synthetic_ratings(**kwargs)  # no validation: the split drawn before it existed
    data = synthetic_ratings(**kwargs, val_size=400)
    assert before.ratings_val is None and len(data.ratings_val) == 400
    assert len(data) == len(before) - 400 and torch.equal(data.ratings_test, before.ratings_test)

    def pairs(users, items, ratings):
        return set(zip(users.tolist(), items.tolist(), ratings.tolist(), strict=True))

    train = pairs(data.users_train, data.items_train, data.ratings_train)
    val = pairs(*data.split("val"))
    assert val <= pairs(before.users_train, before.items_train, before.ratings_train)
    assert not val & train and not val & pairs(*data.split("test"))
    again = synthetic_ratings(**kwargs, val_size=400)
    assert torch.equal(again.ratings_val, data.ratings_val)  # fixed by the data's seed
    # The noiseless truth of the validation ratings is kept, as the test ratings' is.
    assert data.truth_val.shape == data.ratings_val.shape
    assert float((data.ratings_val - data.truth_val).std()) == pytest.approx(0.5, rel=0.15)
    with pytest.raises(DataError, match=r"data.val_size \(4500\) leaves no training"):
        synthetic_ratings(**kwargs, val_size=4500)


def test_the_validation_interactions_are_the_same_for_every_run_seed():
    from harness.problems import problem_of

    def val(*overrides):
        cfg = compose_config([*RATINGS_RUN, *overrides])
        data = problem_of(cfg).load(cfg)
        return torch.stack([data.users_val, data.items_val]), data.ratings_val

    users_items, ratings = val("seed=0")
    other_run = val("seed=7")
    assert torch.equal(other_run[0], users_items) and torch.equal(other_run[1], ratings)
    other_data = val("seed=0", "data.seed=1")  # the data's seed draws them
    assert not torch.equal(other_data[1], ratings)


def test_a_ratings_run_records_its_validation_rmse(tmp_path):
    record, metrics = ratings_run(tmp_path, "val", "optimizer=adam", "optimizer.lr=0.01")
    assert {"val_loss", "val_rmse", "val_truth_rmse"} <= set(metrics["metric"])
    final = record["final"]
    val = metrics[metrics["metric"] == "val_rmse"].set_index("iteration")["value"]
    test = metrics[metrics["metric"] == "test_rmse"].set_index("iteration")["value"]
    assert list(val.index) == list(test.index) == [0, 20, 40]  # at every evaluation
    assert final["val_rmse"] == val.iloc[-1] and final["best_val_rmse"] == val.min()
    assert val.iloc[-1] < val.iloc[0]  # it learned, and validation saw it
    assert not np.isclose(val, test).any()  # the validation interactions, not the test ones


@pytest.mark.slow
@pytest.mark.parametrize(
    "value,message",
    [
        ("-1", "data.val_size must be >= 0, got -1"),
        ("0.5", "data.val_size must be an integer, got 0.5"),
        ("18000", "data.val_size (18000) leaves no training interactions of the 18000"),
    ],
)
def test_bad_ratings_validation_is_one_line(tmp_path, value, message):
    out = tmp_path / "run"
    result = run_cli(*RATINGS_RUN, f"data.val_size={value}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr and not out.exists()


@pytest.mark.slow
def test_a_ratings_report_takes_an_rmse_target_and_refuses_a_negative_one(tmp_path, capsys):
    from harness import report

    for name, lr in (("a", "0.05"), ("b", "0.1")):
        ratings_run(tmp_path / "sweep", name, f"optimizer.lr={lr}")
    report.main([str(tmp_path / "sweep"), "--target", "1.5", "--out", str(tmp_path / "out")])
    assert "1.5" in (tmp_path / "out" / "summary.md").read_text()
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(tmp_path / "sweep"), "--target", "-1", "--out", str(tmp_path / "bad")])
    assert exit_info.value.code == 2
    assert "--target is a rmse here, a value > 0; got -1.0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
