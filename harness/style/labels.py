"""Words and numbers of every figure and table: metric and axis labels, nets' names and order,
the target's text, percentages, learning rates, seeds."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

METRIC_LABELS = {
    "train_loss": "training loss",
    "test_loss": "test loss",
    "batch_loss": "mini-batch loss",
    "test_accuracy": "test accuracy (%)",
    "test_rmse": "test RMSE",
    "train_rmse": "training RMSE",
    "test_truth_rmse": "RMSE against the noiseless truth",
    "final_test_rmse": "final test RMSE",
    "best_test_rmse": "best test RMSE",
    "step_time_s": "time per step (s)",
    "train_accuracy": "training accuracy (%)",
    "lr": "learning rate",
    "final_train_loss": "final training loss",
    "final_test_loss": "final test loss",
    "final_test_accuracy": "final test accuracy (%)",
    "best_test_accuracy": "best test accuracy (%)",
    "val_loss": "validation loss",
    "val_accuracy": "validation accuracy (%)",
    "val_rmse": "validation RMSE",
    "final_val_loss": "final validation loss",
    "final_val_accuracy": "final validation accuracy (%)",
    "best_val_accuracy": "best validation accuracy (%)",
    "final_val_rmse": "final validation RMSE",
    "best_val_rmse": "best validation RMSE",
    "train_time_s": "training time (s, evaluations excluded)",
    "wall_time_s": "wall time per run (s)",
}


X_LABELS = {
    "iteration": "iteration (optimizer steps)",
    "epoch": "epoch (passes over the training set)",
    "time_s": "training time (s, evaluations excluded)",
}


TARGET_LABELS = {
    "iterations_to_target": "iterations to target",
    "epochs_to_target": "epochs to target",
    "seconds_to_target": "training seconds to target",
}


PROFILE_LABELS = {
    "iterations_to_target": "iterations to target",
    "seconds_to_target": "training seconds to target",
    "final_train_loss": "final training loss",
}


# The loss of each quality metric's problem, as titles name it.
LOSS_NAMES = {"accuracy": "cross-entropy, nats", "rmse": "mean squared error"}


SPLIT_NAMES = {"val": "validation", "test": "test", "train": "training"}


def target_text(target: float, quality: str = "accuracy", split: str = "test") -> str:
    """'97 % validation accuracy', 'test rmse 0.9': a target of time to target, on the split
    it is measured on (the selection split: see analysis.time_to_target)."""
    if quality == "accuracy":
        return f"{percent(target)} {SPLIT_NAMES[split]} accuracy"
    return f"{SPLIT_NAMES[split]} {quality} {target:g}"


def percent(fraction: float) -> str:
    """0.97 -> '97 %'."""
    return f"{fraction * 100:.4g} %"


def natural_key(text: str):
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def net_order(frame: pd.DataFrame) -> list[str]:
    """Nets from the shallowest to the deepest, then by name."""
    layers = {
        net: 0 if hidden in ("none", "") else len(str(hidden).split("-"))
        for net, hidden in zip(frame["net"], frame["hidden"], strict=True)
    }
    return sorted(layers, key=lambda net: (layers[net], natural_key(net)))


def net_title(frame: pd.DataFrame, net: str) -> str:
    """'net2: hidden 100': a panel's title, with the net's hidden layer widths (a net whose
    label already names its varying model keys keeps its label)."""
    if ":" in net:
        return net
    hidden = str(frame.loc[frame["net"] == net, "hidden"].iloc[0])
    layers = "no hidden layer" if hidden in ("none", "") else f"hidden {hidden}"
    return f"{net}: {layers}"


def is_percent(metric: str) -> bool:
    return "accuracy" in metric


def scale(metric: str) -> float:
    """Plotted value = table value x scale (accuracies are drawn in %)."""
    return 100.0 if is_percent(metric) else 1.0


def lr_text(lr: float) -> str:
    """A learning rate as tables and legends show it; 'none' for an optimizer without one
    (A2Grad: its step size is its own schedule)."""
    return "none" if lr is None or lr != lr else f"{lr:.3g}"  # None or NaN: no lr


def seeds_text(n_seeds: Sequence[int]) -> str:
    n = sorted(set(int(k) for k in n_seeds))
    if not n:
        return "no seeds"
    if len(n) == 1:
        return f"{n[0]} seed" + ("s" if n[0] != 1 else "")
    return f"{n[0]}-{n[-1]} seeds"


def log_label(label: str) -> str:
    """'loss (nats)' -> 'loss (nats; log scale)'."""
    return label[:-1] + "; log scale)" if label.endswith(")") else label + " (log scale)"
