"""Time to a target quality: per run, per config, and the fastest configs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from harness.analysis.labels import (
    LABEL_COLUMNS,
    LR_KEY,
    config_groups,
    net_labels,
)
from harness.analysis.memo import remembered
from harness.analysis.metrics import (
    direction,
    higher_is_better,
    quality,
    selection_metric,
    selection_split,
)
from harness.analysis.summaries import (
    _aggregate,
    _stat_cols,
    _summary_columns,
    best_at_reference_batch,
    ended_early,
    rank_configs,
    summarize,
)
from harness.config.identity import ID_COLUMNS
from harness.results import config_keys, steps_taken

TARGET_MEASURES = ("iterations_to_target", "epochs_to_target", "seconds_to_target")

# The rule of `reference_targets`, as summaries and captions state it.
TARGET_RULE = (
    "per net, the final {split} {quality} that the net's reference reaches with every seed "
    "(the worst seed's final value of the best setting of the reference optimizers, chosen "
    "on {split}), as AlgoPerf sets each workload's target from its tuned baselines"
)


@remembered
def reference_targets(runs: pd.DataFrame, reference: Sequence[str] = ()) -> dict[str, float]:
    """A target each net can reach, set on the selection split (validation): per net, the worst
    seed's final selection quality of the net's reference, the best setting (by `rank_configs`,
    at the reference batch size, no diverged seed) of the `reference` optimizers (the course's,
    for a zoo), or of every optimizer where the net has none of them. The reference reaches it
    with every seed by the end of its run; a fixed target (97 %) is out of reach where a net
    tops out lower (net1: 92.6 %). Nets whose settings all diverged get none."""
    by = selection_metric(runs)
    worst = runs.groupby("config_id")[by].min if higher_is_better(runs, by) else None
    per_config = worst() if worst else runs.groupby("config_id")[by].max()
    targets = {}
    for net, configs in best_at_reference_batch(runs)[1].groupby("net", sort=False):
        fine = configs[configs["n_diverged"] == 0]
        chosen = fine[fine["optimizer"].isin(reference)]
        chosen = chosen if len(chosen) else fine
        if len(chosen):
            targets[str(net)] = float(per_config[rank_configs(chosen).iloc[0]["config_id"]])
    return targets


def target_of(target: float | Mapping[str, float], net: str) -> float:
    """The target of `net`: a fixed target, or its own (`reference_targets`); NaN for none."""
    if isinstance(target, Mapping):
        return float(target.get(net, math.nan))
    return float(target)


@remembered
def time_to_target(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | Mapping[str, float] = 0.97,
    metric: str | None = None,
) -> pd.DataFrame:
    """Per run: the first evaluation at which `metric` (default: the validation quality, or the
    test quality for runs without a validation split) reaches `target` (>= for accuracies, <=
    for losses): its iteration, epoch and optimisation seconds (`time_s`, evaluations
    excluded); NaN and reached=False when the run never gets there, or when it diverged or
    failed (`ended_early`: what it reached before it ended is no model a user holds). The
    fastest configs are picked on this table, so it is measured on the split that chooses.

    Resolution is the sweep's evaluation interval (train.eval_every). Each run's identity (the
    config keys its labels read) is its row of `runs` (`load_runs`); `curves` are its curves
    (`load_curves`), whose rows name their run. `target`: one for every run, or one per net
    (`reference_targets`: a run of a net without one never reaches it)."""
    metric = metric or f"{selection_split(curves)}_{quality(curves)}"
    present = curves["run_dir"].astype(str).unique()
    identity = runs[runs["run_dir"].astype(str).isin(present)]
    columns = [*ID_COLUMNS, *config_keys(identity), "config_id", "status", "run_dir"]
    columns += [c for c in ("quality", "higher_is_better") if c in identity]
    points = curves[curves["metric"] == metric]
    per_run = identity.drop_duplicates("run_dir")[columns].reset_index(drop=True)
    per_run["run_dir"] = per_run["run_dir"].astype(str)
    if isinstance(target, Mapping):  # each run's net's own target
        first = identity.drop_duplicates("run_dir")
        of_run = dict(zip(first["run_dir"].astype(str), net_labels(first), strict=True))
        goal = (
            points["run_dir"]
            .astype(str)
            .map({run: target_of(target, net) for run, net in of_run.items()})
        )
    else:
        goal = target
    higher = higher_is_better(curves, metric)
    reached = points["value"] >= goal if higher else points["value"] <= goal
    first = (
        points[reached]
        .sort_values("iteration")
        .groupby(points["run_dir"].astype(str), sort=False)
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
    table.loc[ended_early(table), list(TARGET_MEASURES)] = math.nan
    table["reached"] = table["iterations_to_target"].notna()
    table["target"] = (
        net_labels(table).map(lambda net: target_of(target, net))
        if isinstance(target, Mapping)
        else target
    )
    table["metric"] = metric
    return table.sort_values([*ID_COLUMNS, "run_dir"], ignore_index=True)


def summarize_time_to_target(ttt: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per config: how many seeds reached the target, and per measure (iterations, epochs,
    seconds to target) the mean and CI half-width over the seeds that reached it, and
    `<measure>_cost`: that mean when every seed reached the target, else infinity (the cost
    used by performance profiles: a config that sometimes fails is not a solution)."""
    if ttt.empty:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "net", "setting", "n_seeds", "n_reached"])
    table = _aggregate(ttt, TARGET_MEASURES, confidence)
    reached = ttt["reached"].groupby(ttt["config_id"]).sum()
    table["n_reached"] = table["config_id"].map(reached).astype(int)
    all_reached = table["n_reached"] == table["n_seeds"]
    for measure in TARGET_MEASURES:
        table[f"{measure}_cost"] = table[f"{measure}_mean"].where(all_reached, math.inf)
    stat_cols = _stat_cols(TARGET_MEASURES, ("mean", "ci", "min", "max", "cost"))
    table["quality"], table["higher_is_better"] = quality(ttt), direction(ttt)
    # the metric the target was measured on (tables made before runs had a validation split
    # may not say: then it was the test quality)
    table["metric"] = ttt["metric"].iloc[0] if "metric" in ttt else f"test_{quality(ttt)}"
    columns = _summary_columns(table, ["n_reached"], stat_cols)
    return table[[*columns, "quality", "higher_is_better", "metric"]]


def fastest_configs(target_summary: pd.DataFrame, measure: str) -> pd.DataFrame:
    """Per config with the learning rate left out (each optimizer, net and other setting), the
    learning rate that reaches the target fastest in `measure` (iterations_to_target,
    seconds_to_target, ...) with every seed; a setting that never does keeps its learning rate
    with the most seeds reaching it, and an infinite cost."""
    if target_summary.empty:
        return target_summary.copy()
    ranked = target_summary.assign(
        _cost=target_summary[f"{measure}_cost"], _group=config_groups(target_summary, (LR_KEY,))
    ).sort_values(["_cost", "n_reached", "lr"], ascending=[True, False, True], kind="stable")
    best = ranked.groupby("_group", sort=False).head(1)
    return best.drop(columns=["_cost", "_group"]).sort_values(
        ["net", "optimizer", "setting"], ignore_index=True
    )


@remembered
def quality_at_time(
    runs: pd.DataFrame, curves: pd.DataFrame, seconds: float | None = None
) -> tuple[pd.Series, pd.DataFrame]:
    """(seconds per net, table): per config, the test quality (and the validation quality, which
    ranks them, when the runs have it) at the last evaluation within its net's `seconds` of
    training (evaluations excluded), mean over seeds, and the time per step: what each setting
    reaches in the same time rather than in the same number of steps. The time is each run's
    own (its steps times its step alone where measured, as its curves' `time_s`). Default, per
    net: the shortest own training time of a run on that net that completed (of any run, where
    none on the net did), so that every config has a value (a run that diverged stops at once,
    and a zoo has some) and a deep net is not read at a shallow one's time. A run that diverged
    or failed within its budget scores its evaluation at iteration 0 (`ended_early`): the
    model it began from, not what it recorded before it ended."""
    nets = net_labels(runs)
    own_time = runs["step_time_s"] * steps_taken(runs)
    ended = ended_early(runs)
    finished = own_time.where(~ended).groupby(nets).min()
    budget = finished.fillna(own_time.groupby(nets).min())
    if seconds is not None:
        budget = pd.Series(float(seconds), index=budget.index)
    run_budget = pd.Series(nets.map(budget).to_numpy(), index=runs["run_dir"])
    ended_within = pd.Series((ended & (own_time <= nets.map(budget))).to_numpy(), runs["run_dir"])
    columns = {}
    for split in dict.fromkeys((selection_split(curves), "test")):  # val (it ranks), then test
        metric = f"{split}_{quality(runs)}"
        points = curves[curves["metric"] == metric]
        points = points[points["time_s"] <= points["run_dir"].map(run_budget)]
        last = points.sort_values("iteration").groupby("run_dir")["value"].last()
        start = points[points["iteration"] == 0].groupby("run_dir")["value"].first()
        last = last.where(~ended_within.reindex(last.index, fill_value=False), start)
        columns[f"{metric}_at_time"] = runs["run_dir"].map(last)
    per_run = runs.assign(**columns)
    return budget.rename("seconds"), summarize(per_run, metrics=(*columns, "step_time_s"))
