"""The newcomer among the field: the field's phase-3 runs and the newcomer's in one table, and
per net its rank and its comparisons, read as the zoo's reading reads the zoo
(experiments/zoo_reading.py): each setting at its rate chosen on validation, ranked by its gain
in mean final test accuracy over the field's reference (the best of the course's nine, chosen
on validation: `analysis.against_reference`), Welch's interval of every difference, and the
verdict corrected for the net's comparisons, the newcomer's one more among them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import analysis, style
from harness.analysis.reference import REFERENCE, welch_interval, with_family_verdicts
from harness.results import load_runs


@dataclass
class Ranked:
    """The combined table (`runs`), the newcomer's config per net, and against_reference's
    rows of every net with the family's verdicts (`versus`)."""

    runs: pd.DataFrame
    newcomer: dict[str, str]  # net -> config_id
    versus: pd.DataFrame


def combined_runs(
    field: Path,
    trained: Path | None,
    name: str,
    committed: dict[str, list[str]],
    smoke: bool = False,
) -> tuple[pd.DataFrame, dict[str, str]]:
    """The field's phase-3 runs with the newcomer's (`trained`: its phase-3 folder, or None
    where every net's runs are the field's own), and the newcomer's config per net. A trained
    newcomer's runs are named `name` in the optimizer column, so that it is a setting of its
    own beside a field optimizer of the same class (Adam with AMSGrad beside Adam) and never
    the field's reference; `committed`: the config hashes of the field's runs of a newcomer
    the field already holds, by net. A smoke run's keys that only its tiny runs change (the data's
    size, the lengths) are left out of the table: they would name every field setting."""
    paths = [field] if trained is None else [field, trained]
    runs = load_runs(paths)
    newcomer = {}
    for net, hashes in committed.items():
        mine = runs[(runs["model"] == net) & runs["config_hash"].isin(hashes)]
        newcomer[net] = mine["config_id"].iloc[0]
    if trained is not None:
        fresh = runs["run_dir"].map(lambda d: Path(str(d)).is_relative_to(trained.resolve()))
        if not fresh.any():  # run_dir relative to its own sweep folder
            own = set(load_runs(trained)["config_id"])
            fresh = runs["config_id"].isin(own)
        runs.loc[fresh, "optimizer"] = name
        for net, config_id in runs.loc[fresh, ["model", "config_id"]].drop_duplicates().values:
            newcomer[net] = config_id
        if smoke:
            smoke_keys = [
                c
                for c in runs
                if c.split(".")[0] in ("data", "train") and runs.loc[~fresh, c].nunique() <= 1
            ]
            runs = runs.drop(columns=smoke_keys)
    return runs, newcomer


def rank(runs: pd.DataFrame, newcomer: dict[str, str]) -> Ranked:
    versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    versus = with_family_verdicts(runs, versus, style.COURSE_OPTIMIZERS)
    return Ranked(runs, newcomer, versus)


def rank_rows(ranked: Ranked) -> pd.DataFrame:
    """One row per net: the newcomer's rank of the net's settings (the reading's order: by
    gain over the reference, settings with a diverged seed last), its mean final test
    accuracy (%) with its 95 % interval over seeds, its gain over the reference and over its
    neighbours above and below with Welch's 95 % intervals (points), and its verdicts: at 95 %,
    after Bonferroni and after Holm over the net's comparisons."""
    test = analysis.final_quality(ranked.runs)
    seeds = ranked.runs.groupby("config_id")[test].apply(list)
    rows = []
    for net, config_id in ranked.newcomer.items():
        table = ranked.versus[ranked.versus["net"] == net].reset_index(drop=True)
        at = table.index[table["config_id"] == config_id]
        if not len(at):
            continue
        i = int(at[0])
        me = table.iloc[i]
        row = {
            "net": net,
            "rank": i + 1,
            "of": len(table),
            "setting": me["setting"],
            "lr": me["lr"],
            "n_seeds": int(me["n_seeds"]),
            "mean": 100 * me[f"{test}_mean"],
            "low": 100 * (me[f"{test}_mean"] - me[f"{test}_ci"]),
            "high": 100 * (me[f"{test}_mean"] + me[f"{test}_ci"]),
            "reference": me["reference"],
            "gain": 100 * me["gain"],
            "gain_low": 100 * me["gain_low"],
            "gain_high": 100 * me["gain_high"],
            "verdict": me["verdict"],
            "bonferroni": me.get("bonferroni", math.nan),
            "holm": me.get("holm", math.nan),
            "family": len(table) - 1,
        }
        for side, j in (("above", i - 1), ("below", i + 1)):
            other = table.iloc[j] if 0 <= j < len(table) else None
            row[side] = "" if other is None else other["setting"]
            if other is None or me["n_diverged"] or other["n_diverged"]:
                gap = (math.nan,) * 3
            else:
                gap = welch_interval(seeds[config_id], seeds[other["config_id"]])
            row[f"vs_{side}"], row[f"vs_{side}_low"], row[f"vs_{side}_high"] = (
                100 * g for g in gap
            )
        rows.append(row)
    return pd.DataFrame(rows)


def is_reference(ranked: Ranked, net: str) -> bool:
    rows = ranked.versus[ranked.versus["net"] == net]
    return bool((rows["config_id"].eq(ranked.newcomer[net]) & rows["verdict"].eq(REFERENCE)).any())
