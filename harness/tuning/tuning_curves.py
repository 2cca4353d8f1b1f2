"""Tuning curves: how good an optimizer is after k trials of tuning (pure pandas, no plotting).

A tuning study runs N trials per group (net, optimizer and any other key that varies: configs
that differ only in the tuned keys). A user with a budget of k trials would have run k of them
and kept the one the selection rule prefers (`harness.analysis.best_configs`: the best mean
validation quality; a trial with a diverged seed never wins; ties to the lower training loss,
then the smaller learning rate). The tuning curve of a group is, for k = 1..N, the expected
validation quality of that pick over every k-subset of its trials (all subsets equally likely:
"averaged over random orders of the trials", Dodge et al. 2019's expected validation
performance, drawn without replacement), and the expected *test* quality of the same pick: what
that user would report. Computed exactly: with the trials ranked 1..N in the rule's order, the
trial of rank r is the pick of a random k-subset with probability C(N - r, k - 1) / C(N, k).

A run that diverged or failed ended with no model to score, and what it recorded before is not
its quality (a run that blew up at iteration 1,800 may have recorded 94 %): it scores the
model it began from, its evaluation at iteration 0 (chance, for a classifier), which is also
what most such runs recorded (they diverge before their first evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness import analysis


def pick_probabilities(n: int, k: int) -> np.ndarray:
    """P(the trial of rank r, r = 1..n, is the best of a uniformly random k-subset)."""
    total = math.comb(n, k)
    return np.array([math.comb(n - r, k - 1) / total for r in range(1, n + 1)])


def ranked_trials(summary: pd.DataFrame, tune: Sequence[str], by: str) -> pd.DataFrame:
    """`summary` (one row per config) with `group` (the config with the tuned keys left out)
    and `rank` (1 = the trial the selection rule picks first), in that order."""
    ranked = analysis.rank_configs(summary, by=by, tune=tune)
    ranked["rank"] = ranked.groupby("_group", sort=False).cumcount() + 1
    return ranked.rename(columns={"_group": "group"})


def scored_at_start(runs: pd.DataFrame, curves: pd.DataFrame, metrics: Sequence[str]):
    """`runs` with each final metric (final_val_accuracy, ...) of a run that ended early
    replaced by the same metric at iteration 0 of its curve (NaN where `curves` lacks it)."""
    ended = analysis.ended_early(runs)
    start = curves[curves["iteration"] == 0].drop_duplicates(["run_dir", "metric"])
    scored = runs.copy()
    for metric in metrics:
        at_start = start[start["metric"] == metric.removeprefix("final_")]
        value = runs["run_dir"].map(at_start.set_index("run_dir")["value"])
        scored[metric] = runs[metric].where(~ended, value)
    return scored


def tuning_curves(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    tune: Sequence[str] = (analysis.LR_KEY,),
    by: str | None = None,
) -> pd.DataFrame:
    """Per group of trials and per k = 1..N: `expected_val` and `expected_test`, the expected
    validation (`by`, default the selection metric) and test quality of the trial picked among
    k random trials, `p_best`, the probability that the pick is the best of all N (k / N), and
    the group's labels (net, setting, optimizer, model). One row per group and k. `curves`: the
    runs' curves (`load_curves`; iteration 0 is read), where a run that ended early is scored.
    A pick without a score (NaN) makes its expected values NaN, never a number."""
    if runs.empty:
        return pd.DataFrame()
    by = by or analysis.selection_metric(runs)
    test = analysis.final_quality(runs)
    rule = (by, test, "final_train_loss")
    ranking = analysis.summarize(runs, metrics=tuple(dict.fromkeys(rule)))
    summary = analysis.summarize(scored_at_start(runs, curves, (by, test)), metrics=rule[:2])
    scores = summary.set_index("config_id")[[f"{by}_mean", f"{test}_mean"]]
    # ranked on what the runs recorded (the selection rule's own order), scored at their start
    ranked = ranked_trials(ranking, tune, by).drop(columns=scores.columns).join(scores, "config_id")
    labels = [
        "net",
        "setting",
        *(c for c in analysis.LABEL_COLUMNS if c != analysis.SHORT_COLUMNS[analysis.LR_KEY]),
    ]
    # the groups in the order they first appear, each group's trials in rank order, as arrays
    codes = pd.factorize(ranked["group"])[0]
    ranked = ranked.iloc[np.lexsort((ranked["rank"].to_numpy(), codes))]
    sizes = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    val, tst = ranked[f"{by}_mean"].to_numpy(), ranked[f"{test}_mean"].to_numpy()
    expected_val, expected_test, ks = [], [], []
    for start, n in zip(starts, sizes, strict=True):
        trials = slice(start, start + n)
        for k in range(1, n + 1):
            p = pick_probabilities(n, k)
            picked = p > 0  # a trial no k-subset picks adds nothing, scored or not
            expected_val.append(float(np.sum(p[picked] * val[trials][picked])))
            expected_test.append(float(np.sum(p[picked] * tst[trials][picked])))
            ks.append(k)
    n_trials = np.repeat(sizes, sizes)
    # each group's labels (those of its first trial), once per k; as Python objects, like a row
    first = ranked.iloc[np.repeat(starts, sizes)][labels].astype(object).infer_objects()
    return first.reset_index(drop=True).assign(
        k=ks,
        n_trials=n_trials,
        expected_val=expected_val,
        expected_test=expected_test,
        p_best=np.array(ks) / n_trials,
        val_metric=by,
        test_metric=test,
    )


def budget_ends(curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each group's row of `curves` after one trial (k = 1) and after its whole budget
    (k = N), indexed by (net, setting), in the order of `curves`: what tuning gains."""
    ends = curves.sort_values("k", kind="stable").groupby(["net", "setting"], sort=False)
    return ends.first(), ends.last()


def tuning_table(curves: pd.DataFrame, ks: Sequence[int] = (1, 2, 4)) -> pd.DataFrame:
    """Net x setting: the expected validation and test quality of the pick after k trials, at a
    few budgets k and at the group's whole budget N, as 'validation / test' (accuracy in %)."""
    if curves.empty:
        return pd.DataFrame()
    percent = "accuracy" in curves["val_metric"].iloc[0]
    digits, factor = (2, 100.0) if percent else (4, 1.0)
    rows = []
    for (net, setting), group in curves.groupby(["net", "setting"], sort=False):
        n = int(group["n_trials"].iloc[0])
        row = {"net": net, "setting": setting, "optimizer": group["optimizer"].iloc[0], "N": n}
        points = group.drop_duplicates("k").set_index("k")
        # a budget beyond the study's N trials is its whole budget
        for name, k in [*((f"k = {k}", min(k, n)) for k in ks), ("k = N", n)]:
            point = points.loc[k]
            val, test = point["expected_val"] * factor, point["expected_test"] * factor
            row[name] = f"{val:.{digits}f} / {test:.{digits}f}"
        rows.append(row)
    return pd.DataFrame(rows)
