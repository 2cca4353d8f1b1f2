"""What the report's figure modules share beyond the style: the exception of a figure a
sweep cannot have (and `show`, which prints it in a notebook), texts of a figure's title, and
which settings a zoo's figure draws in colour."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from harness import analysis
from harness.style import SPLIT_NAMES, Study, focused, natural_key, target_text


class Skipped(Exception):
    """A figure the sweep's data does not support; the message says why."""


def show(make: Callable[..., Figure], *args, **kwargs) -> Figure | None:
    """For notebooks: the figure, or None after printing why the sweep cannot have it."""
    try:
        return make(*args, **kwargs)
    except Skipped as exc:
        print(f"Figure skipped: {exc}")
        return None


def fixed_text(frame: pd.DataFrame) -> str:
    """What every line of a figure shares, stated once: 'schedule constant, batch 128, ...'."""
    names = {"batch_size": "batch", "iterations": "iterations", "momentum": "momentum"}
    parts = []
    for key, value in analysis.fixed_settings(frame).items():
        if key == "iterations":
            parts.append(f"{int(value):,} iterations")
        else:
            parts.append(
                f"{names.get(key, key)} {value:g}" if key != "schedule" else f"{value} schedule"
            )
    return ", ".join(parts)


def target_split(target_summary: pd.DataFrame) -> str:
    """The split a time-to-target table was measured on (its `metric`: val_accuracy, ...)."""
    if "metric" in target_summary and len(target_summary):
        return str(target_summary["metric"].iloc[0]).split("_", 1)[0]
    return "test"


@analysis.remembered
def ranked_by_selection(configs: pd.DataFrame, net: str) -> list[str]:
    """A net's settings, best first by the selection rule (validation quality,
    `analysis.rank_configs`). `configs`: a summary's best configs, one row per net and setting."""
    return analysis.rank_configs(configs[configs["net"] == net])["setting"].tolist()


def focus_by_selection(configs: pd.DataFrame, nets: Sequence[str]) -> dict[str, list[str]]:
    """Per net, the settings a figure draws in colour (`style.focused`): all of them when the
    figure has few; for a zoo, the best by the selection rule (`ranked_by_selection`) and the
    course's best. `configs`: a summary's best configs, one row per net and setting."""
    settings = configs["setting"].nunique()
    optimizer_of = dict(zip(configs["setting"], configs["optimizer"], strict=False))
    return {net: focused(ranked_by_selection(configs, net), optimizer_of, settings) for net in nets}


def shown_anywhere(focus: dict[str, list[str]]) -> list[str]:
    """The settings any panel of a figure draws in colour: they get its colours and legend."""
    return list(dict.fromkeys(s for shown in focus.values() for s in shown))


@analysis.remembered
def study_of(runs: pd.DataFrame) -> Study:
    """The look and display name of each optimizer of a study, worked out once and passed to
    every figure of its report (`harness.style.study.Study`): the optimizers ordered by their
    best place on any net by the selection rule (validation), so that the ones a figure is most
    likely to show in colour take the palette's solid lines; each named by its class
    (`optimizer._target_` of its runs' config)."""
    _, best = analysis.best_at_reference_batch(runs)
    places: dict[str, int] = {}
    for net in best["net"].unique():
        ranked = analysis.rank_configs(best[best["net"] == net])["optimizer"].tolist()
        for place, optimizer in enumerate(dict.fromkeys(ranked)):
            places[optimizer] = min(places.get(optimizer, place), place)
    every = list(dict.fromkeys(runs["optimizer"].astype(str)))
    ranked = sorted(every, key=lambda o: (places.get(o, len(every)), natural_key(o)))
    return Study.of(ranked, optimizer_targets(runs))


def optimizer_targets(runs: pd.DataFrame) -> dict[str, str]:
    """Each optimizer's class, the dotted `optimizer._target_` of its first run's config."""
    if "config" not in runs:
        return {}
    first = runs.drop_duplicates("optimizer")
    targets = {}
    for optimizer, config in zip(first["optimizer"].astype(str), first["config"], strict=True):
        try:
            target = json.loads(config).get("optimizer._target_")
        except (TypeError, ValueError):
            target = None
        if target:
            targets[optimizer] = str(target)
    return targets


def target_name(target, quality: str, split: str) -> str:
    """What a time-to-target figure's target is, in a few words: '97 % validation accuracy'
    for a fixed one, 'each net's target (validation accuracy)' for per-net targets."""
    if isinstance(target, Mapping):
        return f"each net's target ({SPLIT_NAMES[split]} {quality})"
    return target_text(target, quality, split)


def target_values(target, quality: str) -> str:
    """Per-net targets as a list ('net1 92.37 %, net2 97.48 %'); a fixed target's value."""
    if not isinstance(target, Mapping):
        return value_text(target, quality)
    return ", ".join(f"{net} {value_text(v, quality)}" for net, v in target.items())


def value_text(value: float, quality: str) -> str:
    return f"{value * 100:.2f} %" if quality == "accuracy" else f"{value:.4g}"


def target_rule(target, quality: str, split: str) -> str:
    """The sentence that says how the target was set."""
    if isinstance(target, Mapping):
        rule = analysis.TARGET_RULE.format(split=SPLIT_NAMES[split], quality=quality)
        return f"Target: {rule}: {target_values(target, quality)}."
    return f"Target: {target_text(target, quality, split)}, the same for every net (given)."
