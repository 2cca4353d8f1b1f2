"""Summaries of a sweep's results: pure pandas, no plotting.

Every function takes the tables of `harness.results` (`load_runs`: one row per run,
`load_curves`: long-format curves) or the output of another function here, and returns a new
DataFrame. The figures of `harness.report` draw exactly these tables.

A *config* is a run without its seed (model, optimizer, schedule, lr, momentum, batch_size,
hidden): statistics over seeds are per config. A *net* is a model with its hidden layers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from harness.results import ID_COLUMNS

CONFIG_COLUMNS = [c for c in ID_COLUMNS if c != "seed"]
NET_COLUMNS = ["model", "hidden"]
# Per-run metrics summarised over seeds by default.
SUMMARY_METRICS = ("final_test_accuracy", "final_train_loss", "best_test_accuracy")
# Which way is better for a metric (True: higher); metrics not listed: lower is better.
HIGHER_IS_BETTER = {
    "final_test_accuracy": True,
    "best_test_accuracy": True,
    "test_accuracy": True,
    "train_accuracy": True,
}
# The course's mini-batch: the reference batch size of figures over iterations when present.
COURSE_BATCH_SIZE = 128


def higher_is_better(metric: str) -> bool:
    return HIGHER_IS_BETTER.get(metric, "accuracy" in metric)


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


def net_labels(frame: pd.DataFrame) -> pd.Series:
    """A net's name: the model, with its hidden layers when a model appears with several."""
    widths = frame.groupby("model")["hidden"].transform("nunique")
    label = frame["model"].astype(str)
    several = widths > 1
    return label.where(~several, label + " (" + frame["hidden"].astype(str) + ")")


def with_net(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with a `net` column (see net_labels)."""
    return frame.assign(net=net_labels(frame)) if len(frame) else frame.assign(net=[])


def _aggregate(
    frame: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], confidence: float
) -> pd.DataFrame:
    """Per group of `keys`: mean, CI half-width, min, max and count of each metric."""
    rows = []
    for key, group in frame.groupby(list(keys), dropna=False, sort=True):
        row = dict(zip(keys, key, strict=True))
        for metric in metrics:
            values = group[metric].astype(float)
            mean, half, n = t_interval(values, confidence)
            row |= {
                f"{metric}_mean": mean,
                f"{metric}_ci": half,
                f"{metric}_min": values.min(),
                f"{metric}_max": values.max(),
                f"{metric}_n": n,
            }
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(
    runs: pd.DataFrame,
    metrics: Sequence[str] = SUMMARY_METRICS,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per config: the number of seeds and of diverged runs, and per metric its mean
    over seeds, the half-width of the `confidence` interval of that mean (t distribution;
    `<metric>_ci`, NaN with one seed), min and max over seeds.

    A diverged run counts with its last evaluated metrics; `n_diverged` says how many there are.
    """
    if runs.empty:
        return pd.DataFrame(columns=[*CONFIG_COLUMNS, "net", "n_seeds", "n_diverged"])
    runs = runs.assign(diverged=(runs["status"] == "diverged").astype(int))
    table = _aggregate(runs, CONFIG_COLUMNS, metrics, confidence)
    counts = runs.groupby(CONFIG_COLUMNS, dropna=False, sort=True).agg(
        n_seeds=("seed", "nunique"), n_diverged=("diverged", "sum")
    )
    table = table.merge(counts.reset_index(), on=CONFIG_COLUMNS, how="left")
    return with_net(table)[[*CONFIG_COLUMNS, "net", "n_seeds", "n_diverged", *_stat_cols(metrics)]]


def _stat_cols(metrics: Sequence[str]) -> list[str]:
    return [f"{m}_{s}" for m in metrics for s in ("mean", "ci", "min", "max")]


def best_configs(
    summary: pd.DataFrame,
    by: str = "final_test_accuracy",
    within: Sequence[str] = ("model", "hidden", "optimizer"),
) -> pd.DataFrame:
    """The best config (by the mean of `by` over seeds) per group of `within`: by default the
    best learning rate (and momentum, schedule, batch size when the sweep varies them) per
    optimizer and net. Configs with a diverged seed rank below every config without one; ties
    go to the lower mean final train loss, then the smaller learning rate."""
    if summary.empty:
        return summary.copy()
    ranked = summary.assign(
        _diverged=summary["n_diverged"] > 0,
        _score=summary[f"{by}_mean"] * (-1 if higher_is_better(by) else 1),
    )
    ranked["_score"] = ranked["_score"].fillna(math.inf)
    order = ["_diverged", "_score"]
    if "final_train_loss_mean" in ranked:
        order.append("final_train_loss_mean")
    ranked = ranked.sort_values([*order, "lr"], kind="stable")
    best = ranked.groupby(list(within), dropna=False, sort=False).head(1)
    return best.drop(columns=["_diverged", "_score"]).sort_values(list(within), ignore_index=True)


def reference_batch_size(runs: pd.DataFrame) -> int:
    """The batch size of figures over iterations: the course's 128 when the sweep has it, else
    the batch size with the most runs (the smallest among equals)."""
    sizes = runs["batch_size"].value_counts()
    if COURSE_BATCH_SIZE in sizes.index:
        return COURSE_BATCH_SIZE
    return int(sizes[sizes == sizes.max()].index.min())


def runs_of(runs: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """The runs (all seeds) of the configs listed in `configs`."""
    keys = configs[CONFIG_COLUMNS].drop_duplicates()
    return _join(runs, keys)


def _join(frame: pd.DataFrame, keys: pd.DataFrame) -> pd.DataFrame:
    # Optimizers without momentum have NaN there, and NaN must match NaN: join on a filled copy.
    left = frame.assign(_m=frame["momentum"].fillna(-1.0))
    right = keys.assign(_m=keys["momentum"].fillna(-1.0)).drop(columns="momentum")
    cols = [c if c != "momentum" else "_m" for c in keys.columns]
    return left.merge(right.drop_duplicates(), on=cols, how="inner").drop(columns="_m")


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

    Columns: the config columns, net, x, mean, min, max, n_seeds, n_diverged, diverged_at
    (the iteration where the first seed diverged, NaN if none did).
    """
    chosen = runs_of(runs, configs)
    columns = [*CONFIG_COLUMNS, "net", x, "mean", "min", "max", "n_seeds", "n_diverged"]
    if chosen.empty:
        return pd.DataFrame(columns=[*columns, "diverged_at"])
    selected = curves[(curves["metric"] == metric) & curves["run_dir"].isin(chosen["run_dir"])]
    selected = selected.merge(chosen[["run_dir", "seed"]], on="run_dir", suffixes=("_c", ""))
    frames = []
    for key, group in chosen.groupby(CONFIG_COLUMNS, dropna=False, sort=True):
        dirs = set(group["run_dir"])
        points = selected[selected["run_dir"].isin(dirs)]
        per_iter = points.groupby("iteration").agg(
            x_mean=(x, "mean"),
            mean=("value", "mean"),
            min=("value", "min"),
            max=("value", "max"),
            count=("run_dir", "nunique"),
        )
        per_iter = per_iter[per_iter["count"] == len(dirs)].reset_index()
        diverged = group.loc[group["status"] == "diverged", "diverged_at"]
        frame = pd.DataFrame(
            {
                **dict(zip(CONFIG_COLUMNS, key, strict=True)),
                x: per_iter["x_mean"] if x != "iteration" else per_iter["iteration"],
                "mean": per_iter["mean"],
                "min": per_iter["min"],
                "max": per_iter["max"],
                "n_seeds": len(dirs),
                "n_diverged": len(diverged),
                "diverged_at": diverged.min() if len(diverged) else math.nan,
            }
        )
        frames.append(frame)
    bands = pd.concat(frames, ignore_index=True)
    return with_net(bands)[[*columns, "diverged_at"]]


def time_to_target(
    curves: pd.DataFrame, target: float = 0.97, metric: str = "test_accuracy"
) -> pd.DataFrame:
    """Per run: the first evaluation at which `metric` reaches `target` (>= for accuracies,
    <= for losses): its iteration, epoch and optimisation seconds (`time_s`, evaluations
    excluded); NaN and reached=False when the run never gets there.

    Resolution is the sweep's evaluation interval (train.eval_every)."""
    columns = [*ID_COLUMNS, "status", "run_dir"]
    points = curves[curves["metric"] == metric]
    per_run = curves.drop_duplicates("run_dir")[columns].reset_index(drop=True)
    reached = points["value"] >= target if higher_is_better(metric) else points["value"] <= target
    first = (
        points[reached]
        .sort_values("iteration")
        .groupby("run_dir", sort=False)
        .first()[["iteration", "epoch", "time_s"]]
        .rename(
            columns={
                "iteration": "iterations_to_target",
                "epoch": "epochs_to_target",
                "time_s": "seconds_to_target",
            }
        )
    )
    table = per_run.merge(first, left_on="run_dir", right_index=True, how="left")
    table["reached"] = table["iterations_to_target"].notna()
    table["target"] = target
    table["metric"] = metric
    return table.sort_values([*ID_COLUMNS, "run_dir"], ignore_index=True)


TARGET_MEASURES = ("iterations_to_target", "epochs_to_target", "seconds_to_target")


def summarize_time_to_target(ttt: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per config: how many seeds reached the target, and per measure (iterations, epochs,
    seconds to target) the mean and CI half-width over the seeds that reached it, and
    `<measure>_cost`: that mean when every seed reached the target, else infinity (the cost
    used by performance profiles: a config that sometimes fails is not a solution)."""
    if ttt.empty:
        return pd.DataFrame(columns=[*CONFIG_COLUMNS, "net", "n_seeds", "n_reached"])
    table = _aggregate(ttt, CONFIG_COLUMNS, TARGET_MEASURES, confidence)
    counts = ttt.groupby(CONFIG_COLUMNS, dropna=False, sort=True).agg(
        n_seeds=("seed", "nunique"), n_reached=("reached", "sum")
    )
    table = table.merge(counts.reset_index(), on=CONFIG_COLUMNS, how="left")
    all_reached = table["n_reached"] == table["n_seeds"]
    for measure in TARGET_MEASURES:
        table[f"{measure}_cost"] = table[f"{measure}_mean"].where(all_reached, math.inf)
    stat_cols = [f"{m}_{s}" for m in TARGET_MEASURES for s in ("mean", "ci", "min", "max", "cost")]
    return with_net(table)[[*CONFIG_COLUMNS, "net", "n_seeds", "n_reached", *stat_cols]]


def profile_costs(
    table: pd.DataFrame,
    cost: str,
    problems: Sequence[str] = ("model", "hidden", "batch_size"),
    solver: str = "optimizer",
) -> pd.DataFrame:
    """The cost matrix of a performance profile: one row per problem (a combination of
    `problems`), one column per solver, each solver tuned per problem (the minimum of `cost`
    over its other settings: learning rate, momentum, schedule). Lower is better; inf: failed;
    a solver not run on a problem counts as failed. For a metric where higher is better, pass
    a cost column that turns it around (for example the error rate 1 - accuracy)."""
    costs = table.assign(_cost=table[cost].astype(float).fillna(math.inf))
    matrix = costs.pivot_table(
        index=list(problems), columns=solver, values="_cost", aggfunc="min", dropna=False
    )
    matrix = matrix.dropna(how="all").fillna(math.inf)
    matrix.columns.name = solver
    return matrix


def performance_profile(costs: pd.DataFrame, taus: Sequence[float] | None = None) -> pd.DataFrame:
    """Dolan & Moré performance profiles of a cost matrix (problems x solvers, lower is better,
    inf = failed): for each tau, the share of problems on which a solver's cost is within a
    factor tau of the best solver's. Index: tau (default: 1 and every ratio that occurs, so
    the profile's steps are exact); columns: the solvers.

    A problem no solver solved stays in the denominator: no profile then reaches 1."""
    values = costs.to_numpy(dtype=float)
    best = values.min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isfinite(values) & (best > 0), values / best, math.inf)
        ratios = np.where(np.isfinite(values) & (best == 0) & (values == 0), 1.0, ratios)
    if taus is None:
        finite = ratios[np.isfinite(ratios)]
        taus = np.unique(np.concatenate([[1.0], finite]))
    taus = np.asarray(taus, dtype=float)
    shares = (ratios[None, :, :] <= taus[:, None, None]).mean(axis=1)
    profile = pd.DataFrame(shares, index=pd.Index(taus, name="tau"), columns=costs.columns)
    return profile
