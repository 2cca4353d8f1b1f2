"""The ratings workload: synthetic and MovieLens data, the rating models, bad input."""

import numpy as np
import pytest
import torch

from harness.errors import ConfigError, DataError
from harness.recsys.data import load_movielens, synthetic_ratings
from harness.recsys.models import MatrixFactorization, NeuralCF


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
    assert set(map(id, model.tables())) | set(map(id, model.dense_parameters())) == set(
        map(id, model.parameters())
    )
    assert model.dense_parameters() == []  # matrix factorisation: tables only
    assert len(NeuralCF(10, 10, 4).dense_parameters()) == 4  # the MLP's weights and biases
