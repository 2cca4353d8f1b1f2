"""Selection never sees the test set: every rule that picks a configuration (a best rate, a best
config, a star, a bold verdict, the fastest rate, the profiles' per-problem best, the course's
rates, the settings a tuning study passes on) picks the same when the test metrics of a sweep
are permuted between its runs."""

import json
import sys

import numpy as np
import pandas as pd
import pytest
from smoke_sweep import TARGET

from conftest import REPO
from harness import analysis, report, style
from harness.config.identity import identity_hash
from harness.report.summary import quality_at_time_markdown
from harness.results import config_keys, load_curves, load_runs, with_config_columns
from harness.tuning import selection, tuning_curves

sys.path.insert(0, str(REPO / "experiments"))
import course_lr  # noqa: E402


def _corrupted(runs: pd.DataFrame, curves: pd.DataFrame, seed: int = 0):
    """The same sweep with every test metric shuffled between runs (and, in the curves, between
    all recorded test values of a metric): whatever the test set said is now noise."""
    rng = np.random.default_rng(seed)
    runs = runs.copy()
    for column in [c for c in runs if c.startswith(("final_test_", "best_test_"))]:
        runs[column] = rng.permutation(runs[column].to_numpy())
    curves = curves.copy()
    for metric in [m for m in curves["metric"].unique() if m.startswith("test_")]:
        rows = curves["metric"] == metric
        curves.loc[rows, "value"] = rng.permutation(curves.loc[rows, "value"].to_numpy())
    return runs, curves


def _bold(table: pd.DataFrame) -> dict:
    """Which setting each row of a final-metrics table marks as the verdict."""
    return {
        net: [s for s, v in row.items() if str(v).startswith("**")] for net, row in table.iterrows()
    }


def _bold_cells(lines: list[str]) -> list[tuple[str, int]]:
    """Which cell of each row of Markdown tables is bold: (row label, column)."""
    rows = [line.split(" | ") for line in lines if line.startswith("| ") and "**" in line]
    return [(cells[0], i) for cells in rows for i, c in enumerate(cells) if c.startswith("**")]


def _front(runs: pd.DataFrame) -> list[list[float]]:
    """The step times of the settings on each panel's Pareto front (its dashed line)."""
    figure = report.quality_against_step_time_figure(runs)
    lines = [line for ax in figure.axes for line in ax.lines if line.get_linestyle() == "--"]
    return [sorted(map(float, line.get_xdata())) for line in lines]


def picks(runs: pd.DataFrame, curves: pd.DataFrame) -> dict[str, object]:
    """Every choice the harness makes from a sweep's tables, by rule."""
    summary = analysis.summarize(runs)
    best = analysis.best_configs(summary)
    ttt = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, TARGET))
    return {
        "best_configs": sorted(best["config_id"]),
        "best_configs of a summary of test metrics (quality against step time)": sorted(
            analysis.best_configs(analysis.summarize(runs, ["final_test_accuracy"]))["config_id"]
        ),
        "best_at_reference_batch": sorted(analysis.best_at_reference_batch(runs)[1]["config_id"]),
        "lr_table (lr sensitivity star)": sorted(analysis.lr_table(runs, 128)[1]["config_id"]),
        "batch_size_table": sorted(analysis.batch_size_table(runs)["config_id"]),
        "fastest_configs (iterations)": sorted(
            analysis.fastest_configs(ttt, "iterations_to_target")["config_id"]
        ),
        "fastest_configs (seconds)": sorted(
            analysis.fastest_configs(ttt, "seconds_to_target")["config_id"]
        ),
        "profile_tables": {
            k: v.to_dict() for k, v in analysis.profile_tables(runs, curves, TARGET).items()
        },
        "configs_table star": report.configs_table(summary, best)[""].tolist(),
        "final_metrics_table bold": _bold(report.final_metrics_table(best)),
        "quality_at_time bold (summary.md)": _bold_cells(quality_at_time_markdown(runs, curves)),
        "course rates (experiments/course_lr.py)": sorted(course_lr.choose(runs)["config_id"]),
        "against the course's best (its reference and rates; experiments/zoo_reading.py)": (
            analysis.against_reference(runs, style.COURSE_OPTIMIZERS)[
                ["net", "setting", "lr", "reference"]
            ]  # in the order of the gain, which the test set reports
            .sort_values(["net", "setting"])
            .to_dict("records")
        ),
        "tuning selection (harness.tuning.selection)": sorted(
            selection.choose(runs, ["optimizer.lr"], [])["config_id"]
        ),
        "quality against step time (its Pareto front)": _front(runs),
        "tuning curves (the pick among k trials)": tuning_curves.tuning_curves(runs, curves)[
            "expected_val"
        ].tolist(),
    }


@pytest.fixture(scope="module")
def tables(smoke_sweep):
    runs = load_runs(smoke_sweep)
    return runs, load_curves(smoke_sweep, runs)


def test_the_smoke_sweep_has_a_validation_split(tables):
    runs, curves = tables
    assert analysis.has_validation(runs) and analysis.has_validation(curves)
    assert analysis.selection_metric(runs) == "final_val_accuracy"
    assert analysis.selection_split(curves) == "val"


@pytest.mark.slow
def test_permuting_the_test_metrics_changes_no_pick(tables):
    runs, curves = tables
    before = picks(runs, curves)
    for seed in range(3):
        after = picks(*_corrupted(runs, curves, seed))
        changed = [rule for rule in before if before[rule] != after[rule]]
        assert not changed, f"picks that read the test set: {changed}"


def test_the_corruption_would_change_picks_made_on_the_test_set(tables):
    """The test above can fail: the same corruption moves picks made by test accuracy."""
    runs, curves = tables
    by_test = "final_test_accuracy"
    before = analysis.best_configs(analysis.summarize(runs), by=by_test)["config_id"]
    moved = 0
    for seed in range(3):
        bad_runs, bad_curves = _corrupted(runs, curves, seed)
        after = analysis.best_configs(analysis.summarize(bad_runs), by=by_test)["config_id"]
        moved += set(before) != set(after)
        ttt = analysis.time_to_target(bad_runs, bad_curves, TARGET, metric="test_accuracy")
        assert not ttt.equals(analysis.time_to_target(runs, curves, TARGET, metric="test_accuracy"))
    assert moved >= 2


def test_runs_without_validation_fall_back_to_the_test_set_and_say_so(tables):
    runs, _ = tables
    old = runs.drop(columns=[c for c in runs if "_val_" in c])
    assert analysis.selection_metric(old) == "final_test_accuracy"
    assert "the test set chose" in analysis.selection_text(old)
    assert analysis.selection_text(runs) == "chosen by final validation accuracy"


def test_a_folder_mixing_runs_without_validation_says_how_those_were_chosen(tables):
    """Where some configs have no validation split (a folder mixing studies), the rule ranks
    their rates by final training loss: the titles and headers say so, never the test set."""
    runs, _ = tables
    net1 = runs["model"] == "net1"
    mixed = runs.copy()
    mixed.loc[net1, [c for c in runs if c.startswith("final_val_")]] = float("nan")
    n = mixed.loc[net1, "config_id"].nunique()
    assert analysis.selection_text(mixed) == (
        f"chosen by final validation accuracy ({n} configs without a validation split: "
        "chosen by final training loss)"
    )
    summary = analysis.summarize(mixed)
    assert analysis.without_validation(summary) == n
    best = analysis.best_configs(summary).set_index("config_id")
    for config_id in best.index[best["net"] == "net1"]:  # the lowest training loss of its rates
        group = analysis.config_key(summary, without=[analysis.LR_KEY])
        rates = summary[group == group[summary["config_id"] == config_id].iloc[0]]
        assert rates["final_train_loss_mean"].min() == best.loc[config_id, "final_train_loss_mean"]


def test_a_phase_key_that_varies_in_the_tuning_study_changes_no_choice(tables):
    """`${tuned:}` chooses among a group's trials whatever their phase keys (a shortlist's
    trials at another length): the best trial of each group given another `train.eval_every`
    is still chosen, as the rule chooses with the phase key the same everywhere."""
    runs, _ = tables
    before = selection.choose(runs, ["optimizer.lr"], ["train.eval_every"])
    moved = runs.copy()
    best = moved["config_id"].isin(before["config_id"])

    def another_phase(config: str) -> str:
        identity = json.loads(config)
        identity["train.eval_every"] = identity.get("train.eval_every", 0) + 1
        return json.dumps(identity, sort_keys=True)

    moved.loc[best, "config"] = moved.loc[best, "config"].map(another_phase)
    moved["config_id"] = [identity_hash(json.loads(c)) for c in moved["config"]]
    moved = with_config_columns(moved.drop(columns=config_keys(moved)))
    after = selection.choose(moved, ["optimizer.lr"], ["train.eval_every"])
    assert len(after) == len(before) > 1
    assert after.set_index("group")["lr"].to_dict() == before.set_index("group")["lr"].to_dict()
