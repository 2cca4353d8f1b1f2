"""A class or function that moved keeps every committed run's identity: the configs name where it
lives now, and a committed run's config, with its targets where they live now, has the
`config_hash` and `config_id` its study recorded (so a resumed or re-run study finds it
finished). A config that names the old place still builds."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO
from harness.config.class_paths import MOVED_MODULES, build, located, target_object
from harness.config.identity import config_hash, identity_config, identity_hash

COMMITTED_TABLES = sorted((REPO / "results").glob("**/runs.parquet"))


def _cell(text: str):
    """One element of a list cell ('[0.9, 0.999]', '[None, 0.001]') as the config held it."""
    named = {"None": None, "True": True, "False": False}
    if text in named:
        return named[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def nested_config(identity: dict, seed: int) -> dict:
    """The config a run's recorded identity (`config`: flat, lists as text) and seed stand for."""
    config: dict = {"seed": seed}
    for key, value in identity.items():
        if isinstance(value, str) and value.startswith("["):
            inner = value[1:-1]
            assert "[" not in inner, f"{key}={value}: a nested list"
            value = [_cell(v) for v in inner.split(", ")] if inner else []
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return config


def conf_targets() -> dict[str, str]:
    """{dotted name: file} of every harness `_target_` the config files name."""
    targets = {}
    for path in sorted((REPO / "conf").rglob("*.yaml")):
        found = yaml.safe_load(path.read_text()) or {}
        target = found.get("_target_") if isinstance(found, dict) else None
        if isinstance(target, str) and target.startswith("harness."):
            targets[target] = str(path.relative_to(REPO))
    return targets


# What the config files name each class or function by today.
NAMED_BY_CONF = {target_object(t): t for t in conf_targets()}


def as_composed_today(config):
    """`config` with each `_target_` as the config files name its class today: a recorded name
    must still find its class (`target_object`), whatever the class is called by now."""
    if isinstance(config, dict):
        return {
            k: NAMED_BY_CONF.get(target_object(v), v) if k == "_target_" else as_composed_today(v)
            for k, v in config.items()
        }
    return config


def test_the_committed_studies_hold_runs_of_moved_targets():
    assert len(COMMITTED_TABLES) >= 10
    moved = 0
    for table in COMMITTED_TABLES:
        configs = pd.read_parquet(table, columns=["config"])["config"].drop_duplicates()
        moved += sum(any(f'"{m}.' in c for m in MOVED_MODULES) for c in configs)
    assert moved > 1000  # the MLPs of every MNIST study: the check below is not vacuous


@pytest.mark.parametrize("table", COMMITTED_TABLES, ids=lambda p: str(p.parent.relative_to(REPO)))
def test_a_committed_run_keeps_its_identity_where_its_targets_live_now(table: Path):
    runs = pd.read_parquet(table, columns=["config", "config_id", "config_hash", "seed"])
    for config_json, recorded_id, recorded_hash, seed in runs.itertuples(index=False):
        recorded = nested_config(json.loads(config_json), int(seed))
        now = as_composed_today(recorded)
        assert config_hash(recorded) == recorded_hash  # the reading of the table is exact
        assert config_hash(now) == recorded_hash, config_json
        assert identity_hash(identity_config(now)) == recorded_id, config_json


def test_every_target_the_configs_name_lives_where_they_name_it():
    targets = conf_targets()
    assert len(targets) >= 10
    for target, path in targets.items():
        assert located(target) == target, f"{path} names a moved {target}"
        assert callable(target_object(target)), target


@pytest.mark.parametrize("recorded", sorted(MOVED_MODULES))
def test_a_config_that_names_a_moved_module_still_finds_it(recorded: str):
    module = __import__(MOVED_MODULES[recorded], fromlist=["_"])
    names = [n for n, v in vars(module).items() if callable(v) and v.__module__ == module.__name__]
    assert names, module
    assert target_object(f"{recorded}.{names[0]}") is getattr(module, names[0])


def test_the_old_name_of_the_mlp_builds_the_mlp():
    node = {"_target_": "harness.models.MLP", "hidden": [4], "activations": ["relu"]}
    model = build(node, in_features=784, num_classes=10)
    assert type(model).__module__ == "harness.problems.classification.networks"
