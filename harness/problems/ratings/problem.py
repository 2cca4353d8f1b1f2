"""Ratings: user x item ratings learned through embedding tables (the sparse-gradient problem).

How the tables learn is the problem's `tables` setting:
* `dense`: the tables' gradients are dense tensors and `optimizer` updates every row at every
  step. With Adam this is Adam's exact semantics: the moments of a row absent from the batch
  still decay (and its weights still move on their momentum), so a step costs time in
  proportion to the whole table.
* `sparse_adam`, `adagrad`, `sgd`: the tables' gradients are sparse (only the batch's rows) and
  this optimizer updates them, while `optimizer` updates the dense rest (the MLP of NCF): the
  mixed setup. These updates are *lazy*: rows absent from the batch keep their moments as they
  were (SparseAdam's do not decay), which is not Adam's semantics; for SGD without momentum
  lazy and exact coincide. A step costs time in proportion to the batch.

`table_device` places the tables on the CPU while the rest trains on the run's device (or keeps
them with it: `same`), the usual advice for tables larger than device memory.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch.nn import functional as F

from harness.config.class_paths import build
from harness.config.devices import resolve_device
from harness.errors import ConfigError
from harness.problems import Problem
from harness.problems.ratings.data import Interactions

# The optimizers of sparse table gradients, by the name `tables` takes.
TABLE_OPTIMIZERS = {
    "sparse_adam": "torch.optim.SparseAdam",
    "adagrad": "torch.optim.Adagrad",
    "sgd": "torch.optim.SGD",
}
TABLES = ("dense", *TABLE_OPTIMIZERS)
TABLE_DEVICES = ("same", "cpu")
# Optimizer state tensors per parameter, by class name (unknown classes: assumed 2).
STATE_TENSORS = {"SGD": 0, "Adagrad": 1, "RMSprop": 1, "Adadelta": 2}
# Share of the available memory a run may plan to fill.
MEMORY_SHARE = 0.8


def available_bytes(device: torch.device) -> int:
    """Memory that can still be allocated on `device` (MemAvailable for the CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 2**63  # not Linux: no check


class Ratings(Problem):
    """Data: `data.Interactions`; model: `cfg.model` (MatrixFactorization or NeuralCF) built for
    the data's users and items; loss: mean squared error; metrics: RMSE on the held-out ratings
    (validation, `data.val_size` of the training interactions, and test) and, for synthetic
    data, against their noiseless truth."""

    quality = "rmse"
    higher_is_better = False

    def __init__(
        self, tables: str = "dense", table_lr: float | None = None, table_device: str = "same"
    ) -> None:
        self.tables, self.table_lr, self.table_device = tables, table_lr, table_device

    def check(self, cfg: DictConfig) -> None:
        if self.tables not in TABLES:
            raise ConfigError(
                f"problem.tables must be one of {', '.join(TABLES)}, got {self.tables!r}"
            )
        if self.table_device not in TABLE_DEVICES:
            raise ConfigError(
                f"problem.table_device must be one of {', '.join(TABLE_DEVICES)}, "
                f"got {self.table_device!r}"
            )
        if self.table_lr is not None and not (
            isinstance(self.table_lr, int | float) and self.table_lr > 0
        ):
            raise ConfigError(f"problem.table_lr must be > 0 or null, got {self.table_lr!r}")
        from harness.config.validate import require_int

        # Too large for the data is known once it is loaded (DataError, naming both numbers).
        require_int(cfg.data.get("val_size", 0), "data.val_size", minimum=0)
        dim = cfg.model.get("dim")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
            raise ConfigError(f"model.dim must be a positive integer, got {dim!r}")
        users, items = cfg.data.get("num_users"), cfg.data.get("num_items")
        if isinstance(users, int) and isinstance(items, int):  # synthetic: known before loading
            self._check_memory(cfg, users, items, resolve_device(cfg.device))

    def load(self, cfg: DictConfig) -> Interactions:
        return build(cfg.data)

    def to(self, data: Interactions, device: torch.device, dtype: torch.dtype) -> Interactions:
        return data.to(device, dtype)

    def size(self, data: Interactions) -> int:
        return len(data)

    def _table_device(self, device: torch.device) -> torch.device:
        return torch.device("cpu") if self.table_device == "cpu" else device

    def _check_memory(
        self, cfg: DictConfig, num_users: int, num_items: int, device: torch.device
    ) -> None:
        """Refuse, before allocating, tables that would not fit: weights, dense gradients and the
        optimizer's state, against the memory available where the tables live."""
        floats = (num_users + num_items) * (cfg.model.dim + 1)  # + the bias columns of MF
        optimizer = self._table_optimizer_target(cfg).rsplit(".", 1)[-1]
        states = STATE_TENSORS.get(optimizer, 2)
        if (
            optimizer == "SGD"
            and (cfg.optimizer.get("momentum") or 0) > 0
            and self.tables == "dense"
        ):
            states = 1
        copies = 1 + states + (1 if self.tables == "dense" else 0)
        needed = floats * copies * 4
        where = self._table_device(device)
        free = available_bytes(where)
        if needed > MEMORY_SHARE * free:
            raise ConfigError(
                f"embedding tables of {num_users:,} users and {num_items:,} items x "
                f"{cfg.model.dim} need about {needed / 2**30:.1f} GiB with {optimizer} "
                f"({copies} copies), more than {MEMORY_SHARE:.0%} of the "
                f"{free / 2**30:.1f} GiB available on {where}: use fewer rows or a smaller "
                "model.dim"
            )

    def _table_optimizer_target(self, cfg: DictConfig) -> str:
        return cfg.optimizer._target_ if self.tables == "dense" else TABLE_OPTIMIZERS[self.tables]

    def build_model(self, cfg: DictConfig, data: Interactions, generator: torch.Generator):
        device = data.ratings_train.device
        self._check_memory(cfg, data.num_users, data.num_items, device)
        model = build(
            cfg.model,
            num_users=data.num_users,
            num_items=data.num_items,
            mean=data.mean_rating,
            sparse=self.tables != "dense",
            generator=generator,
        )
        return model.place(self._table_device(device), device)

    def loss(self, model, data: Interactions, rows: torch.Tensor) -> torch.Tensor:
        predicted = model(data.users_train[rows], data.items_train[rows])
        return F.mse_loss(predicted, data.ratings_train[rows])

    @torch.no_grad()
    def evaluate(self, model, data: Interactions, split: str, rows: torch.Tensor | None) -> dict:
        """Mean squared error (the loss) and RMSE; on a held-out split of synthetic data also
        the RMSE against its noiseless truth."""
        if split == "train":
            users, items, ratings = (
                t[rows] for t in (data.users_train, data.items_train, data.ratings_train)
            )
        else:
            users, items, ratings = data.split(split)
        predicted = model(users, items)
        mse = F.mse_loss(predicted, ratings).item()
        metrics = {"loss": mse, "rmse": math.sqrt(mse)}
        truth = None if split == "train" else data.truth(split)
        if truth is not None:
            metrics["truth_rmse"] = math.sqrt(F.mse_loss(predicted, truth).item())
        return metrics

    def held_out(self, data: Interactions) -> tuple[str, ...]:
        return ("test",) if data.ratings_val is None else ("val", "test")

    def parameter_groups(self, cfg: DictConfig, model) -> list[tuple[list, DictConfig]]:
        if self.tables == "dense":
            return [(list(model.parameters()), cfg.optimizer)]
        table_optimizer = OmegaConf.create(
            {
                "_target_": TABLE_OPTIMIZERS[self.tables],
                "_partial_": True,
                "lr": self.table_lr if self.table_lr is not None else cfg.optimizer.lr,
            }
        )
        groups = [(model.tables(), table_optimizer)]
        if model.dense_parameters():
            groups.insert(0, (model.dense_parameters(), cfg.optimizer))
        return groups

    def flops(self, cfg: DictConfig) -> float:
        """A step's arithmetic on the batch, plus, for dense tables, the optimizer's pass over
        every row (~10 FLOPs per weight)."""
        dim = cfg.model.dim
        step = 6.0 * cfg.train.batch_size * dim * (1 + len(cfg.model.get("hidden", [])))
        if self.tables == "dense":
            rows = cfg.data.get("num_users", 0) + cfg.data.get("num_items", 0)
            step += 10.0 * rows * (dim + 1)
        return step
