"""Classification of MNIST digits by MLPs (the course's problem): cross-entropy loss, accuracy."""

from __future__ import annotations

import torch
from omegaconf import DictConfig
from torch.nn import functional as F

from harness.data import TensorData
from harness.engine import EVAL_CHUNK
from harness.errors import ConfigError
from harness.models import LENET_TARGET, lenet_multiply_adds
from harness.problems import Problem


class Classification(Problem):
    """Data: `harness.data.TensorData` (features and labels); model: `cfg.model`, built with the
    data's number of features and classes (harness.models.MLP for the course's nets)."""

    quality = "accuracy"
    higher_is_better = True
    stackable = True  # harness.stacked trains MLPs of one architecture together

    def load(self, cfg: DictConfig) -> TensorData:
        from harness.run import build

        return build(cfg.data)

    def to(self, data: TensorData, device: torch.device, dtype: torch.dtype) -> TensorData:
        return data.to(device, dtype)

    def size(self, data: TensorData) -> int:
        return len(data.y_train)

    def build_model(
        self, cfg: DictConfig, data: TensorData, generator: torch.Generator
    ) -> torch.nn.Module:
        from harness.run import build

        model = build(
            cfg.model,
            in_features=data.num_features,
            num_classes=data.num_classes,
            generator=generator,
        )
        return model.to(device=data.x_train.device, dtype=data.x_train.dtype)

    def loss(self, model: torch.nn.Module, data: TensorData, rows: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(data.x_train[rows]), data.y_train[rows])

    @torch.no_grad()
    def evaluate(
        self, model: torch.nn.Module, data: TensorData, split: str, rows: torch.Tensor | None
    ) -> dict[str, float]:
        """Mean cross-entropy and accuracy on the training rows `rows` or a held-out split."""
        if split == "train":
            x, y = data.x_train[rows], data.y_train[rows]
        else:
            x, y = data.split(split)
        loss_sum = torch.zeros((), device=x.device, dtype=torch.float64)
        correct = torch.zeros((), device=x.device, dtype=torch.int64)
        for start in range(0, len(y), EVAL_CHUNK):
            logits = model(x[start : start + EVAL_CHUNK])
            target = y[start : start + EVAL_CHUNK]
            loss_sum += F.cross_entropy(logits, target, reduction="sum").double()
            correct += (logits.argmax(1) == target).sum()
        return {"loss": loss_sum.item() / len(y), "accuracy": correct.item() / len(y)}

    def held_out(self, data: TensorData) -> tuple[str, ...]:
        return ("test",) if data.y_val is None else ("val", "test")

    def check(self, cfg: DictConfig) -> None:
        from harness.validate import validate_data, validate_model

        if str(cfg.model.get("_target_", "")).startswith("harness.recsys."):
            raise ConfigError(
                f"{cfg.model._target_} is a model of ratings: add +problem=ratings "
                "data=synthetic_ratings (or data=movielens)"
            )
        validate_model(cfg.model)
        validate_data(cfg.data)

    def flops(self, cfg: DictConfig, in_features: int = 784, classes: int = 10) -> float:
        """One training step (forward + backward) of an MLP: 2 FLOPs per multiply-add, forward,
        weight gradients, and input gradients of all layers but the first; of LeNet, three
        times its forward (other models count as an MLP of their `hidden`)."""
        if cfg.model.get("_target_") == LENET_TARGET:
            forward = lenet_multiply_adds(
                in_features, classes, cfg.model.channels, cfg.model.hidden
            )
            return 2.0 * 3 * cfg.train.batch_size * forward
        sizes = [in_features, *cfg.model.get("hidden", []), classes]
        weights = [a * b for a, b in zip(sizes, sizes[1:], strict=False)]
        return 2.0 * cfg.train.batch_size * (2 * sum(weights) + sum(weights[1:]))

    def short_columns(self, config: dict) -> dict:
        hidden = config["model"].get("hidden", [])
        return {"hidden": "-".join(map(str, hidden)) or "none", "depth": len(hidden)}
