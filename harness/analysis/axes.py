"""Tables along one config key (batch size, momentum, any swept key): the figures of
sensitivity draw them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness.analysis.labels import (
    BATCH_KEY,
    LR_KEY,
    MOMENTUM_KEY,
    NET_KEYS,
    is_numeric_key,
    key_values,
    label_keys,
    setting_labels,
)
from harness.analysis.metrics import (
    summary_metrics,
)
from harness.analysis.summaries import (
    best_configs,
    summarize,
)
from harness.analysis.time_to_target import (
    TARGET_MEASURES,
    fastest_configs,
)


def swept_keys(runs: pd.DataFrame) -> list[str]:
    """The numeric config keys a sweep varies beyond its choice names, other than the learning
    rate and the net's shape: the axes worth a figure of their own (momentum, weight decay,
    batch size, ...)."""
    return [k for k in label_keys(runs, without=(LR_KEY, *NET_KEYS)) if is_numeric_key(runs, k)]


def along(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """`table` (one row per config) with `x`, the value of `key`, and `line`, the setting
    without `key` and the learning rate: the configs one line of a figure along `key` joins."""
    return table.assign(x=key_values(table, key), line=setting_labels(table, (LR_KEY, key)))


def axis_table(
    runs: pd.DataFrame,
    key: str,
    by: str | None = None,
    metrics: Sequence[str] = (),
) -> pd.DataFrame:
    """Per net, setting and value of the config key `key` (batch size, momentum, ...): the
    summary row of the best learning rate there (by `by`), `along` that key, with the summary
    metrics, the training time and the time per step summarised."""
    metrics = (*summary_metrics(runs), "train_time_s", "step_time_s", *metrics)
    return along(best_configs(summarize(runs, metrics=metrics), by=by), key)


def batch_size_table(runs: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Per net, setting and batch size: the summary row of the best learning rate there (with
    the training time summarised too)."""
    return axis_table(runs, BATCH_KEY, by)


def fastest_along(
    target_summary: pd.DataFrame, key: str, measures: Sequence[str] = TARGET_MEASURES
) -> pd.DataFrame:
    """Per net, setting and value of `key`: each measure to target (iterations, seconds, ...)
    at its own fastest learning rate, `along` that key; a measure's mean is infinite where no
    learning rate got every seed to the target."""
    columns = []
    for measure in measures:
        fastest = along(fastest_configs(target_summary, measure), key)
        reached = np.isfinite(fastest[f"{measure}_cost"].astype(float))
        fastest[f"{measure}_mean"] = fastest[f"{measure}_mean"].where(reached, math.inf)
        stats_ = [f"{measure}_{s}" for s in ("mean", "min", "max")]
        columns.append(fastest.set_index(["net", "line", "x"])[stats_])
    base = along(fastest_configs(target_summary, measures[0]), key)
    base = base.drop(columns=[c for c in base if c.startswith(tuple(measures))])
    return base.join(pd.concat(columns, axis=1), on=["net", "line", "x"])


def effective_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """Every config of a momentum sweep with its effective step size lr / (1 - momentum), the
    step a constant gradient settles to with heavy-ball or Nesterov momentum; `line`: the
    setting without learning rate and momentum (classical or Nesterov, ...)."""
    summary = summarize(runs[runs["momentum"].notna()])
    return summary.assign(
        effective_step=summary["lr"] / (1 - summary["momentum"]),
        line=setting_labels(summary, (LR_KEY, MOMENTUM_KEY)),
    )
