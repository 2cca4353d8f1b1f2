"""Performance profiles (Dolan & Moré): cost matrices of problems x optimizers, their profiles."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness.analysis.labels import (
    NET_KEYS,
    _describe,
    _joined,
    label_keys,
    net_labels,
)
from harness.analysis.memo import remembered
from harness.analysis.summaries import (
    summarize,
)
from harness.analysis.time_to_target import (
    summarize_time_to_target,
    time_to_target,
)


def profile_costs(table: pd.DataFrame, cost: str, solver: str = "optimizer") -> pd.DataFrame:
    """The cost matrix of a performance profile: one row per problem, one column per solver
    (default: the optimizer). A problem is a config with the optimizer's keys left out (the
    net, the batch size and whatever else varies); each solver is tuned per problem (the minimum
    of `cost` over its own settings: learning rate, momentum, ...). Lower is better; inf:
    failed; a solver not run on a problem counts as failed. For a metric where higher is
    better, pass a cost column that turns it around (for example the error rate 1 - accuracy).

    The index names each problem: the net, then the other keys that vary between problems."""
    problem_keys = label_keys(table, without=("optimizer.", *NET_KEYS))
    problems = _joined(net_labels(table), _describe(table, problem_keys, ""), ", ")
    costs = table.assign(_cost=table[cost].astype(float).fillna(math.inf), problem=problems)
    matrix = costs.pivot_table(
        index="problem", columns=solver, values="_cost", aggfunc="min", dropna=False
    )
    matrix = matrix.dropna(how="all").fillna(math.inf)
    matrix.columns.name = solver
    return matrix


@remembered
def profile_tables(
    runs: pd.DataFrame, curves: pd.DataFrame, target: float | None
) -> dict[str, pd.DataFrame]:
    """Cost matrices (problems x optimizers) of the performance profiles: iterations and
    seconds to `target` quality on the split that chooses (validation, or test for runs without
    one; see `time_to_target`; without a target: none), and final training loss; each
    optimizer at its best setting per problem. A config with a seed that diverged or did not
    reach the target counts as failed. A problem whose target the untrained model already
    meets (a cost of 0: reached at iteration 0) tells no optimizer apart, and a ratio to 0 is
    none: it is left out of the time-to-target profiles."""
    summary = summarize(runs)
    loss = summary.assign(
        final_train_loss_cost=summary["final_train_loss_mean"].where(
            summary["n_diverged"] == 0, math.inf
        )
    )
    tables = {"final_train_loss": profile_costs(loss, "final_train_loss_cost")}
    if target is None:
        return tables
    ttt = summarize_time_to_target(time_to_target(runs, curves, target))
    to_target = {
        measure: profile_costs(ttt, f"{measure}_cost")
        for measure in ("iterations_to_target", "seconds_to_target")
    }
    return {key: costs[costs.min(axis=1) > 0] for key, costs in to_target.items()} | tables


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


# AlgoPerf's (Dahl et al. 2023) largest ratio to the best a profile's score counts.
SCORE_TAU = 4.0


def profile_score(costs: pd.DataFrame, tau_max: float = SCORE_TAU) -> pd.Series:
    """AlgoPerf's integrated score of each solver: the area under its performance profile from
    tau = 1 to `tau_max` (linear tau), divided by `tau_max` - 1, so that 1 is the best solver on
    every problem and 0 none within a factor `tau_max` of the best. The profile is a step
    function, integrated exactly."""
    profile = performance_profile(costs)
    taus = profile.index.to_numpy(dtype=float)
    inside = taus < tau_max
    edges = np.append(taus[inside], tau_max)
    widths = np.diff(edges)
    area = profile[inside].mul(widths, axis=0).sum()
    return (area / (tau_max - 1)).rename("score")
