"""harness-rank: one optimizer placed among the zoo's field by the zoo's own protocol."""

import math
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from conftest import MNIST_DIR, REPO, compose_config, hydra_context
from harness import analysis, style
from harness.analysis.reference import with_family_verdicts
from harness.rank import main
from harness.rank.canaries import compare, drift_line
from harness.rank.protocol import check_optimizer, phase_overrides
from harness.rank.settings import name_of, parse
from harness.rank.writing import COSTS, kept_costs
from harness.results import load_runs
from harness.storage import read_runs, write_table
from harness.sweeps.jobs import sweep_jobs
from harness.zoo_phases import composing

ZOO = REPO / "results" / "zoo"
ZOO_TUNE = REPO / "results" / "zoo_tune"
COLUMNS = ["net", "rank", "of", "mean", "low", "high"]


def lr_of(job: list[str]) -> str:
    return next(o.split("=", 1)[1] for o in job if o.startswith("optimizer.lr="))


def test_phase_one_draws_the_trials_the_zoo_drew_for_a_field_optimizer(tmp_path):
    """The same protocol: harness-rank's phase-1 command for Adam draws, net by net, the ten
    rates results/zoo_tune trained for Adam (keyed by the same overrides, each in its own
    range around Adam's default rate)."""
    request = parse(["optimizer=adam"])
    overrides = phase_overrides(request, tmp_path, 0)
    task = [o for o in overrides if not o.startswith("hydra.")]
    with hydra_context():
        cfg = compose_config(task, return_hydra_config=True)
        OmegaConf.set_readonly(cfg.hydra.overrides, False)
        cfg.hydra.overrides.task = task  # as Hydra records the command line
        jobs = sweep_jobs(cfg, compose=lambda o: compose_config(list(o)))
    zoo = read_runs(ZOO_TUNE, columns=["model", "optimizer", "run_dir"])
    zoo = zoo[zoo["optimizer"] == "adam"]
    for net in ("net1", "net2", "net3"):
        mine = {lr_of(j) for j in jobs if f"model={net}" in j}
        dirs = zoo.loc[zoo["model"] == net, "run_dir"]
        theirs = {d.split("optimizer.lr=")[1].split(",")[0] for d in dirs}
        assert len(mine) == 10 and mine <= theirs, net


def test_the_folder_is_named_by_the_optimizer_and_its_overrides_that_change_it():
    def named(argv):
        request = parse(argv)
        with composing():
            return name_of(request, check_optimizer(request))

    assert named(["optimizer=adam", "optimizer.amsgrad=true"]) == "adam-amsgrad=true"
    assert named(["optimizer=adam", "optimizer.amsgrad=false"]) == "adam"  # its default
    assert named(["optimizer=lion", "data.root=/somewhere"]) == "lion"  # where it runs
    assert named(["optimizer=lion", "rank.name=my lion"]) == "my_lion"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["model=lenet"], "model=lenet: not a net of the field; the zoo's field holds net1"),
        (["optimizer=nosuchopt"], "no config 'optimizer/nosuchopt'; valid optimizer options"),
        (["schedule=step"], "schedule=step: the zoo's field is trained with constant or"),
        (["rank.fast=true"], "no setting rank.fast; rank settings: smoke, name"),
        (["-m", "optimizer=lion"], "-m: harness-rank takes Hydra overrides only"),
    ],
)
def test_what_cannot_be_ranked_is_refused_in_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, f"rank.out={tmp_path}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"harness-rank: error: {message}") and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # nothing written


def test_canaries_that_differ_from_the_committed_runs_say_so_in_one_line(tmp_path):
    """The committed phase-1 runs of A2Grad compared with themselves: no drift; one final
    metric moved by a hundredth: drift, in one line that names the installed versions."""
    runs = read_runs(ZOO_TUNE)
    same = tmp_path / "same"
    same.mkdir()
    write_table(runs[runs["optimizer"] == "a2grad"], same / "runs.parquet")
    checked = compare(same, ZOO_TUNE, 1.0)
    assert checked.runs == 3 and not checked.drift and checked.largest == 0
    moved = tmp_path / "moved"
    moved.mkdir()
    changed = runs[runs["optimizer"] == "a2grad"].copy()
    changed.iloc[1, changed.columns.get_loc("final_val_accuracy")] += 0.01
    write_table(changed, moved / "runs.parquet")
    checked = compare(moved, ZOO_TUNE, 1.0)
    assert checked.drift and len(checked.differing) == 1
    line = drift_line(checked)
    assert "a2grad on net2: final_val_accuracy" in line and "torch " in line
    assert "rank.allow_drift=true" in line and "\n" not in line


def test_a_re_run_that_trains_nothing_keeps_what_ranking_cost(tmp_path):
    """The README's cost table: a phase that trained nothing in this invocation shows its cost
    from the invocation that trained it; one that trained shows this one's."""
    first = [("checks", 2.0, 0, 0), ("phase tune", 130.0, 30, 30), ("phase evaluate", 280, 9, 9)]
    assert kept_costs(tmp_path, first) == first
    again = [("checks", 1.0, 0, 0), ("phase tune", 8.0, 30, 0), ("phase evaluate", 60, 9, 3)]
    assert kept_costs(tmp_path, again) == [
        ("checks", 1.0, 0, 0),
        ("phase tune (trained before)", 130.0, 30, 30),
        ("phase evaluate", 60, 9, 3),
    ]
    assert kept_costs(tmp_path, again)[2] == ("phase evaluate", 60, 9, 3)
    nothing = tmp_path / "field"
    nothing.mkdir()
    kept_costs(nothing, [("checks", 1.0, 0, 0)])
    assert not (nothing / COSTS).exists()


@pytest.mark.slow
def test_a_field_optimizer_gets_its_committed_numbers_and_rank_and_trains_nothing(tmp_path):
    out = main_out(["optimizer=adam", f"rank.out={tmp_path}"])
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "rank_net1.png",
        "rank_net2.png",
        "rank_net3.png",
        "ranks.csv",
    ]  # no phase folder, no canaries: nothing trained
    ranks = pd.read_csv(out / "ranks.csv")
    assert set(COLUMNS) <= set(ranks.columns) and list(ranks["net"]) == ["net1", "net2", "net3"]
    field = load_runs(ZOO)
    versus = with_family_verdicts(
        field, analysis.against_reference(field, style.COURSE_OPTIMIZERS), style.COURSE_OPTIMIZERS
    )
    for _, row in ranks.iterrows():
        rows = versus[versus["net"] == row["net"]].reset_index(drop=True)
        adam = rows[rows["optimizer"] == "adam"].iloc[0]
        assert row["rank"] == adam.name + 1 and row["of"] == len(rows) == 134
        seeds = field[(field["model"] == row["net"]) & (field["config_id"] == adam["config_id"])]
        assert row["mean"] == pytest.approx(100 * seeds["final_test_accuracy"].mean(), abs=1e-9)
        assert row["bonferroni"] == adam["bonferroni"] and row["verdict"] == adam["verdict"]
    readme = (out / "README.md").read_text()
    assert "already holds this optimizer's configs on net1, net2, net3" in readme


@pytest.mark.slow
def test_smoke_ranks_a_class_from_the_users_own_module(tmp_path, monkeypatch):
    """rank.smoke=true: an optimizer class defined in a module of the user's (on PYTHONPATH)
    goes through the three phases, the ranking, the table, the README and the figure."""
    module = tmp_path / "mine"
    module.mkdir()
    (module / "my_optimizers.py").write_text(
        textwrap.dedent(
            """
            import torch

            class MyAdam(torch.optim.Adam):
                \"\"\"Adam under another name: an optimizer the field does not hold.\"\"\"
            """
        )
    )
    monkeypatch.setenv("PYTHONPATH", str(module))
    monkeypatch.setenv("HARNESS_DATA_ROOT", str(MNIST_DIR))
    out = main_out(
        [
            "optimizer._target_=my_optimizers.MyAdam",
            "model=net1",
            "rank.smoke=true",
            f"rank.out={tmp_path / 'rank'}",
        ]
    )
    assert out.name == "myadam"
    for phase in ("tune", "shortlist", "evaluate"):
        assert (out / phase / "runs.parquet").exists()
    assert len(read_runs(out / "evaluate")) == 3  # seeds 1-3 at the chosen rate
    ranks = pd.read_csv(out / "ranks.csv")
    assert set(COLUMNS) <= set(ranks.columns) and list(ranks["net"]) == ["net1"]
    row = ranks.iloc[0]
    assert row["of"] == 135 and 1 <= row["rank"] <= 135  # the field's 134 and the newcomer
    assert row["low"] <= row["mean"] <= row["high"] and not math.isnan(row["gain"])
    readme = (out / "README.md").read_text()
    assert "**Smoke run**" in readme and "![rank_net1](rank_net1.png)" in readme
    assert (out / "rank_net1.png").stat().st_size > 10_000


def main_out(argv: list[str]) -> Path:
    from harness.rank import rank_command

    return rank_command(argv)
