"""The decayed-schedule study's optimizers, per net: the course's nine and the Schedule-Free family
(`tune.optimizers` of conf/experiment/zoo_decay_tune.yaml) and the constant-rate zoo's 15 best.

    python experiments/zoo_decay_members.py [results/zoo]

The 15 best of a net are its optimizers of the constant-rate zoo (phase 3), each at its rate
chosen on validation, ranked by their mean final validation accuracy over seeds (a setting with a
diverged seed ranks last); those already in the preset's list are skipped, and so are those that
work out their own step size (no `optimizer.lr`, ALIG): a schedule has no rate of theirs to decay
(`validate_schedule` refuses them). The test set chooses nothing. Writes <zoo>/decay_members.md
with the 15 per net and, per net, the commands of the study's three phases over that net's
members, each phase's nets in one sweep folder:

    harness-train -m experiment=zoo_decay_tune model=net1 'tune.optimizers="..."' sweep.append=true
    # then experiment=zoo_decay_shortlist and experiment=zoo_decay, the same way

(the list quoted: unquoted, Hydra would sweep over its names one by one). A phase's preset alone
sweeps the preset's list on every net; the members differ by net, so each phase is run once per
net: every net's phase 1, then every net's phase 2, then phase 3.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from harness import analysis, report
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "conf" / "experiment" / "zoo_decay_tune.yaml"
BEST = 15  # the zoo's optimizers per net that join the course's nine and Schedule-Free
PHASES = ("zoo_decay_tune", "zoo_decay_shortlist", "zoo_decay")


def preset_members() -> list[str]:
    """The optimizers every net of the decayed study tunes: the preset's `tune.optimizers`."""
    listed = yaml.safe_load(PRESET.read_text())["tune"]["optimizers"]
    return [name.strip() for name in listed.split(",") if name.strip()]


def best_by_validation(runs: pd.DataFrame, excluded: list[str], count: int) -> pd.DataFrame:
    """Per net, the `count` optimizers (not in `excluded`) of highest mean final validation
    accuracy at their rate chosen on validation; settings with a diverged seed last. Optimizers
    with no rate (they set their own step size) cannot follow a decayed schedule: left out."""
    picked = analysis.best_at_reference_batch(runs)[1]
    picked = picked[~picked["optimizer"].isin(excluded) & picked["lr"].notna()].assign(
        clean=lambda t: t["n_diverged"] == 0
    )
    ranked = picked.sort_values(
        ["net", "clean", "final_val_accuracy_mean"], ascending=[True, False, False]
    )
    return ranked.groupby("net", sort=False).head(count)


def main(zoo: Path) -> str:
    if not zoo.is_dir():
        raise ConfigError(f"{zoo} is not a folder")
    runs = report.load_sweep_runs(zoo)  # its curves are not read
    if "final_val_accuracy" not in runs or runs["final_val_accuracy"].isna().all():
        raise ConfigError(f"{zoo} holds no validation accuracy to choose by (data.val_size=0)")
    members = preset_members()
    best = best_by_validation(runs, members, BEST)
    if best.empty:
        raise ConfigError(f"{zoo} holds no optimizer beyond the preset's {len(members)}")
    lines = [
        f"# The decayed study's members: the zoo's {BEST} best per net, by validation",
        "",
        f"From {zoo} (constant rate, phase 3): each optimizer at its rate chosen on "
        "validation, ranked by mean final validation accuracy over seeds; the preset's "
        f"{len(members)} (the course's nine, the Schedule-Free family) are in every net's list. "
        "Each phase runs once per net over its list: every net's phase 1, then every net's "
        "phase 2, then phase 3 (each command resumes where it stopped).",
        "",
    ]
    for net, rows in best.groupby("net", sort=True):
        table = pd.DataFrame(
            {
                "rank": range(1, len(rows) + 1),
                "optimizer": rows["optimizer"],
                "lr": rows["lr"].map("{:.3g}".format),
                "validation accuracy (%)": (100 * rows["final_val_accuracy_mean"]).round(2),
            }
        )
        names = ",".join([*members, *rows["optimizer"]])
        lines += [
            f"## {net}",
            "",
            markdown_table(table, index=False),
            "",
            "```bash",
            *[
                f"harness-train -m experiment={phase} model={rows['model'].iloc[0]} "
                f"'tune.optimizers=\"{names}\"' sweep.append=true"
                for phase in PHASES
            ],
            "```",
            "",
        ]
    text = "\n".join(lines)
    (zoo / "decay_members.md").write_text(text)
    return text


if __name__ == "__main__":
    run_reading(
        main,
        "The decayed study's members: <zoo>/decay_members.md.",
        {"zoo": ROOT / "results" / "zoo"},
    )
