"""The zoo's reading in numbers: what its write-up says of the study, drawn from its tables.

    python experiments/zoo_reading.py [results/zoo]

Writes <sweep>/reading.md, per net:

* **who beats the course's best:** every setting at its rate chosen on validation against the
  best of the course's nine optimizers (chosen the same way), with the 95 % interval of the
  gain in test accuracy (Welch's t over seeds: `analysis.against_reference`), and the same
  verdict with the interval widened for the net's m comparisons (Bonferroni: 1 - 0.05 / m), since
  among 130 settings a few intervals leave zero out by chance alone, and Holm's step-down
  beside it; TOST at ±0.2 points (equivalent / different / undecided), the probability that a
  seed beats one of the reference, and the bootstrap interval of each setting's rank
  (`report.significance`);
* **which are cheap to tune:** from the study the rates were tuned in (`report.tuning_study`:
  phase 1's random rates), the expected validation error after one trial and after all of them;
* **which are expensive per step:** one optimizer step of the net timed alone
  (`step_time_alone_s`), as a multiple of SGD's on the same net;
* **which fail:** the runs that diverged, the settings far below the course's best, and the
  catalogue's refusals (`catalogue.csv`, written by `experiments/zoo_catalogue.py` into
  `results/zoo`: beside the sweep, or in the `zoo` folder beside it).

Every pick is the validation set's; the test set only reports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from harness import analysis, report, style
from harness.analysis.reference import (
    BETTER,
    DIVERGED,
    REFERENCE,
    TIED,
    WORSE,
    with_family_verdicts,
)
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table
from harness.report.common import study_of
from harness.report.significance import comparison_table, margin_text
from harness.tuning import tuning_curves

ROOT = Path(__file__).resolve().parents[1]
LISTED = 10  # settings listed per net in each section
FAR_BELOW = 5.0  # points of test accuracy below the course's best that count as failing
# which names of the catalogue train, as experiments/zoo_catalogue.py writes it, under results/
CATALOGUE = Path("zoo") / "catalogue.csv"


def beats(runs: pd.DataFrame, versus: pd.DataFrame) -> list[str]:
    """Per net: the reference, how many settings the interval puts above and below it, and
    those above (with and without the correction for the net's number of comparisons)."""
    test = analysis.final_quality(runs)
    nets = analysis.net_labels(runs)
    lines = ["## Who beats the course's best", ""]
    course = set(nets[runs["optimizer"].isin(style.COURSE_OPTIMIZERS)])
    for net in sorted(set(nets) - set(versus["net"]), key=style.natural_key):
        why = (
            "every course optimizer's best setting has a seed that diverged or failed"
            if net in course
            else "none of the course's optimizers has a run on it"
        )
        lines += [f"### {net}", "", f"No reference: {why}.", ""]
    versus = with_family_verdicts(runs, versus, style.COURSE_OPTIMIZERS)
    study = study_of(runs)
    for net, rows in versus.groupby("net", sort=False):
        m = len(rows) - 1  # every setting but the reference
        reference = rows[rows["verdict"] == REFERENCE].iloc[0]
        named = study.setting(reference["setting"], reference["optimizer"])
        counts = rows["verdict"].value_counts()
        lines += [
            f"### {net}",
            "",
            f"Reference: {named} (lr {reference['lr']:.3g}), "
            f"{100 * reference[f'{test}_mean']:.2f} % test accuracy. Of {m} other settings: "
            + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS)
            + " at 95 %"
            + (
                f"; with Bonferroni over {m}: "
                + ", ".join(f"{rows['bonferroni'].eq(v).sum()} {v}" for v in VERDICTS[:2])
                if m
                else ""
            )
            + ".",
            "",
        ]
        tested, margin = comparison_table(runs, versus, net, study)
        tost_column = next(c for c in tested if c.startswith("TOST"))
        tost = tested[tost_column].str.split().str[0].value_counts()
        first = tested.assign(_rank=tested["rank [95 % bootstrap]"].str.split().str[0].astype(int))
        first = first.sort_values("_rank", kind="stable").iloc[0]
        lines += [
            f"After Holm over {m}: "
            + ", ".join(f"{rows['holm'].eq(v).sum()} {v}" for v in VERDICTS[:2])
            + f". TOST at {margin_text(test, margin)} of test accuracy (two one-sided Welch "
            f"tests at 5 %): {tost.get('equivalent', 0)} equivalent to the reference, "
            f"{tost.get('different', 0)} different, {tost.get('undecided', 0)} undecided "
            "(settings with a diverged seed left out). How sure is #1: "
            f"{first['setting']}, first in {first['P(#1)']} of 2000 bootstrap resamples of the "
            f"seeds, its rank's 95 % interval {first['rank [95 % bootstrap]'].split()[1]}.",
            "",
        ]
        better = rows[rows["verdict"] == BETTER]
        if len(better):
            pairs = zip(rows["setting"], rows["optimizer"], strict=True)
            named = {s: study.setting(s, o) for s, o in pairs}
            table = report.reference_table(better, net, named)  # the summary's, those rows
            at = table.columns.get_loc("verdict") + 1
            table.insert(at, "after Bonferroni", better["bonferroni"].to_numpy())
            table.insert(at + 1, "after Holm", better["holm"].to_numpy())
            extra = tested.reindex(better["config_id"])
            for column in (tost_column, "P(better than ref.)", "rank [95 % bootstrap]"):
                table[column] = extra[column].fillna("diverged").to_numpy()
            lines += [markdown_table(table, index=False), ""]
    return lines


VERDICTS = (BETTER, WORSE, TIED, DIVERGED)


def tuning_cost(sweep: Path) -> list[str]:
    """Per net: the settings with the lowest expected validation error after one random trial of
    the tuning study, with their error after all of its trials; a setting whose trials all end
    alike is marked: its tuned rate moves nothing on that net (cheap to tune for no merit)."""
    study = report.tuning_study(sweep)
    if isinstance(study, report.Skipped):
        return ["## Which are cheap to tune", "", f"Not drawn: {study}", ""]
    first, last = tuning_curves.budget_ends(study.curves)
    metric = analysis.selection_metric(study.runs)
    # outcomes as the tuning curves score them: a trial that diverged counts at its start
    scored = tuning_curves.scored_at_start(study.runs, study.trial_curves, [metric])
    table = pd.DataFrame(
        {
            "N": first["n_trials"],
            "one": 100 * (1 - first["expected_val"]),
            "all": 100 * (1 - last["expected_val"]),
            "outcomes": analysis.with_net(scored).groupby(["net", "setting"])[metric].nunique(),
        }
    ).reset_index()
    lines = [
        "## Which are cheap to tune",
        "",
        f"Expected validation error (%) of the trial picked after one random trial and after "
        f"all N ({study.trials_text(_shown(study.sweep))}), the {LISTED} best after one trial per "
        "net; the course's nine ranked among all after one trial.",
        "",
    ]
    for net in sorted(table["net"].unique(), key=style.natural_key):
        rows = table[table["net"] == net].sort_values("one", kind="stable")
        rank = {s: i + 1 for i, s in enumerate(rows["setting"])}
        course = [s for s in rows["setting"] if s in style.COURSE_OPTIMIZERS]
        lines += [
            f"### {net}",
            "",
            markdown_table(_errors(rows.head(LISTED)), index=False),
            "",
            "The course's after one trial (rank of "
            f"{len(rows)}): " + ", ".join(f"{s} {rank[s]}" for s in course) + ".",
            "",
        ]
    return lines


def _errors(rows: pd.DataFrame) -> pd.DataFrame:
    alike = "every trial alike: the rate moves nothing"
    notes = [
        "nothing to tune" if n == 1 else alike if o == 1 else ""
        for n, o in zip(rows["N"], rows["outcomes"], strict=True)
    ]
    return pd.DataFrame(
        {
            "setting": rows["setting"],
            "N": rows["N"],
            "after one trial": rows["one"].map(lambda v: f"{v:.2f}"),
            "after all": rows["all"].map(lambda v: f"{v:.2f}"),
            "note": notes,
        }
    )


def step_cost(runs: pd.DataFrame) -> list[str]:
    """Per net: the costliest optimizer steps, timed alone, as multiples of SGD's."""
    if "step_time_alone_s" not in runs or runs["step_time_alone_s"].isna().all():
        why = "no run has a step time measured alone (runs from before the calibration)"
        return ["## Which are expensive per step", "", f"Not drawn: {why}", ""]
    steps = (
        analysis.with_net(runs)
        .groupby(["net", "setting"], sort=False)["step_time_alone_s"]
        .mean()
        .dropna()
    )
    lines = [
        "## Which are expensive per step",
        "",
        "One optimizer step of the net (forward, backward, update) timed alone, in ms, and as a "
        f"multiple of SGD's; the {LISTED} costliest per net and the median of all.",
        "",
    ]
    for net in sorted(steps.index.unique("net"), key=style.natural_key):
        per = steps.loc[net].sort_values(ascending=False)
        sgd = per.get("sgd")
        if sgd is None:
            lines += [f"### {net}", "", "No multiple: SGD has no step time on this net.", ""]
            continue
        top = per.head(LISTED)
        table = pd.DataFrame(
            {
                "setting": top.index,
                "step (ms)": (1000 * top).map(lambda v: f"{v:.2f}").to_numpy(),
                "× SGD": (top / sgd).map(lambda v: f"{v:.1f}").to_numpy(),
            }
        )
        lines += [
            f"### {net}",
            "",
            f"SGD {1000 * sgd:.2f} ms; the median setting {per.median() / sgd:.1f}× SGD.",
            "",
            markdown_table(table, index=False),
            "",
        ]
    return lines


def failures(sweep: Path, runs: pd.DataFrame, versus: pd.DataFrame) -> list[str]:
    """The runs that diverged, the settings far below the course's best, the refusals."""
    test = analysis.final_quality(runs)
    far = versus[versus["gain"] < -FAR_BELOW / 100]
    ended = runs[analysis.ended_early(runs)]
    failed = (ended["status"] != "diverged").sum()
    lines = [
        "## Which fail, and why",
        "",
        f"{len(ended) - failed} of {len(runs)} runs diverged"
        + (f" and {failed} failed (the optimizer's step raised)" if failed else "")
        + (":" if len(ended) else "."),
        "",
    ]
    if len(ended):
        columns = ["model", "optimizer", "lr", "seed", "status", "diverged_at"]
        at = ended["diverged_at"].map(lambda i: "" if pd.isna(i) else f"{int(i):,}")
        lines += [
            markdown_table(
                ended[columns].assign(diverged_at=at).rename(columns={"diverged_at": "at"}),
                index=False,
            ),
            "",
        ]
    lines += [
        f"Settings more than {FAR_BELOW:g} points of test accuracy below the course's best, "
        f"every seed completed ({len(far)}; a setting with a diverged seed is among the runs "
        "above):",
        "",
    ]
    if len(far):
        table = pd.DataFrame(
            {
                "net": far["net"],
                "setting": far["setting"],
                "lr": far["lr"].map(lambda v: "none" if pd.isna(v) else f"{v:.3g}"),
                "test accuracy (%)": (100 * far[f"{test}_mean"]).map(lambda v: f"{v:.2f}"),
            }
        )
        lines += [markdown_table(table, index=False), ""]
    found = [f for f in (sweep / CATALOGUE.name, sweep.parent / CATALOGUE) if f.exists()]
    if found:
        catalogue = pd.read_csv(found[0])
        refused = catalogue[catalogue["outcome"] == "refused"].drop_duplicates("name")
        written = os.path.relpath(found[0].with_suffix(".md"), sweep)
        lines += [
            f"Refused before training ({len(refused)} names of {catalogue['name'].nunique()}; "
            f"`{written}`):",
            "",
            markdown_table(refused[["name", "reason"]], index=False),
            "",
        ]
    return lines


def _shown(folder: Path) -> str:
    """A folder as the committed reading names it: from the repository's root where it is
    inside (no machine's absolute path), else as given."""
    folder = folder.resolve()
    return str(folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder)


def _count(low: int, high: int, what: str) -> str:
    """'3 seeds', '1-3 seeds', '1 seed'."""
    return f"{low}{f'-{high}' if high != low else ''} {what}{'s' if high > 1 else ''}"


def main(sweep: Path) -> str:
    if not sweep.is_dir():
        raise ConfigError(f"{sweep} is not a folder")
    runs = report.load_sweep_runs(sweep)  # its curves are not read: 5 million rows
    if analysis.quality(runs) != "accuracy":
        raise ConfigError(
            f"the zoo's reading is of classification accuracy; {sweep} reports "
            f"{analysis.quality(runs)}"
        )
    versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    if versus.empty:
        raise ConfigError(f"{sweep} holds none of the course's optimizers to read it against")
    seeds = runs.groupby("config_id")["seed"].nunique()
    text = "\n".join(
        [
            f"# The zoo's reading: {_shown(sweep)}",
            "",
            f"{len(runs)} runs, {runs['optimizer'].nunique()} optimizers, "
            f"{_count(seeds.min(), seeds.max(), 'seed')} per configuration; "
            f"{analysis.selection_text(runs)}, test accuracy reports.",
            "",
            *beats(runs, versus),
            *tuning_cost(sweep),
            *step_cost(runs),
            *failures(sweep, runs, versus),
        ]
    )
    (sweep / "reading.md").write_text(text)
    return text


if __name__ == "__main__":
    run_reading(
        main,
        "The zoo's reading in numbers: <sweep>/reading.md.",
        {"sweep": ROOT / "results" / "zoo"},
    )
