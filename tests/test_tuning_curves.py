"""Tuning curves (harness.tuning.tuning_curves): the expected quality of the trial picked among k
random trials equals the average over every k-subset, exactly; the test set never picks."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from harness import analysis, report
from harness.config.identity import identity_hash
from harness.results import load_curves, load_runs, with_config_columns
from harness.tuning import tuning_curves


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
                "higher_is_better": True,
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


START_VAL, START_TEST = 0.125, 0.0625  # every run's evaluation at iteration 0 (dyadic: exact)


def at_start(runs: pd.DataFrame, val=START_VAL, test=START_TEST) -> pd.DataFrame:
    """The curves tuning curves read of `runs`: each run's evaluation at iteration 0."""
    rows = [
        {"run_dir": d, "iteration": 0, "metric": metric, "value": value}
        for d in runs["run_dir"]
        for metric, value in (("val_accuracy", val), ("test_accuracy", test))
    ]
    return pd.DataFrame(rows)


def curves_of(runs: pd.DataFrame) -> pd.DataFrame:
    return tuning_curves.tuning_curves(runs, at_start(runs))


# Six trials with a tie on validation (broken by the training loss) and a diverged trial whose
# last validation accuracy looked good: it must rank last all the same.
VAL = [0.90, 0.95, 0.95, 0.80, 0.97, 0.60]
TEST = [0.91, 0.93, 0.96, 0.79, 0.90, 0.62]
LOSS = [0.3, 0.2, 0.1, 0.5, 0.4, 0.9]
DIVERGED = (4,)


def brute_force(val, test, loss, diverged, k):
    """The mean over every k-subset of (val, test) of the trial best_configs' rule picks, a
    diverged one scored at its start."""
    picks = []
    for subset in itertools.combinations(range(len(val)), k):
        best = min(subset, key=lambda i: (i in diverged, -val[i], loss[i], 10.0**-i))
        picks.append((START_VAL, START_TEST) if best in diverged else (val[best], test[best]))
    return np.mean(picks, axis=0)


def test_expected_pick_equals_the_mean_over_every_subset_of_trials():
    curves = curves_of(trials_table(VAL, TEST, LOSS, DIVERGED))
    assert curves["k"].tolist() == [1, 2, 3, 4, 5, 6] and set(curves["n_trials"]) == {6}
    for _, row in curves.iterrows():
        val, test = brute_force(VAL, TEST, LOSS, DIVERGED, int(row["k"]))
        assert row["expected_val"] == pytest.approx(val, abs=1e-12)
        assert row["expected_test"] == pytest.approx(test, abs=1e-12)
    # k = 1: the mean over all trials, the diverged one at its start (not the 0.97 it recorded);
    # k = N: the single best trial (of the tie at 0.95, the lower training loss).
    scored = [START_VAL if i in DIVERGED else v for i, v in enumerate(VAL)]
    assert curves["expected_val"].iloc[0] == pytest.approx(np.mean(scored))
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
    a, b = curves_of(runs), curves_of(shuffled)
    pd.testing.assert_series_equal(a["expected_val"], b["expected_val"])
    assert not np.allclose(a["expected_test"], b["expected_test"])


def test_curves_table_and_figure_on_a_real_sweep(smoke_sweep):
    runs = load_runs(smoke_sweep)
    runs = runs[runs["batch_size"] == 128]
    curves = tuning_curves.tuning_curves(runs, load_curves(smoke_sweep, runs))
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
    # what tuning gains: a row per setting, the best after its whole budget on top
    gain = report.tuning_gain_figure(curves)
    for ax in gain.get_axes():
        net = ax.get_title().split(":")[0]
        after_all = curves[curves["k"] == curves["n_trials"]].set_index(["net", "setting"])
        best_first = after_all.loc[net]["expected_val"].sort_values(ascending=False).index
        labels = [t.get_text() for t in ax.get_yticklabels()]
        ticks = sorted(zip(ax.get_yticks(), labels, strict=True), reverse=True)
        top_down = [label for _, label in ticks]
        assert top_down == list(best_first)
    with pytest.raises(report.Skipped, match="not a tuning study"):
        report.tuning_curves_of(report.tuning_study(smoke_sweep))


def seeded_trials(
    rng: np.random.Generator, groups: dict[str, int], diverged_val: float = 1.0, seeds: int = 2
):
    """A runs table of net2 x each optimizer of `groups` tuned over that many learning rates,
    `seeds` seeds per trial, and the per-trial values the brute force ranks by. Every value is a
    dyadic fraction, so seed means are exact and the drawn ties are real ties; one trial per
    group has a diverged seed, and `diverged_val` as its recorded validation accuracy."""
    rows, trials = [], {}
    for optimizer, n in groups.items():
        diverged_trial = int(rng.integers(n))
        for i in range(n):
            lr = 2.0**-i
            identity = {"model.name": "net2", "optimizer.name": optimizer, "optimizer.lr": lr}
            val = rng.choice([0.5, 0.75, 0.875], size=seeds)
            test = rng.choice([0.5, 0.625, 0.75, 0.875], size=seeds)
            loss = rng.choice([0.25, 0.5], size=seeds)
            if i == diverged_trial:
                val[:] = diverged_val
            # the diverged seed scores its start: the trial's mean over seeds with it there
            scored_val, scored_test = val.copy(), test.copy()
            if i == diverged_trial:
                scored_val[-1], scored_test[-1] = START_VAL, START_TEST
            trials[(optimizer, lr)] = {
                "diverged": i == diverged_trial,
                "val": float(np.mean(val)),
                "test": float(np.mean(test)),
                "loss": float(np.mean(loss)),
                "scored_val": float(np.mean(scored_val)),
                "scored_test": float(np.mean(scored_test)),
            }
            for seed in range(seeds):
                rows.append(
                    {
                        "model": "net2",
                        "optimizer": optimizer,
                        "schedule": "constant",
                        "lr": lr,
                        "momentum": np.nan,
                        "batch_size": 128,
                        "hidden": "100",
                        "seed": seed,
                        # the last seed of the diverged trial diverged, the others completed
                        "status": "diverged"
                        if i == diverged_trial and seed == seeds - 1
                        else "completed",
                        "quality": "accuracy",
                        "higher_is_better": True,
                        "final_val_accuracy": val[seed],
                        "final_test_accuracy": test[seed],
                        "best_test_accuracy": test[seed],
                        "final_train_loss": loss[seed],
                        "config": json.dumps(identity, sort_keys=True),
                        "config_id": identity_hash(identity),
                        "run_dir": f"{optimizer}{i}s{seed}",
                    }
                )
    return with_config_columns(pd.DataFrame(rows)), trials


def brute_force_curve(trials: dict, optimizer: str, k: int) -> tuple[float, float]:
    """Mean over every k-subset of one group's trials of the (val, test) of the trial the rule
    picks: no diverged seed first, then the higher val, the lower loss, the smaller lr."""
    lrs = [lr for (opt, lr) in trials if opt == optimizer]
    picks = []
    for subset in itertools.combinations(lrs, k):
        t = {lr: trials[(optimizer, lr)] for lr in subset}
        best = min(subset, key=lambda lr: (t[lr]["diverged"], -t[lr]["val"], t[lr]["loss"], lr))
        picks.append((t[best]["scored_val"], t[best]["scored_test"]))
    return tuple(np.mean(picks, axis=0))


@pytest.mark.parametrize("diverged_val", [1.0, 0.25])
@pytest.mark.parametrize("seed", range(4))
def test_seeded_trials_with_ties_and_a_diverged_seed_match_brute_force(seed, diverged_val):
    groups = {"adam": 6, "sgd": 4}
    runs, trials = seeded_trials(np.random.default_rng(seed), groups, diverged_val)
    curves = curves_of(runs)
    assert curves.groupby("optimizer")["n_trials"].first().to_dict() == groups
    assert set(curves["val_metric"]) == {"final_val_accuracy"}
    assert set(curves["test_metric"]) == {"final_test_accuracy"}
    for optimizer, n in groups.items():
        curve = curves[curves["optimizer"] == optimizer].sort_values("k")
        assert curve["k"].tolist() == list(range(1, n + 1))
        for _, row in curve.iterrows():
            val, test = brute_force_curve(trials, optimizer, int(row["k"]))
            assert row["expected_val"] == pytest.approx(val, abs=1e-12)
            assert row["expected_test"] == pytest.approx(test, abs=1e-12)
        own = [t for (opt, _), t in trials.items() if opt == optimizer]
        # k = 1: the mean over every trial, the diverged seed at its start (not the 1.0 or 0.25
        # it recorded)
        assert curve["expected_val"].iloc[0] == pytest.approx(
            np.mean([t["scored_val"] for t in own])
        )
        # k = N: the best completed trial (never the diverged one, even with val 1.0)
        assert curve["expected_val"].iloc[-1] == max(t["val"] for t in own if not t["diverged"])
        # scored at its start, the diverged trial is the worst whatever it recorded: values
        # fall along the pick order, so more trials never hurt
        assert curve["expected_val"].is_monotonic_increasing
        assert curve["p_best"].tolist() == pytest.approx([k / n for k in range(1, n + 1)])


@pytest.mark.parametrize("corrupt", ["reversed", "random", "nan"])
def test_corrupting_the_test_metrics_changes_no_pick(corrupt):
    runs, _ = seeded_trials(np.random.default_rng(0), {"adam": 6, "sgd": 4})
    test = runs["final_test_accuracy"].to_numpy()
    corrupted = {
        "reversed": test[::-1],
        "random": np.random.default_rng(1).uniform(0, 1, len(test)),
        "nan": np.full(len(test), np.nan),
    }[corrupt]
    other = runs.assign(final_test_accuracy=corrupted, best_test_accuracy=corrupted)

    def order(frame):
        summary = analysis.summarize(frame)
        ranked = tuning_curves.ranked_trials(summary, (analysis.LR_KEY,), "final_val_accuracy")
        return ranked["config_id"].tolist(), ranked["rank"].tolist()

    assert order(runs) == order(other)
    a, b = curves_of(runs), curves_of(other)
    pd.testing.assert_series_equal(a["expected_val"], b["expected_val"])
    pd.testing.assert_series_equal(a["k"], b["k"])


def test_a_diverged_trial_scores_the_model_it_began_from():
    """A diverged trial ranks last and, picked (at k = 1, when it is the only trial drawn),
    scores its evaluation at iteration 0, never the 0.99 it recorded before diverging: so more
    trials never hurt."""
    runs = trials_table([0.9, 0.8, 0.99], [0.9, 0.8, 0.99], [0.3, 0.3, 0.3], diverged=(2,))
    curve = curves_of(runs)
    assert curve["expected_val"].tolist() == pytest.approx([(1.7 + START_VAL) / 3, 2.6 / 3, 0.9])
    assert curve["expected_test"].tolist() == pytest.approx([(1.7 + START_TEST) / 3, 2.6 / 3, 0.9])


@pytest.mark.parametrize("status", ["diverged", "failed"])
def test_a_run_that_ended_before_its_first_evaluation_is_scored_not_infinite(status):
    """A run that diverged (or whose step raised) before any evaluation but the first recorded
    no final value: it still scores its start, so every expected value is a number; where its
    curves lack the start, the values that can pick it are NaN, not a number made up."""
    runs = trials_table([0.9, 0.8, np.nan], [0.9, 0.7, np.nan], [0.3, 0.3, np.nan], diverged=(2,))
    runs.loc[2, "status"] = status
    curve = curves_of(runs)
    assert curve["expected_val"].tolist() == pytest.approx([(1.7 + START_VAL) / 3, 2.6 / 3, 0.9])
    assert curve["expected_test"].tolist() == pytest.approx([(1.6 + START_TEST) / 3, 2.5 / 3, 0.9])
    unscored = tuning_curves.tuning_curves(runs, at_start(runs.iloc[:2]))
    assert unscored["expected_val"].isna().tolist() == [True, False, False]
