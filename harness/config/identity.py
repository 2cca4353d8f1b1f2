"""A run's identity, defined once: which config keys change what a run computes (the rest say
where or how fast it runs), the hash that finds a finished run again (`config_hash`), the
identity that groups seeds of one configuration (`identity_config`, `identity_hash`), the short
columns every table shows (`run_identity`), and the run folder's name (Hydra's
`override_dirname`, whose excluded keys `folder_excluded_keys` derives from the same rule)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.config.class_paths import recorded_flat, recorded_targets

# Config keys that say where or how fast a run executes, not what it computes: two runs that
# differ only in these are the same experiment.
EXECUTION_KEYS = (
    "device",
    "threads",
    "data.root",
    "train.progress",
    "train.engine",
    "train.cuda_graph",
    "sweep",
    "logger",  # the tracking tools a run streams to (conf/logger/)
)
# Tables that presets read values from (the course's learning rate per net and optimizer): what
# they feed (optimizer.lr) is in the config itself, so the tables are not part of what a run
# computes.
LOOKUP_KEY = "lookup"
# The tuning protocol's settings (search spaces, budget, where the chosen settings come from):
# they decide which configs run, and each run's config holds what was chosen.
TUNE_KEY = "tune"
NOT_COMPUTED_KEYS = (*EXECUTION_KEYS, LOOKUP_KEY, TUNE_KEY)
# Keys added after runs were recorded, with the value at which a run computes exactly what a
# run recorded without the key did: at that value the key is left out of the identity and the
# hash, so those runs keep their identity (and a sweep resumes over them).
NEUTRAL_VALUES = {"data.val_size": 0}
# The config-group choice of a preset: what it sets is in the config (and the identity) itself.
PRESET_GROUP = "experiment"

# Short columns of a run in every table, beside the config-group choices model, optimizer and
# schedule: {column: config key it shows}. Labels name a key by its short column.
SHORT_COLUMNS = {
    "lr": "optimizer.lr",
    "momentum": "optimizer.momentum",
    "batch_size": "train.batch_size",
    "hidden": "model.hidden",
    "seed": "seed",
}
# Config groups whose option name is a column: a key of the group that is the same for every
# run of one option (optimizer.betas for adam) is told by the name and not repeated in labels.
CHOICE_COLUMNS = ("model", "optimizer", "schedule")
# Columns that identify a run in every table, in this order.
ID_COLUMNS = [*CHOICE_COLUMNS, *SHORT_COLUMNS]


def _drop_key(config: dict, dotted: str) -> None:
    *parents, leaf = dotted.split(".")
    for part in parents:
        config = config.get(part, {})
    config.pop(leaf, None)


def _get_key(config: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(config, dict) or part not in config:
            return None
        config = config[part]
    return config


def config_hash(config: dict) -> str:
    """A stable hash of what a run computes (execution-only keys, lookup tables and neutral
    values of later keys left out; moved targets under the name they were recorded by)."""
    config = recorded_targets(config)  # a copy
    for key in NOT_COMPUTED_KEYS:
        _drop_key(config, key)
    for key, neutral in NEUTRAL_VALUES.items():
        if _get_key(config, key) == neutral:
            _drop_key(config, key)
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _readable(value: Any) -> Any:
    """A config value as a table cell: lists as '[a, b]' strings (as Hydra's overrides write
    them), scalars as they are."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(_readable(v)) for v in value) + "]"
    return value


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as {dotted key: readable value}."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat |= flat_config(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = _readable(value)
    return flat


def identity_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run's identity: every key of its resolved config that changes what it computes, except
    the seed (execution-only keys and lookup tables are left out), as {dotted key: value};
    moved targets under the name they were recorded by (`harness.config.class_paths`)."""
    flat = recorded_flat(flat_config(config))
    dropped = tuple(NOT_COMPUTED_KEYS) + ("seed",)
    return {
        k: v
        for k, v in flat.items()
        if not any(k == d or k.startswith(f"{d}.") for d in dropped)
        and not (k in NEUTRAL_VALUES and v == NEUTRAL_VALUES[k])
    }


def identity_hash(identity: dict[str, Any]) -> str:
    """`config_id`: runs with the same one are seeds of one configuration."""
    blob = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_id(cfg: DictConfig) -> str:
    """The `config_id` of a run's config (`identity_hash` of its `identity_config`): what a
    stack's seeds share an optimizer instance by, and the tables group seeds by."""
    return identity_hash(identity_config(OmegaConf.to_container(cfg, resolve=True)))


def run_identity(record: dict[str, Any]) -> dict[str, Any]:
    """The short identifying columns of a run (`ID_COLUMNS`), from its run.json record, and its
    depth (hidden layers); the full identity is `identity_config`'s."""
    config, choices = record["config"], record["choices"]
    optimizer, hidden = config["optimizer"], config["model"].get("hidden", [])
    return {
        **{column: choices.get(column) for column in CHOICE_COLUMNS},
        "lr": _number(optimizer.get("lr")),  # None: the optimizer sets its own (A2Grad, ALIG)
        "momentum": _number(optimizer.get("momentum")),
        "batch_size": int(config["train"]["batch_size"]),
        "hidden": "-".join(map(str, hidden)) or "none",
        "seed": int(config["seed"]),
        "depth": len(hidden),
    }


def override_key(override: str) -> str:
    """The config key a command-line override sets: `+optimizer.betas=[0.9,0.99]` ->
    `optimizer.betas`."""
    return override.split("=", 1)[0].lstrip("+~")


def executes(key: str) -> bool:
    """Whether config key `key` (dotted) says where or how fast a run executes: an execution
    key or inside one."""
    return any(key == k or key.startswith(f"{k}.") for k in EXECUTION_KEYS)


def computes(key: str) -> bool:
    """Whether config key `key` (dotted) can change what a run computes: not an execution key,
    a lookup table or the tuning protocol, nor inside one of them."""
    return not any(key == k or key.startswith(f"{k}.") for k in NOT_COMPUTED_KEYS)


def folder_excluded_keys(*, _root_) -> list[str]:
    """`${folder_excluded_keys:}`, Hydra's `override_dirname.exclude_keys`: the job's overrides
    that do not change what it computes (`computes`) and the preset's choice are left out of
    its run folder's name, so a resumed or re-run sweep finds its runs whatever the device,
    threads or data root."""
    overrides = _root_.hydra.overrides.task
    keys = [override_key(str(o)) for o in overrides]
    return [PRESET_GROUP, *(k for k in keys if not computes(k))]


def _number(value: Any) -> float:
    """A hyper-parameter as a table's float; NaN where the config has none."""
    return float("nan") if value is None else float(value)
