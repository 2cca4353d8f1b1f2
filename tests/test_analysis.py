"""harness.analysis: summaries over seeds, best learning rates, time to target, profiles."""

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from smoke_sweep import BATCH_64_LR, LEARNING_RATES, TARGET

from harness import analysis, report, style
from harness.config.identity import identity_hash
from harness.results import load_curves, load_runs, own_step_time, with_config_columns

# Config keys of the tables made by hand below, by the short column they come from.
FAKE_KEYS = {
    "model": "model.name",
    "schedule": "schedule.name",
    "hidden": "model.hidden",
    "optimizer": "optimizer.name",
    "lr": "optimizer.lr",
    "batch_size": "train.batch_size",
}


def identified(frame: pd.DataFrame) -> pd.DataFrame:
    """A table made by hand with what `load_runs` adds: each row's identity (`config`,
    `config_id`) from its short columns, a column per config key that varies, and the
    direction of its quality metric (accuracy: higher is better) unless it has one."""
    keys = {c: k for c, k in FAKE_KEYS.items() if c in frame}
    identities = [{k: row[c] for c, k in keys.items()} for _, row in frame.iterrows()]
    frame = frame.assign(
        config=[json.dumps(i, sort_keys=True, default=str) for i in identities],
        config_id=[identity_hash(i) for i in identities],
    )
    if "higher_is_better" not in frame:
        frame = frame.assign(higher_is_better=True)
    return with_config_columns(frame)


def fake_runs(rows) -> pd.DataFrame:
    """A runs table from (model, optimizer, lr, seed, status, final_test_accuracy,
    final_train_loss) tuples; the other columns get fixed values."""
    frame = pd.DataFrame(
        rows,
        columns=[
            "model",
            "optimizer",
            "lr",
            "seed",
            "status",
            "final_test_accuracy",
            "final_train_loss",
        ],
    )
    return identified(
        frame.assign(
            schedule="constant",
            momentum=np.where(frame["optimizer"] == "adam", np.nan, 0.9),
            batch_size=128,
            hidden="100",
            best_test_accuracy=frame["final_test_accuracy"] + 0.01,
            run_dir=[f"run{i}" for i in range(len(frame))],
        )
    )


@pytest.fixture(scope="module")
def tables(smoke_sweep):
    return load_runs(smoke_sweep), load_curves(smoke_sweep)


def test_t_interval_is_students_t():
    values = [0.91, 0.93, 0.92, 0.95]
    mean, half, n = analysis.t_interval(values)
    low, high = stats.t.interval(0.95, 3, loc=np.mean(values), scale=stats.sem(values))
    assert n == 4 and mean == pytest.approx(np.mean(values))
    assert (mean - half, mean + half) == pytest.approx((low, high))
    # One value: a mean but no interval; NaNs are left out.
    assert analysis.t_interval([0.5, math.nan])[0] == 0.5
    assert math.isnan(analysis.t_interval([0.5])[1])


@pytest.mark.slow
def test_summary_has_one_row_per_config_with_mean_and_ci_over_seeds(tables):
    runs, _ = tables
    summary = analysis.summarize(runs)
    n_configs = 2 * (sum(len(lrs) for lrs in LEARNING_RATES.values()) + len(BATCH_64_LR))
    assert len(summary) == n_configs
    assert (summary["n_seeds"] == 2).all()
    for _, row in summary.iterrows():
        seeds = runs[
            (runs["model"] == row["model"])
            & (runs["optimizer"] == row["optimizer"])
            & (runs["lr"] == row["lr"])
            & (runs["batch_size"] == row["batch_size"])
        ]
        assert len(seeds) == 2
        for metric in analysis.SUMMARY_METRICS:
            mean, half, _ = analysis.t_interval(seeds[metric])
            assert row[f"{metric}_mean"] == pytest.approx(mean)
            assert row[f"{metric}_ci"] == pytest.approx(half, nan_ok=True)
            assert row[f"{metric}_min"] == seeds[metric].min()
            assert row[f"{metric}_max"] == seeds[metric].max()
        assert row["n_diverged"] == (seeds["status"] == "diverged").sum()
    # sgd at lr 50 diverges with every seed; nothing else does.
    diverged = summary[summary["n_diverged"] > 0]
    assert set(diverged["optimizer"]) == {"sgd"} and set(diverged["lr"]) == {50.0}


# The test set's order of a net's configs (its accuracy, ties to the lower training loss, then
# the smaller rate), best first: what a rule that read the test set would choose by.
BY_TEST = (["final_test_accuracy_mean", "final_train_loss_mean", "lr"], [False, True, True])


def validation_against_test(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with a validation accuracy that ranks the configs of each net in the reverse of
    the test set's order (on the smoke sweep the two agree): whatever chose on the test set
    would choose other configs."""
    order = analysis.summarize(runs).sort_values(BY_TEST[0], ascending=BY_TEST[1])
    val = 0.5 + 0.001 * order.groupby("net").cumcount()  # the test set's best: the lowest
    return runs.assign(final_val_accuracy=runs["config_id"].map(val.set_axis(order["config_id"])))


def test_best_learning_rate_per_net_and_optimizer_is_chosen_on_validation(tables):
    runs, _ = tables
    runs = validation_against_test(runs)
    summary = analysis.summarize(runs[runs["batch_size"] == 128])
    best = analysis.best_configs(summary)
    val = runs.groupby("config_id")["final_val_accuracy"].mean()
    assert len(best) == 2 * 3  # nets x optimizers
    for _, row in best.iterrows():
        group = summary[(summary["net"] == row["net"]) & (summary["optimizer"] == row["optimizer"])]
        ok = group[group["n_diverged"] == 0]
        assert len(ok) > 1
        assert row["config_id"] == val[ok["config_id"]].idxmax()
        by_test = ok.sort_values(BY_TEST[0], ascending=BY_TEST[1])
        assert row["config_id"] != by_test["config_id"].iloc[0]  # the test set's pick
        assert row["n_diverged"] == 0


def test_a_diverged_config_is_never_best_and_ties_go_to_lower_loss():
    runs = fake_runs(
        [
            ("net2", "sgd", 0.1, 0, "completed", 0.90, 0.30),
            ("net2", "sgd", 0.1, 1, "completed", 0.92, 0.28),
            ("net2", "sgd", 1.0, 0, "diverged", 0.99, 0.10),  # last evaluated, looks great
            ("net2", "sgd", 1.0, 1, "completed", 0.99, 0.10),
            ("net2", "adam", 0.001, 0, "completed", 0.95, 0.20),
            ("net2", "adam", 0.01, 0, "completed", 0.95, 0.10),
        ]
    )
    best = analysis.best_configs(analysis.summarize(runs)).set_index("optimizer")
    assert best.loc["sgd", "lr"] == 0.1
    assert best.loc["adam", "lr"] == 0.01
    by_loss = analysis.best_configs(analysis.summarize(runs), by="final_train_loss")
    assert by_loss.set_index("optimizer").loc["adam", "lr"] == 0.01


def test_a_failed_seed_counts_like_a_diverged_one():
    """A run whose optimizer step raised ("failed") ended before its last step, as a diverged
    one did: its config counts it in `n_diverged`, and never wins on what it recorded."""
    runs = fake_runs(
        [
            ("net2", "shampoo", 0.1, 0, "completed", 0.90, 0.30),
            ("net2", "shampoo", 1.0, 0, "failed", 0.99, 0.10),  # raised after a good evaluation
        ]
    )
    summary = analysis.summarize(runs).set_index("lr")
    assert summary["n_diverged"].to_dict() == {0.1: 0, 1.0: 1}
    assert analysis.best_configs(analysis.summarize(runs)).iloc[0]["lr"] == 0.1


def test_a_run_loaded_twice_counts_once(smoke_sweep, tmp_path, caplog):
    """Two studies that share a configuration hold the same runs: loaded together, each seed
    counts once (counted twice, it would narrow the CI) and a warning says so."""
    runs = load_runs(smoke_sweep)
    copy = tmp_path / "another_study"
    copy.mkdir()
    runs.iloc[:5].assign(run_dir=[Path(d).name for d in runs["run_dir"][:5]]).to_parquet(
        copy / "runs.parquet"
    )
    both = load_runs([smoke_sweep, copy])
    assert len(both) == len(runs) and "5 runs repeat" in caplog.text
    pd.testing.assert_frame_equal(analysis.summarize(both), analysis.summarize(runs))


def test_a_summary_of_other_metrics_still_chooses_on_validation():
    """The quality-against-step-time figure summarises test accuracy and step time alone: its
    rates were chosen on test (the summary had no validation column to choose by)."""
    runs = fake_runs(
        [
            ("net2", "sgd", 0.1, 0, "completed", 0.95, 0.30),  # best on test
            ("net2", "sgd", 0.2, 0, "completed", 0.90, 0.30),  # best on validation
        ]
    ).assign(final_val_accuracy=[0.91, 0.96], step_time_s=[1e-3, 1e-3])
    full = analysis.best_configs(analysis.summarize(runs))
    narrow = analysis.summarize(runs, metrics=["final_test_accuracy", "step_time_s"])
    assert full["lr"].tolist() == analysis.best_configs(narrow)["lr"].tolist() == [0.2]


def test_curve_bands_are_the_mean_over_seeds_and_stop_where_a_seed_diverged(tables):
    runs, curves = tables
    configs = analysis.best_configs(analysis.summarize(runs[runs["batch_size"] == 128]))
    bands = analysis.curve_bands(runs, curves, configs, "train_loss")
    one = configs.iloc[0]
    expected = (
        curves[
            (curves["metric"] == "train_loss")
            & (curves["model"] == one["model"])
            & (curves["optimizer"] == one["optimizer"])
            & (curves["lr"] == one["lr"])
            & (curves["batch_size"] == 128)
        ]
        .pivot_table(index="iteration", columns="seed", values="value")
        .dropna()
    )
    got = bands[(bands["net"] == one["net"]) & (bands["optimizer"] == one["optimizer"])]
    assert got["iteration"].tolist() == expected.index.tolist() == [0, 20, 40, 60]
    np.testing.assert_allclose(got["mean"], expected.mean(axis=1))
    np.testing.assert_allclose(got["min"], expected.min(axis=1))
    np.testing.assert_allclose(got["max"], expected.max(axis=1))

    # sgd at lr 50 diverges at once: its curve keeps only the evaluation at iteration 0.
    diverged = analysis.summarize(runs).query("n_diverged > 0")
    bands = analysis.curve_bands(runs, curves, diverged, "train_loss")
    assert set(bands["iteration"]) == {0}
    assert (bands["n_diverged"] == 2).all() and (bands["diverged_at"] == 5).all()
    # Averaged over seeds at each iteration, x may also be the training time.
    timed = analysis.curve_bands(runs, curves, configs.iloc[:1], "train_loss", x="time_s")
    assert timed["time_s"].iloc[0] == 0 and timed["time_s"].is_monotonic_increasing


def test_time_to_target_is_the_first_evaluation_reaching_it(tables):
    runs, curves = tables
    ttt = analysis.time_to_target(runs, curves, TARGET)
    assert len(ttt) == curves["run_dir"].nunique()
    assert set(ttt["metric"]) == {"val_accuracy"}  # the split that chooses the fastest rate
    accuracy = curves[curves["metric"] == "val_accuracy"]
    for _, row in ttt.iterrows():
        points = accuracy[accuracy["run_dir"] == row["run_dir"]].sort_values("iteration")
        hits = points[points["value"] >= TARGET]
        assert row["reached"] == (len(hits) > 0)
        if len(hits):
            assert row["iterations_to_target"] == hits["iteration"].iloc[0]
            assert row["seconds_to_target"] == hits["time_s"].iloc[0]
            assert row["epochs_to_target"] == hits["epoch"].iloc[0]
        else:
            assert math.isnan(row["iterations_to_target"])
    assert 0 < ttt["reached"].sum() < len(ttt)  # the smoke target splits the runs
    assert not analysis.time_to_target(runs, curves, 1.01)["reached"].any()
    # For a loss, reaching the target means falling to it.
    loss = analysis.time_to_target(runs, curves, 1.0, metric="train_loss")
    assert loss["reached"].sum() > 0
    first = loss[loss["reached"]].iloc[0]
    points = curves[(curves["run_dir"] == first["run_dir"]) & (curves["metric"] == "train_loss")]
    assert points.loc[points["iteration"] == first["iterations_to_target"], "value"].item() <= 1.0


def test_time_to_target_summary_fails_a_config_unless_every_seed_reaches():
    rows = []
    for seed, hit in enumerate([20, 40]):
        rows.append(("net2", "adam", 0.01, seed, hit))
    rows += [("net2", "sgd", 0.1, 0, 60), ("net2", "sgd", 0.1, 1, math.nan)]
    ttt = pd.DataFrame(rows, columns=["model", "optimizer", "lr", "seed", "iterations_to_target"])
    ttt = identified(ttt).assign(
        schedule="constant",
        momentum=np.nan,
        batch_size=128,
        hidden="100",
        epochs_to_target=ttt["iterations_to_target"] / 10,
        seconds_to_target=ttt["iterations_to_target"] / 100,
        reached=ttt["iterations_to_target"].notna(),
    )
    table = analysis.summarize_time_to_target(ttt).set_index("optimizer")
    assert table.loc["adam", "iterations_to_target_cost"] == 30
    assert table.loc["adam", "n_reached"] == 2
    assert table.loc["sgd", "n_reached"] == 1
    assert table.loc["sgd", "iterations_to_target_mean"] == 60  # over the seed that reached
    assert table.loc["sgd", "iterations_to_target_cost"] == math.inf


def test_performance_profile_of_a_known_cost_matrix():
    costs = pd.DataFrame(
        {"a": [1.0, 2.0, 4.0, math.inf], "b": [2.0, 1.0, math.inf, math.inf]},
        index=pd.Index(["p1", "p2", "p3", "p4"], name="problem"),
    )
    profile = analysis.performance_profile(costs)
    # Ratios: a = 1, 2, 1, fail; b = 2, 1, fail, fail. p4 is solved by nobody: it stays in
    # the denominator.
    assert profile.index.tolist() == [1.0, 2.0]
    assert profile.loc[1.0].tolist() == [0.5, 0.25]
    assert profile.loc[2.0].tolist() == [0.75, 0.5]
    at = analysis.performance_profile(costs, taus=[1.5, 100])
    assert at.loc[1.5].tolist() == [0.5, 0.25] and at.loc[100].tolist() == [0.75, 0.5]


def test_profile_costs_tune_each_optimizer_per_problem():
    table = pd.DataFrame(
        {
            "model": ["net1"] * 4 + ["net2"] * 2,
            "hidden": ["none"] * 4 + ["100"] * 2,
            "batch_size": 128,
            "optimizer": ["sgd", "sgd", "adam", "adam", "sgd", "adam"],
            "lr": [0.1, 1.0, 1e-3, 1e-2, 0.1, 1e-3],
            "cost": [50.0, 30.0, math.inf, 20.0, math.inf, math.nan],
        }
    )
    matrix = analysis.profile_costs(identified(table), "cost")
    assert matrix.loc["net1"].to_dict() == {"adam": 20.0, "sgd": 30.0}
    assert matrix.loc["net2"].to_dict() == {"adam": math.inf, "sgd": math.inf}
    # Another key that varies between problems (the batch size) makes problems of its own.
    table = pd.concat([table, table.assign(batch_size=64, cost=1.0)], ignore_index=True)
    matrix = analysis.profile_costs(identified(table), "cost")
    assert matrix.index.tolist() == [
        "net1, batch_size=128",
        "net1, batch_size=64",
        "net2, batch_size=128",
        "net2, batch_size=64",
    ]
    assert matrix.loc["net1, batch_size=64"].to_dict() == {"adam": 1.0, "sgd": 1.0}


def test_reference_batch_size_and_net_labels():
    runs = fake_runs([("mlp", "sgd", 0.1, s, "completed", 0.9, 0.3) for s in range(3)])
    assert analysis.reference_batch_size(runs) == 128
    assert analysis.reference_batch_size(runs.assign(batch_size=[32, 64, 64])) == 64
    labels = analysis.net_labels(identified(runs.assign(hidden=["100", "100", "256-256"])))
    assert labels.tolist() == ["mlp: hidden=100", "mlp: hidden=100", "mlp: hidden=256-256"]
    assert analysis.net_labels(runs).tolist() == ["mlp"] * 3


def test_settings_that_differ_in_their_schedule_are_distinct_settings():
    """The schedule's name is its config group's only key that varies: labels state it, so
    that tables, profiles and figures keep the settings of each schedule apart."""
    rows = [
        (net, "adam", lr, seed, "completed", 0.9 + lr, 0.3)
        for net, lr, seed in itertools.product(["net1", "net2"], [0.01, 0.02], [0, 1])
    ]
    constant = fake_runs(rows)
    cosine = constant.assign(schedule="cosine", final_test_accuracy=constant["lr"] + 0.95)
    summary = analysis.summarize(identified(pd.concat([constant, cosine], ignore_index=True)))
    assert set(summary["setting"]) == {"adam: schedule=constant", "adam: schedule=cosine"}
    best = analysis.best_configs(summary)
    assert len(best) == 4 and not best.duplicated(["net", "setting"]).any()
    error = summary.assign(error=1 - summary["final_test_accuracy_mean"])
    costs = analysis.profile_costs(error, "error")["adam"]
    assert costs.to_dict() == pytest.approx(
        {
            "net1, schedule=constant": 0.08,
            "net1, schedule=cosine": 0.03,
            "net2, schedule=constant": 0.08,
            "net2, schedule=cosine": 0.03,
        }
    )


def test_keys_that_follow_from_others_are_neither_settings_nor_axes():
    """The batch-size study's shape: the budget sets the epochs or the iterations, and the
    evaluation interval is looked up per budget and batch size; only the budget, the rule for
    the learning rate and the batch size tell configs apart."""
    rows = []
    for budget, scaling, batch in itertools.product(
        ["epochs", "steps"], ["none", "linear"], [64, 128, 256]
    ):
        rows.append(
            {
                "optimizer": "adam",
                "study.budget": budget,
                "study.lr_scaling": scaling,
                "train.batch_size": batch,
                "train.epochs": 10 if budget == "epochs" else math.nan,
                "train.iterations": math.nan if budget == "epochs" else 4690,
                "train.eval_every": 230 if budget == "steps" else 30000 // batch,
                "optimizer.lr": 0.003 * (batch / 128 if scaling == "linear" else 1),
            }
        )
    frame = pd.DataFrame(rows)
    keys = analysis.label_keys(frame, without=(analysis.LR_KEY,))
    assert keys == ["study.budget", "study.lr_scaling", "train.batch_size"]
    assert analysis.swept_keys(frame) == ["train.batch_size"]
    # swept on its own, the evaluation interval is a setting and an axis
    full = pd.concat([frame.assign(**{"train.eval_every": e}) for e in (100, 200)])
    assert "train.eval_every" in analysis.label_keys(full, without=(analysis.LR_KEY,))
    assert analysis.swept_keys(full) == ["train.batch_size", "train.eval_every"]


def test_each_setting_against_the_courses_best_chosen_on_validation():
    """The course's best of a net is the selection rule's pick on validation (momentum), not
    the best on test (adam); a gain's interval is Welch's; a verdict needs the interval to
    leave zero out."""
    spec = {  # optimizer: (validation, test accuracy) of seeds 0-2
        "momentum": ([0.970, 0.971, 0.972], [0.950, 0.951, 0.952]),
        "adam": ([0.960, 0.961, 0.962], [0.990, 0.991, 0.992]),
        "lion": ([0.950, 0.951, 0.952], [0.970, 0.972, 0.971]),
        "sgd": ([0.940, 0.941, 0.942], [0.946, 0.951, 0.956]),
    }
    rows, val = [], []
    for optimizer, (vals, tests) in spec.items():
        for seed, (v, t) in enumerate(zip(vals, tests, strict=True)):
            rows.append(("net2", optimizer, 0.1, seed, "completed", t, 0.1))
            val.append(v)
    runs = fake_runs(rows).assign(final_val_accuracy=val)
    table = analysis.against_reference(runs, style.COURSE_OPTIMIZERS).set_index("optimizer")
    assert set(table["reference"]) == {table.loc["momentum", "setting"]}
    assert table["verdict"].to_dict() == {
        "adam": "better",
        "lion": "better",
        "momentum": "reference",
        "sgd": "not told apart",
    }
    assert list(table.index) == ["adam", "lion", "momentum", "sgd"]  # by gain
    a, b = np.array(spec["lion"][1]), np.array(spec["momentum"][1])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)  # Welch-Satterthwaite
    half = stats.t.ppf(0.975, df) * np.sqrt(va + vb)
    lion = table.loc["lion"]
    assert lion["gain"] == pytest.approx(a.mean() - b.mean())
    assert (lion["gain_low"], lion["gain_high"]) == pytest.approx(
        (a.mean() - b.mean() - half, a.mean() - b.mean() + half)
    )
    # a metric where lower is better: the gain is the reference's value minus the setting's
    rmse = runs.assign(
        final_test_rmse=1 - runs["final_test_accuracy"],
        final_val_rmse=1 - runs["final_val_accuracy"],
        best_test_rmse=1 - runs["best_test_accuracy"],
        higher_is_better=False,
        quality="rmse",
    ).drop(columns=["final_test_accuracy", "final_val_accuracy", "best_test_accuracy"])
    flipped = analysis.against_reference(rmse, style.COURSE_OPTIMIZERS).set_index("optimizer")
    assert flipped["gain"].to_dict() == pytest.approx(table["gain"].to_dict())
    assert flipped["verdict"].to_dict() == table["verdict"].to_dict()
    # a seed that diverged: its last value is no outcome, so the setting gets no gain, and it
    # ranks after every setting that has one
    lion_2 = (runs["optimizer"] == "lion") & (runs["seed"] == 2)
    diverged = runs.assign(status=runs["status"].mask(lion_2, "diverged"))
    table = analysis.against_reference(diverged, style.COURSE_OPTIMIZERS).set_index("optimizer")
    assert table.loc["lion", "verdict"] == "diverged"
    assert table.loc["lion", ["gain", "gain_low", "gain_high"]].isna().all()
    assert list(table.index) == ["adam", "momentum", "sgd", "lion"]
    shown = report.reference_table(table.reset_index(), "net2").set_index("setting")
    assert shown.filter(like="gain over").loc[table.loc["lion", "setting"]].item() == "n/a"


def test_quality_at_time_is_taken_per_net_at_its_shortest_completed_run(tables):
    """A run that diverged stops at once (0.03 s in the zoo): the same time for every config of
    a net is that net's shortest run that completed, not that one, and not another net's (a
    deep net read at a shallow one's time has not reached its first evaluation). A stacked run's
    time is its own: its steps times its step alone, not its stack's."""
    runs, curves = tables
    diverged = runs.index[0]
    runs = runs.assign(status=runs["status"].where(runs.index != diverged, "diverged"))
    runs.loc[diverged, "step_time_s"] = 1e-6
    seconds, table = analysis.quality_at_time(runs, curves)
    completed = runs[runs["status"] == "completed"].assign(net=lambda r: r["model"])
    own = completed["step_time_s"] * completed["iterations"]
    assert seconds.to_dict() == pytest.approx(own.groupby(completed["net"]).min().to_dict())
    assert seconds["net1"] != seconds["net2"]
    # each config's value: the mean over its seeds of their last evaluation within its net's time
    config = completed.iloc[-1]
    seeds = runs[runs["config_id"] == config["config_id"]]
    lasts = []
    for run_dir in seeds["run_dir"]:
        points = curves[(curves["run_dir"] == run_dir) & (curves["metric"] == "test_accuracy")]
        within = points[points["time_s"] <= seconds[config["net"]]].sort_values("iteration")
        lasts.append(within["value"].iloc[-1])
    row = table[table["config_id"] == config["config_id"]].iloc[0]
    assert row["test_accuracy_at_time_mean"] == pytest.approx(np.mean(lasts))
    # one given time holds for every net
    fixed, _ = analysis.quality_at_time(runs, curves, seconds=0.5)
    assert set(fixed) == {0.5}


def test_a_run_that_ended_early_never_reaches_a_target(tables):
    """A run that reached the target and then diverged (or failed) is no model a user holds:
    it is not credited with reaching it, and its config's cost is infinite."""
    runs, curves = tables
    ttt = analysis.time_to_target(runs, curves, TARGET)
    reached = ttt.loc[ttt["reached"], "run_dir"].iloc[0]
    for status in ("diverged", "failed"):
        ended = runs.assign(status=runs["status"].where(runs["run_dir"] != reached, status))
        again = analysis.time_to_target(ended, curves, TARGET).set_index("run_dir")
        assert not again.loc[reached, "reached"]
        assert np.isnan(again.loc[reached, list(analysis.TARGET_MEASURES)].to_numpy(float)).all()
        config = again.loc[reached, "config_id"]
        summary = analysis.summarize_time_to_target(again.reset_index())
        cost = summary.set_index("config_id").loc[config, "iterations_to_target_cost"]
        assert cost == math.inf


def test_quality_at_time_scores_a_run_that_ended_within_its_budget_at_its_start(tables):
    """A run that diverged within its net's time budget recorded a value before it ended: it
    scores its evaluation at iteration 0 instead. A net whose runs all ended early still gets
    a budget (its own shortest run), not a missing one."""
    runs, curves = tables
    net2 = runs[runs["model"] == "net2"]
    late = net2.index[0]  # diverged after its first evaluation past 0: within the budget
    runs = runs.assign(status=runs["status"].where(runs.index != late, "diverged"))
    first = curves.loc[(curves["run_dir"] == runs.loc[late, "run_dir"]) & (curves["iteration"] > 0)]
    runs.loc[late, "diverged_at"] = first["iteration"].min()
    seconds, table = analysis.quality_at_time(runs, curves)
    run = runs.loc[late]
    points = curves[(curves["run_dir"] == run["run_dir"]) & (curves["metric"] == "test_accuracy")]
    start = points.loc[points["iteration"] == 0, "value"].item()
    seeds = runs[runs["config_id"] == run["config_id"]]
    others = []
    for run_dir in seeds["run_dir"].drop(late):
        own = curves[(curves["run_dir"] == run_dir) & (curves["metric"] == "test_accuracy")]
        within = own[own["time_s"] <= seconds["net2"]].sort_values("iteration")
        others.append(within["value"].iloc[-1])
    row = table[table["config_id"] == run["config_id"]].iloc[0]
    assert row["test_accuracy_at_time_mean"] == pytest.approx(np.mean([start, *others]))
    # every run of net2 ended early: net2 keeps a budget of its own
    all_ended = runs.assign(status=runs["status"].where(runs["model"] != "net2", "diverged"))
    budgets, _ = analysis.quality_at_time(all_ended, curves)
    assert set(budgets.index) == {"net1", "net2"} and np.isfinite(budgets["net2"])


def test_a_target_met_before_any_step_is_no_profile_problem(tables):
    """The untrained model meets a target of 0 accuracy on every net: every cost is 0, a ratio
    to 0 is none, and such a problem tells no optimizer apart: left out of the profiles."""
    runs, curves = tables
    costs = analysis.profile_tables(runs, curves, target=0.0)
    assert costs["iterations_to_target"].empty and costs["seconds_to_target"].empty
    assert len(costs["final_train_loss"])
    solved = analysis.profile_tables(runs, curves, target=TARGET)
    assert len(solved["iterations_to_target"]) == len(solved["final_train_loss"])


def test_every_run_with_a_calibration_is_timed_by_it():
    """A stacked run's training time is its stack's and a single run's holds the pauses of a
    shared machine: each is timed by its step alone where measured, by its own clock before."""
    runs = pd.DataFrame(
        {
            "engine": ["stacked", "single", "single"],
            "train_time_s": [90.0, 40.0, 30.0],
            "iterations": [1000, 1000, 1000],
            "diverged_at": [math.nan, math.nan, 500.0],
            "step_time_alone_s": [0.01, 0.02, math.nan],
        }
    )
    assert own_step_time(runs).tolist() == pytest.approx([0.01, 0.02, 0.06])
    assert own_step_time(runs.drop(columns="step_time_alone_s")).tolist() == pytest.approx(
        [0.09, 0.04, 0.06]
    )


def test_a_remembered_table_is_computed_once_per_frame_inside_shared_results():
    calls = []

    @analysis.remembered
    def totals(frame: pd.DataFrame, column: str) -> pd.DataFrame:
        calls.append(id(frame))
        return frame.groupby("k", as_index=False)[column].sum()

    frame = pd.DataFrame({"k": [1, 1, 2], "x": [1.0, 2.0, 3.0]})
    other = frame.copy()
    with analysis.shared_results():
        first = totals(frame, "x")
        first["x"] = 0.0  # a caller's change stays its own
        again = totals(frame, column="x"), totals(frame, "x")
        totals(other, "x")
    assert again[1]["x"].tolist() == [3.0, 3.0]
    assert calls == [id(frame), id(frame), id(other)]  # by position and by name: two keys
    totals(frame, "x")  # outside the block nothing is kept
    assert len(calls) == 4


def test_labels_tell_values_apart_by_type_and_text_as_before():
    # 1 and True are equal to pandas but written apart; 1 and 1.0 are written alike; None and
    # NaN apart; lists by their text
    frame = pd.DataFrame(
        {
            "optimizer": ["a"] * 6,
            "optimizer.flag": pd.Series([1, True, 1.0, None, np.nan, 1], dtype=object),
            "optimizer.betas": pd.Series([[0.9, 0.99]] * 5 + [[0.8, 0.99]], dtype=object),
            "optimizer.eps": [1e-8] * 6,
            "optimizer.lr": [0.1, 0.1, 0.1, 0.1, 0.1, 0.1 + 1e-12],  # the same text: '0.1'
        }
    )
    labels = analysis.setting_labels(frame, without=())
    assert labels.tolist() == [
        "a: flag=1, betas=[0.9, 0.99]",
        "a: flag=True, betas=[0.9, 0.99]",
        "a: flag=1, betas=[0.9, 0.99]",
        "a: flag=None, betas=[0.9, 0.99]",
        "a: flag=nan, betas=[0.9, 0.99]",
        "a: flag=1, betas=[0.8, 0.99]",
    ]
    assert analysis.varying_keys(frame) == ["optimizer.flag", "optimizer.betas"]
    groups = analysis.config_groups(frame)
    texts = analysis.config_key(frame)
    assert pd.factorize(groups)[0].tolist() == pd.factorize(texts)[0].tolist()  # one partition
