"""Interactions (user, item, rating) as tensors: a seeded synthetic generator with a planted
low-rank truth, and a loader for MovieLens-format files.

Synthetic data: user and item popularity follow Zipf laws (a few users and items account for
most interactions, as in real logs), and each rating is the inner product of planted user and
item factors plus Gaussian noise. The noiseless part of the held-out ratings is kept
(`truth_val`, `truth_test`), so a model's error can be measured against the truth as well as
against the noisy ratings.

Both hold out, with their `seed`, a `test_fraction` of the interactions for testing and
`val_size` of the rest for validation: every choice (a rate, a best config) is made on the
validation interactions, the test interactions only report. The splits are part of the data,
the same for every run seed.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.errors import DataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Interactions:
    """Ratings split into training, validation (held out of the training interactions: empty
    when `data.val_size` is 0) and test interactions (index tensors and float ratings).

    `truth_val` and `truth_test` hold the noiseless ratings of the held-out splits of synthetic
    data (None for real data, and `truth_val` without validation interactions)."""

    users_train: torch.Tensor
    items_train: torch.Tensor
    ratings_train: torch.Tensor
    users_test: torch.Tensor
    items_test: torch.Tensor
    ratings_test: torch.Tensor
    num_users: int
    num_items: int
    truth_test: torch.Tensor | None = None
    users_val: torch.Tensor | None = None
    items_val: torch.Tensor | None = None
    ratings_val: torch.Tensor | None = None
    truth_val: torch.Tensor | None = None

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(users, items, ratings) of a held-out split: "val" or "test"."""
        if name == "val":
            return self.users_val, self.items_val, self.ratings_val
        return self.users_test, self.items_test, self.ratings_test

    def truth(self, name: str) -> torch.Tensor | None:
        """The noiseless ratings of a held-out split ("val" or "test"; None for real data)."""
        return self.truth_val if name == "val" else self.truth_test

    def __len__(self) -> int:
        return len(self.ratings_train)

    @property
    def mean_rating(self) -> float:
        return float(self.ratings_train.mean())

    def to(self, device: torch.device, dtype: torch.dtype) -> Interactions:
        def move(t: torch.Tensor | None, floating: bool) -> torch.Tensor | None:
            if t is None:
                return None
            return t.to(device=device, dtype=dtype) if floating else t.to(device=device)

        return Interactions(
            move(self.users_train, False),
            move(self.items_train, False),
            move(self.ratings_train, True),
            move(self.users_test, False),
            move(self.items_test, False),
            move(self.ratings_test, True),
            self.num_users,
            self.num_items,
            move(self.truth_test, True),
            move(self.users_val, False),
            move(self.items_val, False),
            move(self.ratings_val, True),
            move(self.truth_val, True),
        )


def _zipf_draws(rng: np.random.Generator, n: int, size: int, exponent: float) -> np.ndarray:
    """`size` draws of ids 0..n-1 with P(id) ∝ 1 / (rank + 1)^exponent, ranks shuffled so that
    popularity is not tied to the id."""
    weights = 1.0 / np.arange(1, n + 1) ** exponent
    ids = rng.choice(n, size=size, p=weights / weights.sum())
    return rng.permutation(n)[ids]


def _split(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    order = rng.permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    if n_test >= n:
        raise DataError(f"{n} interactions are too few to hold out {test_fraction:.0%} of them")
    return order[n_test:], order[:n_test]


def _hold_out(train: np.ndarray, val_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(training, validation) interactions: `val_size` of the training ones held out at random,
    from a stream of their own (the train/test split, and with val_size 0 the training
    interactions, are those drawn before validation existed)."""
    if not isinstance(val_size, int) or isinstance(val_size, bool) or val_size < 0:
        raise DataError(f"data.val_size must be an integer >= 0, got {val_size!r}")
    if val_size >= len(train):
        raise DataError(
            f"data.val_size ({val_size}) leaves no training interactions of the {len(train)} "
            "the test split leaves"
        )
    chosen = np.sort(np.random.default_rng([seed, 1]).permutation(len(train))[:val_size])
    return np.delete(train, chosen), train[chosen]


def synthetic_ratings(
    num_users: int,
    num_items: int,
    num_interactions: int,
    rank: int = 8,
    user_exponent: float = 1.0,
    item_exponent: float = 1.0,
    noise: float = 0.5,
    test_fraction: float = 0.1,
    seed: int = 0,
    val_size: int = 0,
) -> Interactions:
    """Seeded interactions: Zipf-popular users and items, ratings from planted rank-`rank`
    factors (entries N(0, 1/√rank), so a rating has unit variance before noise) plus N(0, noise²)
    noise; `test_fraction` of them held out for testing, and `val_size` of the rest for
    validation."""
    for name, value in {
        "num_users": num_users,
        "num_items": num_items,
        "num_interactions": num_interactions,
        "rank": rank,
    }.items():
        if not isinstance(value, int) or value < 1:
            raise DataError(f"data.{name} must be a positive integer, got {value!r}")
    rng = np.random.default_rng(seed)
    users = _zipf_draws(rng, num_users, num_interactions, user_exponent)
    items = _zipf_draws(rng, num_items, num_interactions, item_exponent)
    # Factors are drawn only for the users and items that occur: a 10^7-row table needs no
    # 10^7 x rank truth in memory.
    seen_users, user_index = np.unique(users, return_inverse=True)
    seen_items, item_index = np.unique(items, return_inverse=True)
    scale = 1.0 / np.sqrt(np.sqrt(rank))
    user_factors = rng.normal(0.0, scale, size=(len(seen_users), rank))
    item_factors = rng.normal(0.0, scale, size=(len(seen_items), rank))
    truth = np.einsum("nr,nr->n", user_factors[user_index], item_factors[item_index])
    ratings = truth + rng.normal(0.0, noise, size=num_interactions)
    train, test = _split(num_interactions, test_fraction, rng)
    train, val = _hold_out(train, val_size, seed)
    return _interactions(users, items, ratings, train, test, num_users, num_items, truth, val)


def _interactions(users, items, ratings, train, test, num_users, num_items, truth=None, val=()):
    def t(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype)

    has_val = len(val) > 0
    return Interactions(
        t(users[train], torch.int64),
        t(items[train], torch.int64),
        t(ratings[train], torch.float32),
        t(users[test], torch.int64),
        t(items[test], torch.int64),
        t(ratings[test], torch.float32),
        int(num_users),
        int(num_items),
        None if truth is None else t(truth[test], torch.float32),
        t(users[val], torch.int64) if has_val else None,
        t(items[val], torch.int64) if has_val else None,
        t(ratings[val], torch.float32) if has_val else None,
        None if truth is None or not has_val else t(truth[val], torch.float32),
    )


def _read_rows(path: Path) -> list[tuple[str, str, str]]:
    """(user, item, rating) strings of a MovieLens file: `ratings.csv` (comma-separated, with a
    header: userId,movieId,rating,timestamp) or `u.data` (tab-separated, no header)."""
    with path.open(newline="") as file:
        if path.suffix == ".csv":
            reader = csv.reader(file)
            header = next(reader, None)
            if header is None:
                raise DataError(f"{path} is empty")
            if [h.strip() for h in header[:3]] != ["userId", "movieId", "rating"]:
                raise DataError(
                    f"{path}: expected the header userId,movieId,rating,..., got {','.join(header)}"
                )
            first = 2
        else:
            reader = csv.reader(file, delimiter="\t")
            first = 1
        rows = []
        for line, row in enumerate(reader, start=first):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise DataError(f"{path}, line {line}: expected user, item, rating; got {row}")
            rows.append((row[0], row[1], row[2]))
    if not rows:
        raise DataError(f"{path} holds no ratings")
    return rows


def load_movielens(
    path: str | Path, test_fraction: float = 0.1, seed: int = 0, val_size: int = 0
) -> Interactions:
    """Ratings from a MovieLens-format file (`ratings.csv` or `u.data`), user and item ids
    renumbered 0..n-1, `test_fraction` held out at random (seeded) for testing and `val_size`
    of the rest for validation."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no ratings file at {path} (expected ratings.csv or u.data)")
    rows = _read_rows(path)
    try:
        ratings = np.array([float(r) for _, _, r in rows])
    except ValueError as exc:
        raise DataError(f"{path}: a rating is not a number ({exc})") from None
    users, user_ids = np.unique([u for u, _, _ in rows], return_inverse=True)
    items, item_ids = np.unique([i for _, i, _ in rows], return_inverse=True)
    rng = np.random.default_rng(seed)
    train, test = _split(len(rows), test_fraction, rng)
    train, val = _hold_out(train, val_size, seed)
    log.info("%s: %d ratings of %d items by %d users", path, len(rows), len(items), len(users))
    return _interactions(user_ids, item_ids, ratings, train, test, len(users), len(items), val=val)
