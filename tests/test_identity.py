"""A run's identity is its config: every key that varies in a sweep keeps its runs apart in the
tables, summaries and labels; runs are seeds of one config only when they differ in the seed
alone."""

import json
import math
import re

import pandas as pd
import pytest

from conftest import run_cli
from harness import analysis, report
from harness.results import RUNS_TABLE, load_curves, load_runs

SHORT = ["data.train_size=2000", "data.test_size=500", "train.progress=false"]


def sweep(tmp_path, name, *overrides):
    folder = tmp_path / name
    result = run_cli("-m", *overrides, *SHORT, f"hydra.sweep.dir={folder}", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return folder


@pytest.fixture(scope="module")
def activations_by_decay(tmp_path_factory):
    """The sweep a new user tried: 2 activations x 2 weight decays, one seed."""
    return sweep(
        tmp_path_factory.mktemp("identity"),
        "sweep",
        "model=mlp",
        "model.hidden=[50]",
        "model.activations=[sigmoid],[relu]",
        "optimizer=adam",
        "optimizer.weight_decay=0,0.1",
        "seed=0",
        "train.iterations=200",
        "train.eval_every=100",
    )


@pytest.fixture(scope="module")
def betas_by_gamma(tmp_path_factory):
    """A list-valued axis (Adam's betas) by a schedule setting (step decay's gamma), 2 seeds."""
    return sweep(
        tmp_path_factory.mktemp("identity"),
        "sweep",
        "model=net1",
        "optimizer=adam",
        "optimizer.betas=[0.9,0.999],[0.5,0.999]",
        "schedule=step",
        "schedule.milestones=[20]",
        "schedule.gamma=0.1,0.5",
        "seed=0,1",
        "train.iterations=40",
        "train.eval_every=20",
    )


@pytest.mark.slow
def test_every_axis_of_the_sweep_is_a_config_of_its_own(activations_by_decay):
    runs = load_runs(activations_by_decay)
    assert len(runs) == 4 and runs["config_id"].nunique() == 4
    # A readable column per key that varies, the short columns kept.
    assert set(runs["model.activations"]) == {"[sigmoid]", "[relu]"}
    assert set(runs["optimizer.weight_decay"]) == {0, 0.1}
    assert {"model", "optimizer", "lr", "seed", "hidden"} <= set(runs.columns)
    assert "model.hidden" not in runs  # the same for every run: not a column

    summary = analysis.summarize(runs)
    assert len(summary) == 4 and (summary["n_seeds"] == 1).all()
    assert summary["final_test_accuracy_ci"].isna().all()  # one seed: no interval
    assert set(summary["net"]) == {"mlp"}  # one shape of net: one panel
    assert set(summary["setting"]) == {
        "adam: weight_decay=0, model.activations=[sigmoid]",
        "adam: weight_decay=0.1, model.activations=[sigmoid]",
        "adam: weight_decay=0, model.activations=[relu]",
        "adam: weight_decay=0.1, model.activations=[relu]",
    }
    # Each summary row is exactly its one run.
    for _, row in summary.iterrows():
        run = runs[runs["config_id"] == row["config_id"]]
        assert row["final_test_accuracy_mean"] == run["final_test_accuracy"].item()


def test_labels_of_the_report_name_the_keys_that_vary(activations_by_decay):
    runs, curves = report.load_sweep(activations_by_decay)
    fig = report.convergence_figure(runs, curves, "train_loss")
    full, zoom = fig.get_axes()
    assert full.get_title(loc="left") == "mlp: hidden 50"
    legend = [t.get_text() for t in zoom.get_legend().get_texts()]
    # ranked by final training loss, each with its value: every setting once, named fully
    names = [re.fullmatch(r"\d+\. (.*): [\d.e+-]+", t).group(1) for t in legend]
    assert sorted(names) == [
        f"Adam: weight_decay={wd}, model.activations=[{act}], lr 0.001"
        for wd in ("0", "0.1")
        for act in ("relu", "sigmoid")
    ]
    # Fixed keys are stated once, in the title.
    assert "200 iterations" in fig.get_suptitle() and "batch 128" in fig.get_suptitle()
    text = report.summary_markdown(activations_by_decay, runs, curves, 0.5)
    assert "model.activations, optimizer.weight_decay" in text
    assert "train.iterations=200" in text
    table = report.final_metrics_table(analysis.best_at_reference_batch(runs)[1])
    # A numeric key that varies (weight decay) makes rows; the others name the columns.
    assert table.index.tolist() == ["mlp, weight_decay=0", "mlp, weight_decay=0.1"]
    assert table.columns.tolist() == [
        "adam: model.activations=[relu]",
        "adam: model.activations=[sigmoid]",
    ]
    assert (table != "").all().all()  # every config has its cell


@pytest.mark.slow
def test_a_list_valued_axis_and_a_schedule_setting(betas_by_gamma):
    runs = load_runs(betas_by_gamma)
    assert set(runs["optimizer.betas"]) == {"[0.9, 0.999]", "[0.5, 0.999]"}
    assert set(runs["schedule.gamma"]) == {0.1, 0.5}
    summary = analysis.summarize(runs)
    assert len(summary) == 4 and (summary["n_seeds"] == 2).all()
    assert set(summary["setting"]) == {
        "adam: betas=[0.9, 0.999], schedule.gamma=0.1",
        "adam: betas=[0.9, 0.999], schedule.gamma=0.5",
        "adam: betas=[0.5, 0.999], schedule.gamma=0.1",
        "adam: betas=[0.5, 0.999], schedule.gamma=0.5",
    }
    # Seeds of one config are the runs that differ in the seed alone.
    for _, group in runs.groupby("config_id"):
        assert sorted(group["seed"]) == [0, 1]
        assert group[["optimizer.betas", "schedule.gamma"]].nunique().max() == 1
    # The learning rates the schedule set differ between gammas after the milestone.
    curves = load_curves(betas_by_gamma, runs, metrics=["lr"], columns=["schedule.gamma"])
    lr = curves[curves["iteration"] == 40]
    assert set(lr.groupby("schedule.gamma")["value"].first().round(8)) == {1e-4, 5e-4}
    # Best "learning rate" per setting: one per setting, none merged.
    assert len(analysis.best_configs(summary)) == 4


def test_runs_of_several_sweeps_keep_every_key_that_differs(activations_by_decay, betas_by_gamma):
    runs = load_runs([activations_by_decay, betas_by_gamma])
    assert len(runs) == 12 and runs["config_id"].nunique() == 8
    for key in ("model.activations", "optimizer.weight_decay", "optimizer.betas", "schedule.gamma"):
        assert key in runs
    # A key one sweep lacks (step decay's gamma) is NaN there, and a value of its own.
    assert runs["schedule.gamma"].isna().sum() == 4
    assert len(analysis.summarize(runs)) == 8
    # The consolidated tables give the same identities as the run folders.
    assert (betas_by_gamma / RUNS_TABLE).exists()
    stored = pd.read_parquet(betas_by_gamma / RUNS_TABLE)
    fresh = load_runs(betas_by_gamma)
    assert sorted(stored["config_id"]) == sorted(fresh["config_id"])
    identity = json.loads(stored["config"].iloc[0])
    assert "seed" not in identity and "data.root" not in identity and "device" not in identity


# --- one identity module: the folder name, the hash and the tables follow one rule -----------


@pytest.mark.slow
def test_run_folders_leave_out_exactly_the_keys_that_do_not_compute(tmp_path):
    """Hydra's exclude_keys is derived from harness.config.identity: overrides of execution keys,
    the tuning protocol and the preset's name are not in a run's folder name, every other one is,
    and `computes` agrees with the hash on each of them."""
    from omegaconf import OmegaConf

    from conftest import compose_config
    from harness.config.identity import computes, config_hash

    executing = ["device=cpu", "threads=1", "train.progress=false", "train.engine=single"]
    protocol = ["+tune.budget=3"]
    computing = ["model=net1", "optimizer.lr=0.05", "train.batch_size=64", "seed=3"]
    cfg = compose_config([*executing, *protocol, *computing], return_hydra_config=True)
    folder = cfg.hydra.job.override_dirname
    assert folder == ",".join(sorted(computing))
    assert list(cfg.hydra.job.config.override_dirname.exclude_keys) == [
        "experiment",
        "device",
        "threads",
        "train.progress",
        "train.engine",
        "tune.budget",
    ]

    def hash_with(*overrides):
        return config_hash(OmegaConf.to_container(compose_config(list(overrides)), resolve=True))

    base = hash_with()
    for override in [*executing, *computing, "data.root=/elsewhere"]:
        key = override.split("=")[0]
        assert computes(key) == (hash_with(override) != base), override


def test_the_metric_direction_is_read_from_the_runs_table(tmp_path):
    """The runs table stores whether the quality metric is better higher; analysis reads it
    (an RMSE is better lower, although its name says nothing), and a table written before it
    stored the column gets it from the problem its runs' identity names."""
    from harness.analysis.metrics import higher_is_better

    frame = pd.DataFrame(
        {
            "quality": ["rmse"] * 2,
            "config": [json.dumps({"problem._target_": "harness.problems.ratings.problem.Ratings"})]
            * 2,
        }
    )
    with pytest.raises(ValueError, match="higher_is_better"):
        higher_is_better(frame, "final_val_rmse")
    assert not higher_is_better(frame.assign(higher_is_better=False), "final_val_rmse_mean")
    assert higher_is_better(frame.assign(higher_is_better=True), "val_rmse")
    assert not higher_is_better(frame.assign(higher_is_better=True), "final_train_loss")

    from harness.results.runs import _recorded_direction

    assert _recorded_direction(frame["config"][0]) is False
    assert _recorded_direction(json.dumps({"model.hidden": "[100]"})) is True


def test_a_run_whose_optimizer_sets_its_own_rate_has_nan_in_the_lr_column():
    """A2Grad and ALIG take `lr: null` (they work out their step size): consolidating a sweep
    of them failed on float(None)."""
    from harness.config.identity import run_identity

    record = {
        "config": {
            "optimizer": {"_target_": "x.ALIG", "lr": None},
            "model": {"hidden": [100]},
            "train": {"batch_size": 128},
            "seed": 0,
        },
        "choices": {"optimizer": "alig", "model": "net2"},
    }
    row = run_identity(record)
    assert math.isnan(row["lr"]) and math.isnan(row["momentum"]) and row["hidden"] == "100"
