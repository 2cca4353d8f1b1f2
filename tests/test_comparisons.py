"""harness.analysis.comparisons on data whose answers are known by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.analysis import comparisons as cmp


def test_tost_equivalent_when_the_interval_sits_inside_the_margin():
    a, b = [1.00, 1.01, 0.99, 1.00], [1.00, 1.02, 0.98, 1.01]
    result = cmp.tost(a, b, margin=0.05)
    assert result["verdict"] == cmp.EQUIVALENT
    # the 90 % Welch interval (alpha 0.05 each side) lies inside (-0.05, 0.05)
    interval = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.90)
    assert result["low"] == pytest.approx(interval.low)
    assert result["high"] == pytest.approx(interval.high)
    assert -0.05 < result["low"] < result["high"] < 0.05


def test_tost_undecided_and_different():
    # noisy seeds: neither a difference nor equivalence within 0.01 can be shown
    noisy = cmp.tost([1.0, 1.2, 0.8], [1.0, 0.7, 1.3], margin=0.01)
    assert noisy["verdict"] == cmp.UNDECIDED and noisy["p"] > 0.05
    # means 1 apart with tiny spread: different, and far from equivalent within 0.1
    apart = cmp.tost([2.0, 2.01, 1.99], [1.0, 1.01, 0.99], margin=0.1)
    assert apart["verdict"] == cmp.DIFFERENT and apart["p"] > 0.99


def test_tost_p_is_the_larger_one_sided_p():
    a, b = np.array([0.5, 0.7, 0.6, 0.65]), np.array([0.55, 0.6, 0.62, 0.58])
    margin = 0.1
    low = stats.ttest_ind(a + margin, b, equal_var=False, alternative="greater").pvalue
    high = stats.ttest_ind(a - margin, b, equal_var=False, alternative="less").pvalue
    assert cmp.tost(a, b, margin)["p"] == pytest.approx(max(low, high))


def test_holm_rejects_more_than_bonferroni_at_the_same_level():
    p = [0.01, 0.02, 0.03, 0.5]
    # Bonferroni: 0.05 / 4 = 0.0125 rejects the first alone; Holm: 0.01 <= 0.0125,
    # 0.02 <= 0.05/3, 0.03 > 0.05/2 = 0.025 stops
    assert cmp.bonferroni(p).tolist() == [True, False, False, False]
    assert cmp.holm(p).tolist() == [True, False, False, False]
    p = [0.004, 0.013, 0.02, 0.9]
    assert cmp.bonferroni(p).tolist() == [True, False, False, False]
    assert cmp.holm(p).tolist() == [True, True, True, False]
    # order does not matter, NaN is never rejected nor counted
    assert cmp.holm([0.9, np.nan, 0.02, 0.004, 0.013]).tolist() == [
        False,
        False,
        True,
        True,
        True,
    ]


def test_probability_of_improvement():
    assert cmp.probability_of_improvement([3, 4], [1, 2]) == 1.0
    assert cmp.probability_of_improvement([1, 2], [3, 4]) == 0.0
    # 1 of 4 pairs wins, 1 ties (counts half): (1 + 0.5) / 4
    assert cmp.probability_of_improvement([1, 3], [2, 3]) == pytest.approx(0.375)
    u = stats.mannwhitneyu([0.3, 0.5, 0.9], [0.4, 0.5, 0.6]).statistic
    assert cmp.probability_of_improvement([0.3, 0.5, 0.9], [0.4, 0.5, 0.6]) == u / 9


def test_bootstrap_ranks_sure_and_unsure():
    seeds = {"far": [10.0, 10.1, 9.9], "mid": [5.0, 5.1, 4.9], "low": [0.0, 0.1, -0.1]}
    table = cmp.bootstrap_ranks(seeds, resamples=500).set_index("setting")
    # no resample can change the order of settings 5 points apart with 0.1 spread
    assert table.loc["far", "p_first"] == 1.0
    assert table[["rank", "rank_low", "rank_high"]].loc["mid"].tolist() == [2, 2, 2]
    overlapping = {"a": [1.0, 0.0, 2.0], "b": [1.1, 0.1, 1.9]}
    table = cmp.bootstrap_ranks(overlapping, resamples=2000).set_index("setting")
    assert 0.2 < table.loc["a", "p_first"] < 0.8
    assert table.loc["a", "p_first"] + table.loc["b", "p_first"] == pytest.approx(1.0)
    assert (table["rank_low"] == 1).all() and (table["rank_high"] == 2).all()


def test_compare_to_reference_names_every_test():
    seeds = {
        "ref": [1.0, 1.01, 0.99],
        "same": [1.0, 1.005, 0.995],
        "better": [2.0, 2.01, 1.99],
    }
    table = cmp.compare_to_reference(seeds, "ref", margin=0.05).set_index("setting")
    assert table.loc["ref", "holm"] == "reference"
    assert table.loc["same", "tost"] == cmp.EQUIVALENT
    assert table.loc["better", "holm"] == "better"
    assert table.loc["better", "bonferroni"] == "better"
    assert table.loc["better", "p_improvement"] == 1.0
    assert table.loc["same", "holm"] == "not told apart"


def test_holm_counts_a_family_larger_than_its_p_values():
    """A family of m comparisons where some have no p-value (a diverged setting): Holm divides
    by m all the same, as with_family_verdicts' Bonferroni does."""
    p = [0.02, np.nan, np.nan]
    assert cmp.holm(p).tolist() == [True, False, False]  # m = 1: 0.02 <= 0.05
    assert cmp.holm(p, m=3).tolist() == [False, False, False]  # 0.02 > 0.05 / 3


def test_welch_p_matches_scipy_and_is_nan_without_spread():
    a, b = [1.0, 1.2, 0.9], [0.8, 0.85, 0.7]
    assert cmp.welch_p(a, b) == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)
    assert np.isnan(cmp.welch_p([1.0, 1.0], [1.0, 1.0]))
    assert np.isnan(cmp.welch_p([1.0], [1.0, 2.0]))


def test_compare_to_reference_corrects_over_the_family_it_is_given():
    """The summary's tests leave a diverged setting out of the table but not out of the
    family: with 20 comparisons a p-value near 0.01 no longer rejects, with 1 it does."""
    seeds = {"ref": [1.0, 1.02, 0.98], "better": [1.06, 1.07, 1.04]}
    alone = cmp.compare_to_reference(seeds, "ref", margin=0.01).set_index("setting")
    wide = cmp.compare_to_reference(seeds, "ref", margin=0.01, family=20).set_index("setting")
    p = alone.loc["better", "p"]
    assert 0.05 / 20 < p <= 0.05, p  # the case the family decides
    assert alone.loc["better", "holm"] == alone.loc["better", "bonferroni"] == "better"
    assert wide.loc["better", "holm"] == wide.loc["better", "bonferroni"] == "not told apart"
