"""Tuning curves (harness.tuning_curves): the expected quality of the trial picked among k random
trials equals the average over every k-subset, exactly; the test set never picks."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from harness import analysis, report, tuning_curves
from harness.results import identity_hash, load_runs, with_config_columns


def trials_table(val, test, loss, diverged=()) -> pd.DataFrame:
    """A runs table of one net x optimizer tuned over len(val) learning rates, one seed each."""
    rows = []
    for i, (v, t, train_loss) in enumerate(zip(val, test, loss, strict=True)):
        identity = {"model.name": "net2", "optimizer.name": "adam", "optimizer.lr": 10.0**-i}
        rows.append(
            {
                "model": "net2",
                "optimizer": "adam",
                "schedule": "constant",
                "lr": 10.0**-i,
                "momentum": np.nan,
                "batch_size": 128,
                "hidden": "100",
                "seed": 0,
                "status": "diverged" if i in diverged else "completed",
                "quality": "accuracy",
                "final_val_accuracy": v,
                "final_test_accuracy": t,
                "best_test_accuracy": t,
                "final_train_loss": train_loss,
                "config": json.dumps(identity, sort_keys=True),
                "config_id": identity_hash(identity),
                "run_dir": f"run{i}",
            }
        )
    return with_config_columns(pd.DataFrame(rows))


# Six trials with a tie on validation (broken by the training loss) and a diverged trial whose
# last validation accuracy looked good: it must rank last all the same.
VAL = [0.90, 0.95, 0.95, 0.80, 0.97, 0.60]
TEST = [0.91, 0.93, 0.96, 0.79, 0.90, 0.62]
LOSS = [0.3, 0.2, 0.1, 0.5, 0.4, 0.9]
DIVERGED = (4,)


def brute_force(val, test, loss, diverged, k):
    """The mean over every k-subset of (val, test) of the trial best_configs' rule picks."""
    picks = []
    for subset in itertools.combinations(range(len(val)), k):
        best = min(subset, key=lambda i: (i in diverged, -val[i], loss[i], 10.0**-i))
        picks.append((val[best], test[best]))
    return np.mean(picks, axis=0)


def test_expected_pick_equals_the_mean_over_every_subset_of_trials():
    curves = tuning_curves.tuning_curves(trials_table(VAL, TEST, LOSS, DIVERGED))
    assert curves["k"].tolist() == [1, 2, 3, 4, 5, 6] and set(curves["n_trials"]) == {6}
    for _, row in curves.iterrows():
        val, test = brute_force(VAL, TEST, LOSS, DIVERGED, int(row["k"]))
        assert row["expected_val"] == pytest.approx(val, abs=1e-12)
        assert row["expected_test"] == pytest.approx(test, abs=1e-12)
    # k = 1: the mean over all trials; k = N: the single best trial (not the diverged 0.97; of
    # the tie at 0.95, the lower training loss).
    assert curves["expected_val"].iloc[0] == pytest.approx(np.mean(VAL))
    assert curves["expected_val"].iloc[-1] == 0.95 and curves["expected_test"].iloc[-1] == 0.96
    assert curves["p_best"].tolist() == pytest.approx([k / 6 for k in range(1, 7)])


def test_the_pick_order_is_best_configs_order():
    runs = trials_table(VAL, TEST, LOSS, DIVERGED)
    summary = analysis.summarize(runs)
    ranked = tuning_curves.ranked_trials(summary, (analysis.LR_KEY,), "final_val_accuracy")
    assert ranked["lr"].tolist() == [1e-2, 1e-1, 1.0, 1e-3, 1e-5, 1e-4]
    assert ranked.iloc[0]["config_id"] == analysis.best_configs(summary).iloc[0]["config_id"]


def test_the_test_set_moves_only_the_reported_curve():
    runs = trials_table(VAL, TEST, LOSS, DIVERGED)
    shuffled = runs.assign(final_test_accuracy=runs["final_test_accuracy"].to_numpy()[::-1])
    a, b = tuning_curves.tuning_curves(runs), tuning_curves.tuning_curves(shuffled)
    pd.testing.assert_series_equal(a["expected_val"], b["expected_val"])
    assert not np.allclose(a["expected_test"], b["expected_test"])


def test_curves_table_and_figure_on_a_real_sweep(smoke_sweep):
    runs = load_runs(smoke_sweep)
    runs = runs[runs["batch_size"] == 128]
    curves = tuning_curves.tuning_curves(runs)
    # smoke: per net, sgd has 3 rates, momentum and adam 2
    assert curves.groupby(["net", "optimizer"])["n_trials"].first().to_dict() == {
        (net, optimizer): n
        for net in ("net1", "net2")
        for optimizer, n in (("adam", 2), ("momentum", 2), ("sgd", 3))
    }
    for _, group in curves.groupby(["net", "setting"]):
        assert group["expected_val"].is_monotonic_increasing  # more trials never hurt
    table = tuning_curves.tuning_table(curves)
    assert list(table.columns) == [
        "net",
        "setting",
        "optimizer",
        "N",
        "k = 1",
        "k = 2",
        "k = 4",
        "k = N",
    ]
    fig = report.tuning_curve_figure(curves)
    assert len(fig.get_axes()) == 2 and all(ax.get_yscale() == "log" for ax in fig.get_axes())
    with pytest.raises(report.Skipped, match="not a tuning study"):
        report._tuning_curves(runs, None)
