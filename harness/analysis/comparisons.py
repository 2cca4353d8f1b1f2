"""The comparisons the literature recommends for a few seeds per setting, each test named.

- `tost`: two one-sided Welch t-tests (Schuirmann 1987) of whether two settings' means differ
  by less than a margin m: "not told apart" becomes "equivalent within ±m" (both one-sided
  tests reject at alpha) or "undecided" (the seeds can tell neither a difference nor an
  equivalence). Equivalent exactly when the 1 - 2 alpha Welch interval lies inside (-m, m).
- `holm`: Holm's (1979) step-down correction of a family of p-values: the same family-wise
  error as Bonferroni's and never fewer rejections.
- `bootstrap_ranks`: how sure is #1? Each setting's rank among all, over bootstrap resamples of
  its seeds (each setting resampled on its own, a stratified bootstrap as in rliable, Agarwal
  et al. 2021): the share of resamples in which it ranks first, and the interval of its rank.
- `probability_of_improvement`: rliable's P(X > Y), the probability that a random seed of X
  scores higher than a random seed of Y (ties count one half): the Mann-Whitney U over the
  product of the sample sizes.

Every input is a list of final values per seed, higher better (turn a loss around first).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

EQUIVALENT, DIFFERENT, UNDECIDED = "equivalent", "different", "undecided"


def _welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(mean(a) - mean(b), its standard error, Welch-Satterthwaite degrees of freedom)."""
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else math.inf
    return float(a.mean() - b.mean()), se, df


def welch_p(values: Sequence[float], reference: Sequence[float]) -> float:
    """The two-sided p-value of Welch's t-test of mean(values) = mean(reference); NaN where
    fewer than two values on either side, or none of spread (`reference.welch_interval` has no
    interval then)."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return math.nan
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def tost(
    values: Sequence[float], reference: Sequence[float], margin: float, alpha: float = 0.05
) -> dict:
    """Two one-sided Welch t-tests of |mean(values) - mean(reference)| < `margin`: `p` the
    larger of the two one-sided p-values (equivalence at level alpha when p <= alpha), the
    difference, its 1 - 2 alpha interval, and the verdict: `equivalent` (within ±margin),
    `different` (the two-sided 1 - alpha Welch interval leaves zero out and is not inside the
    margin), else `undecided`. NaN p and `undecided` with fewer than two seeds on a side, or
    no spread on either (no interval to test)."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    none = {"difference": math.nan, "low": math.nan, "high": math.nan, "p": math.nan}
    if len(a) < 2 or len(b) < 2:
        return none | {"verdict": UNDECIDED}
    difference, se, df = _welch(a, b)
    if se == 0:
        return none | {"difference": difference, "verdict": UNDECIDED}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p_low = stats.t.sf((difference + margin) / se, df)  # H0: difference <= -margin
        p_high = stats.t.cdf((difference - margin) / se, df)  # H0: difference >= +margin
        half = stats.t.ppf(1 - alpha, df) * se
        two_sided = stats.t.ppf(1 - alpha / 2, df) * se
    p = float(max(p_low, p_high))
    if p <= alpha:
        verdict = EQUIVALENT
    elif abs(difference) > two_sided:
        verdict = DIFFERENT
    else:
        verdict = UNDECIDED
    return {
        "difference": difference,
        "low": difference - half,
        "high": difference + half,
        "p": p,
        "verdict": verdict,
    }


def holm(p_values: Sequence[float], alpha: float = 0.05, m: int | None = None) -> np.ndarray:
    """Holm's step-down: whether each hypothesis is rejected at family-wise error `alpha`. The
    p-values in increasing order, the k-th (from 1) rejected while p_(k) <= alpha / (m - k + 1)
    and every smaller one was; NaN p-values are never rejected. `m`: the family's size, by
    default the non-NaN p-values (a family may count comparisons that have none, such as a
    diverged setting's, to stay as strict as its Bonferroni)."""
    p = np.asarray(p_values, dtype=float)
    rejected = np.zeros(len(p), dtype=bool)
    valid = np.flatnonzero(~np.isnan(p))
    m = len(valid) if m is None else m
    for k, i in enumerate(valid[np.argsort(p[valid], kind="stable")], start=1):
        if p[i] > alpha / (m - k + 1):
            break
        rejected[i] = True
    return rejected


def bonferroni(p_values: Sequence[float], alpha: float = 0.05, m: int | None = None) -> np.ndarray:
    """Bonferroni: each hypothesis rejected where p <= alpha / m (`m`: the family's size, by
    default the non-NaN p-values, as `holm`'s)."""
    p = np.asarray(p_values, dtype=float)
    m = int((~np.isnan(p)).sum()) if m is None else m
    return np.where(np.isnan(p), False, p <= alpha / max(m, 1))


def bootstrap_ranks(
    seeds: Mapping[str, Sequence[float]],
    resamples: int = 2000,
    confidence: float = 0.95,
    rng: int | np.random.Generator = 0,
) -> pd.DataFrame:
    """How sure is each setting's rank? Per setting (`seeds`: its final values per seed, higher
    better): its rank by the mean (1 = best), and over `resamples` stratified bootstrap
    resamples (each setting's seeds resampled with replacement on their own) the share in which
    it ranks first (`p_first`) and the `confidence` interval of its rank (`rank_low`,
    `rank_high`; percentiles). Rows by rank. With three seeds a resample holds few distinct
    means: the interval is coarse, and says so by its width."""
    names = list(seeds)
    rng = np.random.default_rng(rng)
    samples = [np.asarray(seeds[n], dtype=float) for n in names]
    means = np.array([s.mean() for s in samples])
    boot = np.empty((resamples, len(names)))
    for j, s in enumerate(samples):
        picks = rng.integers(0, len(s), size=(resamples, len(s)))
        boot[:, j] = s[picks].mean(axis=1)
    # rank 1 = the highest mean; ties share the better rank
    ranks = (boot[:, None, :] > boot[:, :, None]).sum(axis=2) + 1
    tail = (1 - confidence) / 2
    observed = (means[None, :] > means[:, None]).sum(axis=1) + 1
    table = pd.DataFrame(
        {
            "setting": names,
            "mean": means,
            "rank": observed,
            "p_first": (ranks == 1).mean(axis=0),
            "rank_low": np.quantile(ranks, tail, axis=0, method="lower").astype(int),
            "rank_high": np.quantile(ranks, 1 - tail, axis=0, method="higher").astype(int),
        }
    )
    return table.sort_values(["rank", "setting"], ignore_index=True)


def probability_of_improvement(values: Sequence[float], reference: Sequence[float]) -> float:
    """rliable's P(X > Y): the probability that a random seed of `values` beats a random seed
    of `reference` (ties count one half), the Mann-Whitney U statistic over len(X) len(Y); 0.5:
    neither is ahead. NaN when either side is empty."""
    a, b = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    if not len(a) or not len(b):
        return math.nan
    greater = (a[:, None] > b[None, :]).sum()
    ties = (a[:, None] == b[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(a) * len(b)))


def compare_to_reference(
    seeds: Mapping[str, Sequence[float]],
    reference: str,
    margin: float,
    alpha: float = 0.05,
    family: int | None = None,
) -> pd.DataFrame:
    """Every setting of `seeds` (final values per seed, higher better) against `reference`:
    the difference of means, Welch's two-sided p-value, Bonferroni's and Holm's verdicts over
    the family (`family` comparisons; default: every setting of `seeds` but the reference),
    TOST at ±`margin` (equivalent / different / undecided), and P(X > reference). Rows in the
    order of `seeds`, the reference's row with NaN tests."""
    base = np.asarray(seeds[reference], dtype=float)
    rows = []
    for name, values in seeds.items():
        values = np.asarray(values, dtype=float)
        if name == reference:
            rows.append({"setting": name, "difference": 0.0, "p": math.nan})
            continue
        result = tost(values, base, margin, alpha)
        p = welch_p(values, base)
        rows.append(
            {
                "setting": name,
                "difference": float(values.mean() - base.mean()),
                "p": p,
                "tost_p": result["p"],
                "tost": result["verdict"],
                "p_improvement": probability_of_improvement(values, base),
            }
        )
    table = pd.DataFrame(rows)
    table["bonferroni"] = _verdicts(table, bonferroni(table["p"], alpha, family))
    table["holm"] = _verdicts(table, holm(table["p"], alpha, family))
    table.loc[table["setting"] == reference, ["bonferroni", "holm", "tost"]] = "reference"
    return table


def _verdicts(table: pd.DataFrame, rejected: np.ndarray) -> list[str]:
    return [
        ("better" if d > 0 else "worse") if r else "not told apart"
        for d, r in zip(table["difference"], rejected, strict=True)
    ]
