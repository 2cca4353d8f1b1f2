"""The summary's section of statistics: each setting against its net's reference with the tests
the literature recommends for a few seeds, each named (`analysis.comparisons`).

Welch's interval alone says "not told apart" both where two settings are equivalent and where
three seeds cannot tell; TOST at a stated margin separates the two. Holm's correction stands
beside Bonferroni's (as strict for the smallest p-value, less for the others); the bootstrap
interval of each setting's rank says how sure #1 is; P(X > reference) says how often a seed of
the setting beats a seed of the reference, whatever the spread.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness import analysis
from harness.analysis import comparisons
from harness.markdown import markdown_table
from harness.style import COURSE_OPTIMIZERS, METRIC_LABELS, Study, is_percent, scale

# TOST's margin: a difference of final test accuracy smaller than this is of no practical
# weight (0.2 points: the spread of one setting's seeds on MNIST); for another metric, this
# share of the reference's mean.
ACCURACY_MARGIN = 0.002
RELATIVE_MARGIN = 0.01


def margin_of(test: str, reference_mean: float) -> float:
    """TOST's margin for final metric `test`: ACCURACY_MARGIN for an accuracy, else
    RELATIVE_MARGIN of the reference's mean."""
    if is_percent(test):
        return ACCURACY_MARGIN
    return RELATIVE_MARGIN * abs(reference_mean)


def margin_text(test: str, margin: float) -> str:
    return f"±{margin * 100:.2g} points" if is_percent(test) else f"±{margin:.3g}"


def comparison_table(runs: pd.DataFrame, versus: pd.DataFrame, net: str, study: Study):
    """One net's rows of `analysis.against_reference` (no diverged setting), tested against
    the reference: (table, margin). Rows in the order of `versus` (by gain), indexed by
    config_id."""
    test = analysis.final_quality(runs)
    sign = 1.0 if analysis.higher_is_better(runs, test) else -1.0  # the tests: higher better
    rows = versus[(versus["net"] == net) & (versus["n_diverged"] == 0)]
    seeds = runs.groupby("config_id")[test].apply(lambda v: sign * np.asarray(v, dtype=float))
    ids = rows["config_id"]
    per_setting = {c: seeds[c] for c in ids}
    reference = rows.loc[rows["verdict"] == "reference", "config_id"].iloc[0]
    margin = margin_of(test, float(np.mean(seeds[reference])))
    # the family counts the net's diverged settings too, as the readings' (analysis.reference)
    family = int((versus["net"] == net).sum()) - 1
    tested = comparisons.compare_to_reference(per_setting, reference, margin, family=family)
    tested = tested.set_index("setting")
    ranks = comparisons.bootstrap_ranks(per_setting).set_index("setting")
    k = scale(test)
    digits = 2 if is_percent(test) else 4
    pairs = zip(rows["setting"], rows["optimizer"], strict=True)
    table = pd.DataFrame(
        {
            "setting": [study.setting(s, o) for s, o in pairs],
            "difference": [_signed(tested.loc[c, "difference"] * k, digits) for c in ids],
            "Welch p": [_p(tested.loc[c, "p"]) for c in ids],
            "Bonferroni": [tested.loc[c, "bonferroni"] for c in ids],
            "Holm": [tested.loc[c, "holm"] for c in ids],
            f"TOST {margin_text(test, margin)}": [
                _tost(tested.loc[c]) for c in ids
            ],
            "P(better than ref.)": [_share(tested.loc[c].get("p_improvement")) for c in ids],
            "rank [95 % bootstrap]": [
                f"{ranks.loc[c, 'rank']} [{ranks.loc[c, 'rank_low']}-{ranks.loc[c, 'rank_high']}]"
                for c in ids
            ],
            "P(#1)": [_share(ranks.loc[c, "p_first"]) for c in ids],
        },
        index=pd.Index(ids.to_numpy(), name="config_id"),
    )  # fmt: skip
    return table, margin


def significance_markdown(runs: pd.DataFrame, study: Study) -> list[str]:
    """Per net: every setting (at its learning rate chosen on validation) against the net's
    reference, the best of the course's optimizers on validation (of every optimizer, where
    the net has none of them), with the named tests. Nothing for a sweep of a single setting."""
    reference = [o for o in COURSE_OPTIMIZERS if o in set(runs["optimizer"])]
    versus = analysis.against_reference(runs, reference or list(runs["optimizer"].unique()))
    if versus.empty or versus.groupby("net").size().max() < 2:
        return []
    test = analysis.final_quality(runs)
    name = METRIC_LABELS.get(test, test)
    parts = [
        "",
        "## Against the reference: the tests for a few seeds",
        "",
        f"Every setting at its learning rate chosen on validation against the net's reference "
        f"(the best of the course's optimizers on validation), on {name}; settings with a "
        "diverged seed left out. Difference: mean minus the reference's (better is +). "
        "Welch p: Welch's two-sided t-test; Bonferroni and Holm: its verdict corrected for the "
        "net's comparisons, every setting but the reference, a diverged one too (Holm's "
        "step-down, at the same family-wise 5 %, never rejects fewer). "
        "TOST: two one-sided Welch tests at 5 % of a difference within the stated margin, "
        "'equivalent' where both reject, 'different' where Welch's 95 % interval leaves zero "
        "out, else 'undecided' (the seeds tell neither). P(better than ref.): the probability "
        "that a random seed of the setting beats one of the reference (rliable's probability of "
        "improvement; 0.5: even). Rank: by mean, with its 95 % interval over 2000 stratified "
        "bootstrap resamples of the seeds; P(#1): the share of resamples in which it is first.",
    ]
    for net in versus["net"].unique():
        table, margin = comparison_table(runs, versus, net, study)
        tost = table[[c for c in table if c.startswith("TOST")][0]]
        counts = tost.str.split().str[0].value_counts()
        parts += [
            "",
            f"### {net}",
            "",
            f"TOST at {margin_text(test, margin)}: {counts.get('equivalent', 0)} equivalent, "
            f"{counts.get('different', 0)} different, {counts.get('undecided', 0)} undecided.",
            "",
            markdown_table(table, index=False),
        ]
    return parts


def _signed(value: float, digits: int) -> str:
    return f"{value:+.{digits}f}" if math.isfinite(value) else "0"


def _p(value: float) -> str:
    return "" if not math.isfinite(value) else f"{value:.2g}"


def _share(value) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.2f}"


def _tost(row: pd.Series) -> str:
    """The verdict, with TOST's p-value where it decided or could not (not beside 'different':
    an equivalence p-value near 1 there reads as if it supported the difference)."""
    if row["tost"] in ("reference", comparisons.DIFFERENT):
        return row["tost"]
    return f"{row['tost']} (p {_p(row['tost_p'])})"
