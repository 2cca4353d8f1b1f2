"""What the report's figure modules share beyond the style: the exception of a figure a
sweep cannot have (and `show`, which prints it in a notebook), texts of a figure's title, and
which settings a zoo's figure draws in colour."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
from matplotlib.figure import Figure

from harness import analysis
from harness.style import focused


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
