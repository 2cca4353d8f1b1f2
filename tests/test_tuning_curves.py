"""Tuning curves (harness.tuning_curves): the expected quality of the trial picked among k random
trials equals the average over every k-subset, exactly; the test set never picks."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from harness import analysis, report, tuning_curves
from harness.identity import identity_hash
from harness.results import load_runs, with_config_columns


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
            trials[(optimizer, lr)] = {
                "diverged": i == diverged_trial,
                "val": float(np.mean(val)),
                "test": float(np.mean(test)),
                "loss": float(np.mean(loss)),
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
        picks.append((t[best]["val"], t[best]["test"]))
    return tuple(np.mean(picks, axis=0))


@pytest.mark.parametrize("diverged_val", [1.0, 0.25])
@pytest.mark.parametrize("seed", range(4))
def test_seeded_trials_with_ties_and_a_diverged_seed_match_brute_force(seed, diverged_val):
    groups = {"adam": 6, "sgd": 4}
    runs, trials = seeded_trials(np.random.default_rng(seed), groups, diverged_val)
    curves = tuning_curves.tuning_curves(runs)
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
        # k = 1: the mean over every trial, the diverged one with its recorded value
        assert curve["expected_val"].iloc[0] == pytest.approx(np.mean([t["val"] for t in own]))
        # k = N: the best completed trial (never the diverged one, even with val 1.0)
        assert curve["expected_val"].iloc[-1] == max(t["val"] for t in own if not t["diverged"])
        if diverged_val < min(t["val"] for t in own if not t["diverged"]):
            # values fall along the pick order: more trials never hurt
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
    a, b = tuning_curves.tuning_curves(runs), tuning_curves.tuning_curves(other)
    pd.testing.assert_series_equal(a["expected_val"], b["expected_val"])
    pd.testing.assert_series_equal(a["k"], b["k"])


def test_a_demoted_diverged_trial_keeps_its_recorded_value():
    """A diverged trial ranks last but counts with its recorded validation value, so when that
    value is better than a completed trial's the curve is not monotone: at k = 1 it is picked
    whenever it is the only trial drawn, and at k = 2 it loses to any completed one."""
    curve = tuning_curves.tuning_curves(
        trials_table([0.9, 0.8, 0.99], [0.9, 0.8, 0.99], [0.3, 0.3, 0.3], diverged=(2,))
    )
    assert curve["expected_val"].tolist() == pytest.approx([(0.9 + 0.8 + 0.99) / 3, 2.6 / 3, 0.9])
