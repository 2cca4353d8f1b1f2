"""Each setting against a reference: does it beat the best of the reference optimizers (the
course's, for the optimizer zoo) on its net, by more than the seeds' noise?

The reference of a net is chosen as every pick is: by the selection rule on validation data
(`rank_configs`), among the settings whose optimizer is a reference optimizer. The comparison
reports test quality: the difference of the means over seeds with Welch's t interval (their
spreads differ), and a verdict that says whether the interval leaves zero out. Welch treats the
two settings' seeds as independent samples, though seed s of every setting starts from the same
initial weights and sees the same data order: where that pairing makes their results move
together, the interval is wider than a paired one would be (conservative); it needs no equal
seed lists, and a setting with a diverged seed gets no interval at all.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from harness.analysis.comparisons import holm, welch_p
from harness.analysis.memo import remembered
from harness.analysis.metrics import final_quality, higher_is_better, selection_metric
from harness.analysis.summaries import best_at_reference_batch, rank_configs

BETTER, WORSE, TIED = "better", "worse", "not told apart"
DIVERGED, REFERENCE = "diverged", "reference"


def welch_interval(
    values: Sequence[float], reference: Sequence[float], confidence: float = 0.95
) -> tuple[float, float, float]:
    """mean(values) - mean(reference) and its `confidence` interval (Welch's t; NaN bounds
    with fewer than two values on either side, or none of spread)."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    difference = float(a.mean() - b.mean())
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return difference, math.nan, math.nan
    with warnings.catch_warnings():
        # scipy warns of "catastrophic cancellation" for a side whose seeds agree (every seed
        # stuck at chance): its spread is truly ~0, and Welch's interval stands on the other's
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        low, high = stats.ttest_ind(a, b, equal_var=False).confidence_interval(confidence)
    return difference, float(low), float(high)


@remembered
def against_reference(
    runs: pd.DataFrame, reference: Sequence[str], confidence: float = 0.95
) -> pd.DataFrame:
    """Per net and setting at its best config (the selection rule's, on validation, at the
    reference batch size): its final test quality over seeds, and `gain`, how much better it is
    than the net's reference (the best setting of a `reference` optimizer by the selection
    rule), with the `confidence` interval of the gain (`gain_low`, `gain_high`; Welch's t over
    seeds; a gain is better whichever way the metric goes: higher accuracy, lower RMSE), and
    the `verdict`: better or worse where the interval leaves zero out, not told apart where it
    does not, diverged where a seed diverged or failed (no gain then: NaN); and its step time
    alone (`step_time_alone_s`, where the runs have it). Rows of each net by gain, the best
    first; nets without a reference optimizer are left out."""
    test, by = final_quality(runs), selection_metric(runs)
    sign = 1.0 if higher_is_better(runs, test) else -1.0
    best = best_at_reference_batch(runs)[1]  # the batch size the figures and tables show
    seeds = runs.groupby("config_id")[test].apply(list)
    step = (
        runs.groupby("config_id")["step_time_alone_s"].mean() if "step_time_alone_s" in runs else {}
    )
    rows = []
    for net, configs in best.groupby("net", sort=False):
        candidates = configs[configs["optimizer"].isin(reference) & (configs["n_diverged"] == 0)]
        if candidates.empty:
            continue
        chosen = rank_configs(candidates).iloc[0]
        for _, config in configs.iterrows():
            if config["n_diverged"]:  # a diverged seed's last value is no outcome: no gain
                gain = low = high = math.nan
            else:
                gain, low, high = welch_interval(
                    seeds[config["config_id"]], seeds[chosen["config_id"]], confidence
                )
            if sign < 0:
                gain, low, high = -gain, -high, -low
            if config["config_id"] == chosen["config_id"]:
                verdict = REFERENCE
            elif config["n_diverged"]:
                verdict = DIVERGED
            elif not math.isfinite(low):
                verdict = TIED
            else:
                verdict = BETTER if low > 0 else WORSE if high < 0 else TIED
            rows.append(
                {
                    "net": net,
                    "config_id": config["config_id"],
                    "setting": config["setting"],
                    "optimizer": config["optimizer"],
                    "lr": config["lr"],
                    "n_seeds": config["n_seeds"],
                    "n_diverged": config["n_diverged"],
                    f"{test}_mean": config[f"{test}_mean"],
                    f"{test}_ci": config[f"{test}_ci"],
                    f"{by}_mean": config[f"{by}_mean"],
                    "reference": chosen["setting"],
                    "gain": gain,
                    "gain_low": low,
                    "gain_high": high,
                    "verdict": verdict,
                    "step_time_alone_s": step.get(config["config_id"], math.nan),
                }
            )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    nets = {net: i for i, net in enumerate(dict.fromkeys(table["net"]))}
    order = table.assign(
        _net=table["net"].map(nets), _diverged=table["n_diverged"] > 0, _gain=-table["gain"]
    )
    order = order.sort_values(["_net", "_diverged", "_gain"], kind="stable")
    return order.drop(columns=["_net", "_diverged", "_gain"]).reset_index(drop=True)


def with_family_verdicts(
    runs: pd.DataFrame, versus: pd.DataFrame, reference: Sequence[str], alpha: float = 0.05
) -> pd.DataFrame:
    """`versus` (`against_reference(runs, reference)`) with each verdict corrected for its
    net's m comparisons (every setting but the reference), since among a zoo's 130 settings a
    few intervals leave zero out by chance alone: `bonferroni`, the verdict of the interval
    widened to 1 - alpha / m, and `holm`, Holm's step-down over the net's Welch p-values (as
    strict as Bonferroni for the smallest p-value, less for the others). A net without a
    comparison gets neither (NaN)."""
    test = final_quality(runs)
    seeds = runs.groupby("config_id")[test].apply(list)
    nets = []
    for net, rows in versus.groupby("net", sort=False):
        m = len(rows) - 1
        if m:  # on all runs, so that the net's label is the one `versus` was drawn with
            strict = against_reference(runs, reference, 1 - alpha / m)
            strict = strict[strict["net"] == net].set_index("config_id")["verdict"]
            rows = rows.assign(bonferroni=rows["config_id"].map(strict), holm=_holm(rows, seeds))
        nets.append(rows)
    return pd.concat(nets) if nets else versus


def _holm(rows: pd.DataFrame, seeds: pd.Series, alpha: float = 0.05) -> list[str]:
    """Holm's verdicts of one net's rows of `against_reference` (`comparisons.holm` of the
    comparisons' Welch p-values, m: every setting but the reference); a rejected one is
    better or worse by its gain's sign, the rest not told apart (the reference and diverged
    settings keep their verdicts)."""
    reference = rows.loc[rows["verdict"] == REFERENCE, "config_id"].iloc[0]
    compared = rows["verdict"].isin([BETTER, WORSE, TIED])
    p = pd.Series(math.nan, index=rows.index)
    for i, row in rows[compared].iterrows():
        p[i] = welch_p(seeds[row["config_id"]], seeds[reference])
    # the net's family counts every setting but the reference, diverged ones too (as Bonferroni)
    rejected = set(p.index[holm(p.to_numpy(), alpha, m=len(rows) - 1)])
    return [
        row["verdict"]
        if not compared[i]
        else (BETTER if row["gain"] > 0 else WORSE)
        if i in rejected
        else TIED
        for i, row in rows.iterrows()
    ]
