"""Settings chosen by a tuning study, passed to the evaluation phase by the harness itself.

An evaluation preset names the tuning study and the keys it takes from it:

    tune:
      source: results/course_tune     # the tuning study's folder
      phase_keys: [train.eval_every]  # where evaluation may differ from tuning (beside the seed)
    optimizer:
      lr: ${tuned:optimizer.lr}

`${tuned:KEY}` resolves, for each job, to the value of KEY in the configuration the tuning study
chose for that job: among the tuning runs whose configs equal the job's in everything but the
tuned keys (every key written `${tuned:...}`), the seed and the phase keys, the best by the
validation metric (`harness.analysis.best_configs`: a config with a diverged seed never wins;
ties go to the lower training loss, then the smaller learning rate). The test set never chooses.
The evaluation sweep writes the chosen settings and the rule into its folder (`selection.md`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from harness import analysis, storage
from harness.config.identity import flat_config, identity_config, identity_hash
from harness.errors import ConfigError
from harness.markdown import markdown_table
from harness.results import load_runs, planned_by_last_invocation
from harness.tuning.lineage import lineage

RESOLVER = "tuned"
SELECTION_FILE = "selection.md"


def tuned_keys(config: dict[str, Any]) -> list[str]:
    """The dotted keys of an unresolved config whose value is `${tuned:...}`."""
    return sorted(k for k, v in flat_config(config).items() if str(v).startswith(f"${{{RESOLVER}:"))


def group_of(identity: dict[str, Any], dropped: list[str]) -> str:
    """The hash of an identity with the tuned and phase keys left out: the group of tuning
    runs one choice is made among."""
    return identity_hash(
        {
            k: v
            for k, v in identity.items()
            if not any(k == d or k.startswith(f"{d}.") for d in dropped)
        }
    )


@functools.lru_cache(maxsize=4)
def _tuning_runs(source: str, stamp: tuple) -> pd.DataFrame:
    return load_runs(source)


def tuning_runs(source: str) -> pd.DataFrame:
    """The runs of the tuning study in `source` (read once per process while its consolidated
    table is unchanged); a one-line ConfigError if it has not finished every run it plans."""
    folder = Path(source)
    if not folder.is_dir():
        raise ConfigError(f"tune.source={source} is not a folder: run the tuning study first")
    runs = _tuning_runs(str(folder.resolve()), storage.stamp(folder))
    if runs.empty:
        raise ConfigError(
            f"tune.source={source} holds no finished runs: run the tuning study first"
        )
    if not analysis.has_validation(runs):
        raise ConfigError(
            f"tune.source={source} has no validation split: its choices would be made on the "
            "test set; run it again with data.val_size > 0"
        )
    # a choice among fewer trials than the study plans is not its protocol's choice
    planned = planned_by_last_invocation(folder)
    if planned is not None and len(runs) < planned:
        raise ConfigError(
            f"tune.source={source} is unfinished: {len(runs)} of the {planned} runs it plans "
            "have finished; resume it first (its own command trains only what is missing)"
        )
    return runs


def choose(runs: pd.DataFrame, keys: list[str], phase_keys: list[str]) -> pd.DataFrame:
    """Per group of tuning runs (configs equal but for `keys`, the seed and `phase_keys`): the
    chosen config's summary row (best_configs, on the validation metric), with `group`, the
    group's hash, and `n_trials`."""
    dropped = [*keys, *phase_keys]
    groups = [group_of(json.loads(c), dropped) for c in runs["config"]]
    summary = analysis.summarize(runs.assign(_group=groups))
    summary["group"] = summary["config_id"].map(dict(zip(runs["config_id"], groups, strict=True)))
    trials = summary.groupby("group")["config_id"].nunique()
    # a group's trials may differ in the phase keys too (a shortlist's, at another length)
    best = analysis.best_configs(summary, tune=[*keys, *phase_keys])
    return best.assign(n_trials=best["group"].map(trials))


def edges(source: str | Path, key: str, dropped: list[str] | None = None) -> dict[str, str]:
    """Per group of the tuning runs in `source` (configs equal but for `dropped`, by default
    `key`, and the seed: a search over more keys than the rate drops them all) whose chosen
    config (`choose`: validation only) holds the smallest or the largest value of `key` the
    group tried, of two or more: "low" or "high" (not where every trial ends alike)."""
    runs = load_runs(source)
    dropped = dropped or [key]
    chosen = choose(runs, dropped, [])
    sides = _sides(runs, _picked_configs(runs, chosen), key, dropped)
    return {g: side for g, side in zip(chosen["group"], sides, strict=True) if side in SIDES}


def pick_sides(runs: pd.DataFrame, chosen: pd.DataFrame, key: str) -> list[str | None]:
    """For each pick of `choose(runs, [key], [])`: "low" or "high" where it holds the smallest
    or largest value of `key` its group tried, ALIKE where the group's trials all end alike on
    the selection metric (per config, the mean over its seeds), else None."""
    return _sides(runs, _picked_configs(runs, chosen), key, [key])


def _picked_configs(runs: pd.DataFrame, chosen: pd.DataFrame) -> list[dict[str, Any]]:
    """The config of each chosen row (of `choose`)."""
    configs = _configs(runs)
    return [json.loads(configs[c]) for c in chosen["config_id"]]


# A pick in a group whose trials all end alike on the selection metric: no edge, since the key
# moves nothing (the Muon family's AdamW part trains net1's only layer at its own rate) and the
# pick is the tie-break's; searching beyond it would train trials for nothing.
ALIKE = "alike"
SIDES = ("low", "high")


def _sides(
    searched: pd.DataFrame, picks: list[dict[str, Any]], key: str, dropped: list[str]
) -> list[str | None]:
    """For each picked config: "low" or "high" where its value of `key` is the smallest or
    largest its group (configs equal but for `dropped` and the seed) tried in the runs
    `searched`, of two or more values; ALIKE where the group's trials all end alike; else
    None."""
    configs = _configs(searched)
    groups = [group_of(json.loads(c), dropped) for c in configs]
    metric = searched.groupby("config_id")[analysis.selection_metric(searched)].mean()
    tried = pd.DataFrame(
        {
            "value": [json.loads(c).get(key) for c in configs],
            "metric": metric.reindex(configs.index).to_numpy(),
        }
    ).groupby(groups)
    values = tried["value"].agg(["min", "max", "nunique"])
    alike = tried["metric"].agg(lambda m: m.notna().all() and m.nunique() == 1)
    sides = []
    for pick in picks:
        group, value = group_of(pick, dropped), pick.get(key)
        if group not in values.index or values.loc[group, "nunique"] < 2:
            sides.append(None)
        elif alike[group]:
            sides.append(ALIKE)
        else:
            low, high = values.loc[group, "min"], values.loc[group, "max"]
            sides.append("low" if value == low else "high" if value == high else None)
    return sides


def searched_study(source: str) -> tuple[str, pd.DataFrame, list[str]]:
    """The study that drew the trials of the tuning study in `source`, its runs, and the phase
    keys in which its trials differ from `source`'s (`lineage`): `source` itself where it drew
    them; where it is a shortlist, the study it shortlisted from, followed back. A shortlist's
    trials are that search's best few, and the smallest of three is no edge of the search (of
    the zoo's 402 picks, 302 are an edge of their shortlist, 20 of the search)."""
    traced = lineage(source)
    return str(traced.last.folder), tuning_runs(str(traced.last.folder)), traced.phase_keys


def shortlist(
    source: str, identity: dict[str, Any], keys: list[str], phase_keys: list[str], top: int
) -> list[dict[str, Any]]:
    """The values of `keys` in the `top` best configurations of the tuning study in `source`
    for the config whose identity is `identity` (its tuned and phase keys are left out), best
    first, by the rule that chooses (`analysis.rank_configs`: validation only); fewer where the
    study tried fewer. ConfigError (one line) when the study has no run of that config."""
    runs = tuning_runs(source)
    ranked = _ranked(id(runs), runs, tuple(keys), tuple(phase_keys))
    mine = ranked.get(group_of(identity, [*keys, *phase_keys]))
    if mine is None:
        raise ConfigError(
            f"no tuning run in {source} has this config but for {', '.join(keys)}, the seed and "
            f"{', '.join(phase_keys) or 'nothing else'}"
        )
    return [{k: _value(row, runs, k) for k in keys} for _, row in mine.head(top).iterrows()]


_RANKED: dict[tuple, dict[str, pd.DataFrame]] = {}


def _ranked(runs_id: int, runs: pd.DataFrame, keys: tuple, phase_keys: tuple) -> dict:
    """Per group of tuning runs (configs equal but for `keys`, the seed and `phase_keys`): its
    configs' summary rows, best first by the rule that chooses. Once per tuning table and keys:
    a shortlist asks for every combination of its sweep (400 for the zoo, which read and
    grouped the whole table each time: 55 % of its planning)."""
    key = (runs_id, keys, phase_keys)
    if key not in _RANKED:
        _RANKED.clear()  # a newer table: the old rankings are stale
        dropped = [*keys, *phase_keys]
        groups = {c: group_of(json.loads(config), dropped) for c, config in _configs(runs).items()}
        summary = analysis.summarize(runs)
        summary["group"] = summary["config_id"].map(groups)
        # ranked once: the rule's order within a group is its order in the whole table
        ranked = analysis.rank_configs(summary, tune=list(keys))
        _RANKED[key] = dict(list(ranked.groupby("group", sort=False)))
    return _RANKED[key]


def _configs(runs: pd.DataFrame) -> pd.Series:
    """Each config's stored config, by config_id."""
    return runs.drop_duplicates("config_id").set_index("config_id")["config"]


_CHOSEN: dict[tuple, pd.DataFrame] = {}


def _chosen(runs_id: int, runs: pd.DataFrame, keys: tuple, phase_keys: tuple) -> pd.DataFrame:
    """`choose`, once per tuning table and keys (every job of an evaluation sweep asks)."""
    key = (runs_id, keys, phase_keys)
    if key not in _CHOSEN:
        _CHOSEN.clear()  # a newer table: the old choices are stale
        _CHOSEN[key] = choose(runs, list(keys), list(phase_keys))
    return _CHOSEN[key]


def _value(row: pd.Series, runs: pd.DataFrame, key: str) -> Any:
    """The value of `key` in the config of `row`: None where it has none (ALIG has no `lr`)."""
    config = json.loads(runs.loc[runs["config_id"] == row["config_id"], "config"].iloc[0])
    return config.get(key)


def resolve_tuned(key: str, *, _root_: DictConfig) -> Any:
    """The `tuned` resolver: see the module's docstring."""
    tune = _root_.get("tune") or {}
    source, phase_keys = tune.get("source"), list(tune.get("phase_keys") or [])
    if not source:
        raise ConfigError(f"${{tuned:{key}}} needs tune.source, the tuning study's folder")
    raw = OmegaConf.to_container(_root_, resolve=False)
    raw.pop("hydra", None)
    keys = tuned_keys(raw)
    for dotted in keys:  # resolve the rest without the values being chosen
        *parents, leaf = dotted.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node.pop(leaf)
    identity = identity_config(OmegaConf.to_container(OmegaConf.create(raw), resolve=True))
    runs = tuning_runs(str(source))
    chosen = _chosen(id(runs), runs, tuple(keys), tuple(phase_keys))
    match = chosen[chosen["group"] == group_of(identity, [*keys, *phase_keys])]
    if match.empty:
        choices = OmegaConf.select(_root_, "hydra.runtime.choices", default=None) or {}
        named = ", ".join(f"{g}={choices[g]}" for g in ("model", "optimizer") if g in choices)
        raise ConfigError(
            f"no tuning run in {source} has this job's config{f' ({named})' if named else ''} "
            f"but for {', '.join(keys)}, the seed and {', '.join(phase_keys) or 'nothing else'}"
        )
    return _value(match.iloc[0], runs, key)


def selection_table(source: str, keys: list[str], phase_keys: list[str]) -> pd.DataFrame:
    """The settings the tuning study in `source` chose, per group: the chosen values, their
    validation and test quality at the tuning length, and the number of trials."""
    runs = tuning_runs(source)
    chosen = choose(runs, keys, phase_keys)
    metric = analysis.selection_metric(chosen)
    test = analysis.final_quality(chosen)
    columns = ["net", "setting"]
    table = chosen[columns].copy()
    for key in keys:
        table[key] = [_value(row, runs, key) for _, row in chosen.iterrows()]
    table["n_trials"] = chosen["n_trials"]
    # A choice at the smallest or largest value the search tried: the best may lie beyond it.
    _, searched, search_phase_keys = searched_study(source)
    dropped = [*keys, *phase_keys, *search_phase_keys]
    picks = _picked_configs(runs, chosen)
    sides = {k: _sides(searched, picks, k, dropped) for k in keys}
    table["at the edge"] = [
        ", ".join(k for k in keys if sides[k][i] in SIDES)
        or ("(every trial alike)" if any(sides[k][i] == ALIKE for k in keys) else "")
        for i in range(len(table))
    ]
    table[metric] = chosen[f"{metric}_mean"]
    if f"{test}_mean" in chosen and test != metric:
        table[test] = chosen[f"{test}_mean"]
    return table.sort_values(columns, ignore_index=True)


def write_selection(sweep_dir: Path, config: DictConfig) -> None:
    """Record in an evaluation sweep's folder what its `${tuned:...}` keys resolve to, and the
    rule: `selection.md`."""
    raw = OmegaConf.to_container(config, resolve=False)
    raw.pop("hydra", None)
    keys = tuned_keys(raw)
    tune = config.get("tune") or {}
    if not keys or not tune.get("source"):
        return
    source, phase_keys = str(tune.source), list(tune.get("phase_keys") or [])
    table = selection_table(source, keys, phase_keys)
    metric = analysis.selection_metric(tuning_runs(source))
    searched = searched_study(source)[0]
    lines = [
        f"# Settings chosen by the tuning study in `{source}`",
        "",
        f"{', '.join(f'`{k}`' for k in keys)} of each configuration: the tuning trial with the "
        f"best mean `{metric}` over its seeds among those that differ only in these keys "
        f"(and the seed{', ' + ', '.join(phase_keys) if phase_keys else ''}); a trial with a "
        "diverged seed never wins; ties go to the lower final training loss, then the smaller "
        "learning rate (`harness.analysis.best_configs`). The test set chose nothing: its "
        "column only reports the chosen trial's test quality at the tuning length. 'At the "
        f"edge': the choice is the smallest or largest value the search (`{searched}`) tried "
        "for that key, so the best may lie beyond what was tried; '(every trial alike)': every "
        "trial of the search ended with the same validation quality, the key moves nothing and "
        "the choice is the tie-break's.",
        "",
        markdown_table(table, index=False),
        "",
    ]
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / SELECTION_FILE).write_text("\n".join(lines))
