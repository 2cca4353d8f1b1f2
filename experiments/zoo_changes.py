"""What the faithful zoo changed in the verdict: the constant-rate zoo (every optimizer at its
library's defaults, its rate searched in its own range) against the earlier one
(`results/zoo_wide`: one range, 1e-4..3, for every optimizer; five optimizers' defaults wrong,
`zoo_ranges.CHANGED_DEFAULTS`).

    python experiments/zoo_changes.py [results/zoo] [results/zoo_wide]

Writes <new>/changes.md, per net: each study's reference (the best of the course's nine, chosen on
validation), the number of each verdict against it at 95 % and after Bonferroni's correction for
the net's comparisons, and every optimizer whose verdict changed, with its rate and test accuracy
in each study. The optimizers whose defaults changed are listed whatever their verdicts: their
earlier verdicts were the harness's error. Verdicts as in experiments/zoo_reading.py
(`analysis.against_reference`); every pick is the validation set's, the test set only reports.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from zoo_ranges import CHANGED_DEFAULTS

from harness import analysis, report, style
from harness.analysis.reference import BETTER, DIVERGED, REFERENCE, TIED, WORSE
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
VERDICTS = (BETTER, WORSE, TIED, DIVERGED)


def verdicts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per net and setting: its rate, test accuracy (mean and 95 % CI over seeds) and its
    verdict against the net's reference, at 95 % and after Bonferroni over the net's other
    settings."""
    test = analysis.final_quality(runs)
    versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    if versus.empty:
        return versus
    frames = []
    for net, rows in versus.groupby("net", sort=False):
        m = len(rows) - 1
        strict = analysis.against_reference(runs, style.COURSE_OPTIMIZERS, 1 - 0.05 / max(m, 1))
        strict = strict[strict["net"] == net].set_index("config_id")["verdict"]
        frames.append(rows.assign(bonferroni=rows["config_id"].map(strict)))
    return (
        pd.concat(frames)
        .rename(columns={f"{test}_mean": "test", f"{test}_ci": "test_ci"})
        .set_index(["net", "setting"])[
            ["lr", "test", "test_ci", "reference", "verdict", "bonferroni"]
        ]
    )


def _percent(mean: float, ci: float) -> str:
    return f"{100 * mean:.2f} ± {100 * ci:.2f}" if pd.notna(ci) else f"{100 * mean:.2f}"


def _reference(rows: pd.DataFrame) -> str:
    ref = rows[rows["verdict"] == REFERENCE].iloc[0]
    return f"{ref.name} (lr {ref['lr']:.3g}, {100 * ref['test']:.2f} %)"


def _counts(before: pd.Series, now: pd.Series, kinds) -> str:
    return ", ".join(f"{kind} {before.eq(kind).sum()} → {now.eq(kind).sum()}" for kind in kinds)


def _moves(before: pd.Series, now: pd.Series) -> list[str]:
    """'worse → not told apart' where a verdict changed, the verdict alone where it did not."""
    return [b if b == n else f"{b} → {n}" for b, n in zip(before, now, strict=True)]


def net_section(net: str, new: pd.DataFrame, old: pd.DataFrame) -> list[str]:
    now, before = new.loc[net], old.loc[net]
    both = now.add_suffix("_now").join(before.add_suffix("_before"), how="inner")
    changed = both[
        (both["verdict_now"] != both["verdict_before"])
        | (both["bonferroni_now"] != both["bonferroni_before"])
        | both.index.isin(CHANGED_DEFAULTS)
    ].sort_values("test_now", ascending=False)
    only = [
        f"{len(side)} only in the {name} study ({', '.join(side)})"
        for name, side in (
            ("new", now.index.difference(before.index)),
            ("earlier", before.index.difference(now.index)),
        )
        if len(side)
    ]
    shown = pd.DataFrame(
        {
            "optimizer": [
                f"{name} (defaults)" if name in CHANGED_DEFAULTS else name for name in changed.index
            ],
            "lr, earlier": changed["lr_before"].map("{:.3g}".format),
            "lr, now": changed["lr_now"].map("{:.3g}".format),
            "test, earlier (%)": [
                _percent(m, c)
                for m, c in zip(changed["test_before"], changed["test_ci_before"], strict=True)
            ],
            "test, now (%)": [
                _percent(m, c)
                for m, c in zip(changed["test_now"], changed["test_ci_now"], strict=True)
            ],
            "at 95 %": _moves(changed["verdict_before"], changed["verdict_now"]),
            "after Bonferroni": _moves(changed["bonferroni_before"], changed["bonferroni_now"]),
        }
    )
    return [
        f"## {net}",
        "",
        f"Reference, earlier: {_reference(before)}; now: {_reference(now)}. Of the "
        f"{len(both)} optimizers both studies hold ({'; '.join(only) if only else 'and no other'}"
        f"), verdicts earlier → now, at 95 %: "
        f"{_counts(both['verdict_before'], both['verdict_now'], VERDICTS)}; after Bonferroni: "
        f"{_counts(both['bonferroni_before'], both['bonferroni_now'], VERDICTS[:2])}. "
        f"{len(changed)} listed: a verdict changed, or the optimizer's defaults did.",
        "",
        markdown_table(shown, index=False),
        "",
    ]


def main(new_sweep: Path, old_sweep: Path) -> str:
    """Write <new_sweep>/changes.md and return its text."""
    tables = []
    for sweep in (new_sweep, old_sweep):
        if not sweep.is_dir():
            raise ConfigError(f"{sweep} is not a folder")
        table = verdicts(report.load_sweep_runs(sweep))
        if table.empty:
            raise ConfigError(f"{sweep} holds none of the course's optimizers to read it against")
        tables.append(table)
    new, old = tables
    nets = [n for n in new.index.unique("net") if n in old.index.unique("net")]
    if not nets:
        raise ConfigError(f"{new_sweep} and {old_sweep} hold no net in common")
    lines = [
        f"# What the zoo's verdict changed: {new_sweep.name} against {old_sweep.name}",
        "",
        "Each optimizer at its rate chosen on validation, against its net's reference (the "
        "course's best on validation), by its test accuracy over seeds (Welch's 95 % interval "
        "of the difference; after Bonferroni, widened for the net's number of comparisons).",
        "",
    ]
    for net in sorted(nets, key=style.natural_key):
        lines += net_section(net, new, old)
    text = "\n".join(lines)
    (new_sweep / "changes.md").write_text(text)
    return text


if __name__ == "__main__":
    run_reading(
        main,
        "What the zoo's verdict changed against an earlier zoo: <new>/changes.md.",
        {"new": ROOT / "results" / "zoo", "old": ROOT / "results" / "zoo_wide"},
    )
