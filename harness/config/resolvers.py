"""OmegaConf resolvers the configs use: registered when the package is imported, so that every
way of composing a config (harness-train, the tests, a notebook) resolves them the same way."""

from __future__ import annotations

import math

from omegaconf import OmegaConf

from harness.config.identity import folder_excluded_keys

# How a learning rate scales with the batch size, relative to a reference batch size.
LR_SCALING = {
    "none": lambda ratio: 1.0,
    "linear": lambda ratio: ratio,  # Goyal et al. 2017: keep lr / batch constant
    "sqrt": math.sqrt,  # Krizhevsky 2014, Hoffer et al. 2017: keep the update's variance
}


def scaled_lr(base: float, batch_size: int, rule: str, reference: int = 128) -> float:
    """`base` (the rate at `reference` examples per step) scaled to `batch_size` by `rule`."""
    if rule not in LR_SCALING:
        raise ValueError(f"lr scaling rule must be one of {', '.join(LR_SCALING)}, got {rule!r}")
    return float(base) * LR_SCALING[rule](batch_size / reference)


def at(table, key):
    """`table[key]`: a value looked up by another value (interpolations can only name keys):
    `${at:${lookup.eval_every},${train.batch_size}}`."""
    if key not in table:
        raise KeyError(f"{key!r} is not in the table {OmegaConf.to_container(table)}")
    return table[key]


def space_of(optimizer: str, key: str, spaces):
    """The range of `key` in the search space `tune.space` declares for the optimizer choice
    `optimizer` (its own entry, else `default`), for Hydra's Optuna sweeper:
    `optimizer.lr: ${space_of:${hydra:runtime.choices.optimizer},optimizer.lr,${tune.space}}`."""
    space = spaces[optimizer] if optimizer in spaces else spaces["default"]
    if key not in space:
        raise KeyError(f"tune.space for {optimizer} does not search {key}")
    return space[key]


OmegaConf.register_new_resolver("space_of", space_of, replace=True)
OmegaConf.register_new_resolver("scaled_lr", scaled_lr, replace=True)
OmegaConf.register_new_resolver("at", at, replace=True)
OmegaConf.register_new_resolver("folder_excluded_keys", folder_excluded_keys, replace=True)
