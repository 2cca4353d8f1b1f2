"""Rating models: user and item embedding tables, then a dot product (matrix factorisation) or
a small MLP (neural collaborative filtering). Each table is an `nn.Embedding`; with
`sparse=True` its gradient is a sparse tensor holding only the rows of the batch, which sparse
optimizers (SparseAdam, Adagrad, SGD) update without touching the rest of the table."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from harness.errors import ConfigError


def _table(rows: int, dim: int, sparse: bool, generator: torch.Generator) -> nn.Embedding:
    table = nn.Embedding(rows, dim, sparse=sparse)
    with torch.no_grad():
        table.weight.normal_(0.0, 0.1, generator=generator)
    return table


class RatingModel(nn.Module):
    """Base: user and item tables (`tables()`), the dense rest (`dense_parameters()`), each
    placed on its own device (`place`): a lookup runs where its table is, and the rows it
    returns move to where the rest computes."""

    table_device = torch.device("cpu")
    dense_device = torch.device("cpu")

    def _tables(
        self, num_users: int, num_items: int, dim: int, mean: float, sparse: bool, generator
    ) -> torch.Generator:
        """Make the user and item tables and the mean rating; returns the generator the rest is
        initialised from (one stream: one seed, one model)."""
        if not isinstance(dim, int) or dim <= 0:
            raise ConfigError(f"model.dim must be a positive integer, got {dim!r}")
        generator = generator or torch.Generator().manual_seed(0)
        self.users = _table(num_users, dim, sparse, generator)
        self.items = _table(num_items, dim, sparse, generator)
        self.register_buffer("mean", torch.tensor(float(mean)))
        return generator

    def place(self, table_device: torch.device, dense_device: torch.device) -> RatingModel:
        self.to(dense_device)
        for table in self.modules():
            if isinstance(table, nn.Embedding):
                table.to(table_device)
        self.table_device, self.dense_device = table_device, dense_device
        return self

    def lookup(self, table: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return table(ids.to(self.table_device)).to(self.dense_device)

    def tables(self) -> list[nn.Parameter]:
        return [m.weight for m in self.modules() if isinstance(m, nn.Embedding)]

    def dense_parameters(self) -> list[nn.Parameter]:
        tables = {id(p) for p in self.tables()}
        return [p for p in self.parameters() if id(p) not in tables]


class MatrixFactorization(RatingModel):
    """rating ≈ mean + b_user + b_item + <u, v>; biases are one-column tables."""

    def __init__(
        self,
        num_users: int,
        num_items: int,
        dim: int,
        mean: float = 0.0,
        sparse: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        generator = self._tables(num_users, num_items, dim, mean, sparse, generator)
        self.user_bias = _table(num_users, 1, sparse, generator)
        self.item_bias = _table(num_items, 1, sparse, generator)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        u, v = self.lookup(self.users, users), self.lookup(self.items, items)
        bias = self.lookup(self.user_bias, users)[:, 0] + self.lookup(self.item_bias, items)[:, 0]
        return self.mean + bias + (u * v).sum(dim=1)


class NeuralCF(RatingModel):
    """rating ≈ mean + MLP([u, v]): the embeddings of a pair, concatenated, through ReLU layers."""

    def __init__(
        self,
        num_users: int,
        num_items: int,
        dim: int,
        hidden: Sequence[int] = (64,),
        mean: float = 0.0,
        sparse: bool = False,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        generator = self._tables(num_users, num_items, dim, mean, sparse, generator)
        sizes = [2 * dim, *hidden, 1]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
            linear = nn.Linear(fan_in, fan_out)
            bound = fan_in**-0.5  # PyTorch's default range, drawn from our generator
            with torch.no_grad():
                linear.weight.uniform_(-bound, bound, generator=generator)
                linear.bias.uniform_(-bound, bound, generator=generator)
            layers.append(linear)
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.mlp = nn.Sequential(*layers)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        pair = torch.cat([self.lookup(self.users, users), self.lookup(self.items, items)], dim=1)
        return self.mean + self.mlp(pair)[:, 0]
