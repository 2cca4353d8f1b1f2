"""Statistics over seeds per config, and the selection rule: which config is best."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from harness.analysis.labels import (
    LABEL_COLUMNS,
    LR_KEY,
    config_groups,
    with_net,
)
from harness.analysis.memo import remembered
from harness.analysis.metrics import (
    direction,
    higher_is_better,
    quality,
    selection_metric,
    summary_metrics,
)
from harness.results import config_keys

# The course's mini-batch: the reference batch size of figures over iterations when present.
COURSE_BATCH_SIZE = 128


def ended_early(runs: pd.DataFrame) -> pd.Series:
    """The runs that stopped before their last step: diverged, or failed (the optimizer's step
    raised). Neither ended with a model to score: statistics count both as `n_diverged`."""
    return runs["status"] != "completed"


def t_interval(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, int]:
    """Mean and half-width of the `confidence` interval of the mean (Student's t), and n.

    The half-width is NaN for fewer than two values (one seed says nothing about spread)."""
    x = np.asarray(list(values), dtype=float)
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(x.mean())
    if n < 2 or not np.isfinite(x).all():
        return mean, math.nan, n
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return mean, float(half), n


def _seed_statistics(
    values: np.ndarray, codes: np.ndarray, groups: int, confidence: float
) -> dict[str, np.ndarray]:
    """`t_interval` of every group at once (`codes`: each value's group), to the last bit: the
    sums run in row order like numpy's over a handful of seeds, NaN values left out."""
    present = ~np.isnan(values)
    n = np.bincount(codes, weights=present, minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(codes, weights=np.where(present, values, 0.0), minlength=groups) / n
        deviation = np.where(present, values - mean[codes], 0.0)
        spread = np.sqrt(
            np.bincount(codes, weights=deviation * deviation, minlength=groups) / (n - 1)
        )
        infinite = np.bincount(codes, weights=np.isinf(values), minlength=groups) > 0
        defined = (n >= 2) & ~infinite  # no half-width from one value or from infinite ones
        t = stats.t.ppf((1 + confidence) / 2, np.where(defined, n - 1, 1))
        half = np.where(defined, t * spread / np.sqrt(n), math.nan)
    return {"mean": mean, "ci": half, "n": n.astype(int)}


def _aggregate(frame: pd.DataFrame, metrics: Sequence[str], confidence: float) -> pd.DataFrame:
    """Per config (`config_id`): its first row's identifying columns, the number of seeds, and
    per metric the mean, CI half-width, min, max and count over its runs (computed for all
    configs at once: a zoo's report has thousands)."""
    labels = [c for c in [*LABEL_COLUMNS, *config_keys(frame)] if c in frame]
    codes, config_ids = pd.factorize(frame["config_id"])  # in order of first appearance
    table = frame.drop_duplicates("config_id")[["config_id", *labels]].reset_index(drop=True)
    stats_ = {"n_seeds": frame.groupby(codes)["seed"].nunique().to_numpy()}
    for metric in metrics:
        values = frame[metric].astype(float)
        moments = _seed_statistics(values.to_numpy(), codes, len(config_ids), confidence)
        grouped = values.groupby(codes)
        stats_[f"{metric}_mean"] = moments["mean"]
        stats_[f"{metric}_ci"] = moments["ci"]
        stats_[f"{metric}_min"] = grouped.min().to_numpy()
        stats_[f"{metric}_max"] = grouped.max().to_numpy()
        stats_[f"{metric}_n"] = moments["n"]
    table = pd.concat([table, pd.DataFrame(stats_)], axis=1)  # at once: not a column at a time
    return with_net(table).sort_values([*LABEL_COLUMNS, "setting"], ignore_index=True)


def _stat_cols(metrics: Sequence[str], stats_: Sequence[str] = ("mean", "ci", "min", "max")):
    return [f"{m}_{s}" for m in metrics for s in stats_]


def _summary_columns(frame: pd.DataFrame, counts: Sequence[str], stat_cols: Sequence[str]):
    return [
        *LABEL_COLUMNS,
        "net",
        "setting",
        *config_keys(frame),
        "config_id",
        "n_seeds",
        *counts,
        *stat_cols,
    ]


@remembered
def summarize(
    runs: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per config: the number of seeds and of diverged runs, and per metric its mean
    over seeds, the half-width of the `confidence` interval of that mean (t distribution;
    `<metric>_ci`, NaN with one seed), min and max over seeds.

    A diverged (or failed) run counts with its last evaluated metrics; `n_diverged` says how many
    there are (`ended_early`).
    The selection rule's inputs (`rank_configs`: the selection metric, final training loss) are
    summarised with any `metrics`: a summary of other metrics still chooses on validation.
    """
    if runs.empty:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "net", "setting", "config_id", "n_seeds"])
    rule = [m for m in (selection_metric(runs), "final_train_loss") if m in runs]
    metrics = list(dict.fromkeys([*(metrics or summary_metrics(runs)), *rule]))
    table = _aggregate(runs, metrics, confidence)
    diverged = ended_early(runs).groupby(runs["config_id"]).sum()
    table["n_diverged"] = table["config_id"].map(diverged).astype(int)
    table["quality"], table["higher_is_better"] = quality(runs), direction(runs)
    columns = _summary_columns(table, ["n_diverged"], _stat_cols(metrics))
    return table[[*columns, "quality", "higher_is_better"]]


def rank_configs(
    summary: pd.DataFrame, by: str | None = None, tune: Sequence[str] = (LR_KEY,)
) -> pd.DataFrame:
    """`summary` in the order the selection rule prefers its configs, with `_group`, the config
    with the `tune` keys left out: within a group, configs without a diverged seed first, then
    by the mean of `by` (default: the selection metric, final validation quality), then the
    lower mean final train loss, then the smaller learning rate. The first of each group is
    its best config (`best_configs`); the order is what tuning curves pick from."""
    by = by or selection_metric(summary)
    ranked = summary.assign(
        _diverged=summary["n_diverged"] > 0,
        _score=(summary[f"{by}_mean"] * (-1 if higher_is_better(summary, by) else 1)).fillna(
            math.inf
        ),
        _group=config_groups(summary, without=tune),
    )
    order = ["_diverged", "_score"]
    if "final_train_loss_mean" in ranked:
        order.append("final_train_loss_mean")
    ranked = ranked.sort_values([*order, "lr"], kind="stable")
    return ranked.drop(columns=["_diverged", "_score"])


def best_configs(
    summary: pd.DataFrame,
    by: str | None = None,
    tune: Sequence[str] = (LR_KEY,),
) -> pd.DataFrame:
    """The best config (by the mean of `by` over seeds; default: the selection metric, final
    validation quality) among those that differ only in the `tune` keys: by default the best
    learning rate of every other config (each optimizer, net, and any other key that varies).
    Configs with a diverged seed rank below every config without one; ties go to the lower mean
    final train loss, then the smaller learning rate (`rank_configs`)."""
    if summary.empty:
        return summary.copy()
    best = rank_configs(summary, by, tune).groupby("_group", sort=False).head(1)
    best = best.drop(columns=["_group"])
    return best.sort_values([*LABEL_COLUMNS, "setting"], ignore_index=True)


def reference_batch_size(runs: pd.DataFrame) -> int:
    """The batch size of figures over iterations: the course's 128 when the sweep has it, else
    the batch size with the most runs (the smallest among equals)."""
    sizes = runs["batch_size"].value_counts()
    if COURSE_BATCH_SIZE in sizes.index:
        return COURSE_BATCH_SIZE
    return int(sizes[sizes == sizes.max()].index.min())


@remembered
def lr_table(
    runs: pd.DataFrame, batch_size: int, by: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """At `batch_size`: the summary of every config (one point per learning rate of each
    setting), and the best learning rate of each setting (by `by`). Returns (per_lr, best)."""
    summary = summarize(runs[runs["batch_size"] == batch_size])
    return summary, best_configs(summary, by=by)


@remembered
def best_at_reference_batch(
    runs: pd.DataFrame, by: str | None = None, batch_size: int | None = None
) -> tuple[int, pd.DataFrame]:
    """(batch size, best configs): the best learning rate of every other config at the reference
    batch size (or `batch_size`), as the convergence figures, the final-metrics tables and the
    notebooks show them."""
    batch_size = batch_size or reference_batch_size(runs)
    return batch_size, lr_table(runs, batch_size, by)[1]


def runs_of(runs: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """The runs (all seeds) of the configs listed in `configs`."""
    return runs[runs["config_id"].isin(configs["config_id"])]


def curve_bands(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    configs: pd.DataFrame,
    metric: str,
    x: str = "iteration",
) -> pd.DataFrame:
    """Per config of `configs` and per iteration, the mean, min and max over seeds of `metric`
    (and the mean of `x`, for x = epoch or time_s). Only iterations that every seed of the
    config reached are kept: a diverged seed ends its config's curve where it stopped.

    Columns: the config's columns (those of `configs`, without statistics), x, mean, min, max,
    n_seeds, n_diverged, diverged_at (the iteration where the first seed diverged or failed,
    NaN if none did).
    """
    labels = [c for c in [*LABEL_COLUMNS, "net", "setting", *config_keys(configs)] if c in configs]
    columns = [*labels, "config_id", x, "mean", "min", "max", "n_seeds", "n_diverged"]
    chosen = runs_of(runs, configs)
    if chosen.empty:
        return pd.DataFrame(columns=[*columns, "diverged_at"])
    selected = curves[(curves["metric"] == metric) & curves["run_dir"].isin(chosen["run_dir"])]
    by_config = chosen.groupby("config_id", sort=False)
    per_config = pd.DataFrame({"n_seeds": by_config.size()})
    diverged = chosen[ended_early(chosen)].groupby("config_id")["diverged_at"]
    per_config["n_diverged"] = diverged.size().reindex(per_config.index, fill_value=0)
    per_config["diverged_at"] = diverged.min().reindex(per_config.index)
    points = selected.groupby(["config_id", "iteration"], sort=True).agg(
        x_mean=(x, "mean"),
        mean=("value", "mean"),
        min=("value", "min"),
        max=("value", "max"),
        count=("run_dir", "nunique"),
    )
    points = points.reset_index().join(per_config, on="config_id")
    points = points[points["count"] == points["n_seeds"]]  # iterations every seed reached
    points[x] = points["x_mean"] if x != "iteration" else points["iteration"]
    described = configs.drop_duplicates("config_id").set_index("config_id")[labels]
    bands = points.join(described, on="config_id")
    # configs in the order of their first run; the grouping left each one's points in order
    order = pd.Series(range(len(per_config)), index=per_config.index)
    bands = bands.sort_values("config_id", key=lambda ids: ids.map(order), kind="stable")
    return bands.reset_index(drop=True)[[*columns, "diverged_at"]]
