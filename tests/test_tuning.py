"""Tuning studies: search spaces and their trials (harness.tuning.search), the tuning sweeper and
Hydra's Optuna sweeper through the default stacked launcher, and the evaluation phase that
takes the chosen settings from the tuning study by itself (harness.tuning.selection)."""

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from scipy import stats

from conftest import REPO, compose_config, hydra_context, run_cli, train_in_process
from harness import report, storage
from harness.errors import ConfigError
from harness.results import RUN_FILE, RUNS_TABLE, SWEEP_FILE
from harness.sweeps.jobs import sweep_jobs
from harness.tuning.dimensions import Dimension
from harness.tuning.search import (
    PROTOCOL_FILE,
    beyond_edge,
    centred_range,
    centred_trials,
    check_protocol,
    combinations_of,
    first_trials,
    search_space,
    trials,
    tuning_jobs,
    with_command_line_spaces,
)

LOG_LR = "tag(log, interval(1.0e-4, 3.0))"
PROTOCOL = {
    "method": "random",
    "budget": 5,
    "seed": 0,
    "space": {
        "default": {"optimizer.lr": LOG_LR},
        "momentum": {"optimizer.lr": LOG_LR, "optimizer.momentum": "interval(0.5, 0.99)"},
        "yellowfin": {},
    },
}
TINY = [
    "data.train_size=500",
    "data.val_size=200",
    "data.test_size=100",
    "train.iterations=20",
    "train.eval_every=10",
    "train.log_every=5",
    "train.eval_train_size=200",
]


def lr_of(trial: list[str]) -> float:
    return float(next(o for o in trial if o.startswith("optimizer.lr=")).split("=")[1])


def test_random_trials_are_seeded_log_uniform_draws_within_the_bounds():
    space = search_space(PROTOCOL, "adam")
    assert space == [Dimension("optimizer.lr", 1e-4, 3.0, log=True)]
    drawn = trials(space, "random", 400, 0, ["model=net1", "optimizer=adam"])
    again = trials(space, "random", 400, 0, ["model=net1", "optimizer=adam"])
    other = trials(space, "random", 400, 0, ["model=net2", "optimizer=adam"])
    assert drawn == again and drawn != other  # seeded per combination
    lrs = [lr_of(t) for t in drawn]
    assert min(lrs) >= 1e-4 and max(lrs) <= 3.0
    # log-uniform: about as many draws in each decade of the 4.5 decades
    per_decade = pd.cut(pd.Series(lrs).map(math.log10), [-4, -3, -2, -1, 0]).value_counts()
    assert per_decade.min() > 0.6 * 400 / 4.48 and per_decade.max() < 1.4 * 400 / 4.48


def test_grid_trials_spread_the_budget_over_the_interval():
    space = search_space(PROTOCOL, "adam")
    grid = [lr_of(t) for t in trials(space, "grid", 5, 0, [])]
    assert grid == pytest.approx(
        [1e-4, 1e-4 * 30000**0.25, 1e-4 * 30000**0.5, 0.3 * 30000**-0.25 * 10, 3.0], rel=1e-3
    )
    two_keys = trials(search_space(PROTOCOL, "momentum"), "grid", 9, 0, [])
    assert len(two_keys) == 9 and len({tuple(t) for t in two_keys}) == 9


def test_an_optimizer_with_nothing_to_tune_has_one_trial_and_small_spaces_no_repeats():
    assert trials(search_space(PROTOCOL, "yellowfin"), "random", 5, 0, []) == [[]]
    choice = search_space({"space": {"default": {"optimizer.amsgrad": "choice(true, false)"}}}, "a")
    drawn = trials(choice, "random", 5, 0, [])
    assert sorted(map(tuple, drawn)) == [("optimizer.amsgrad=False",), ("optimizer.amsgrad=True",)]


def test_every_combination_gets_its_budget_and_every_seed_the_same_trials():
    combos = [
        [f"model={m}", f"optimizer={o}", f"seed={s}"]
        for m in ("net1", "net2")
        for o in ("adam", "yellowfin")
        for s in (0, 1)
    ]
    jobs = tuning_jobs(combos, PROTOCOL, "adam")
    assert len(jobs) == 2 * (5 + 1) * 2
    adam = [j for j in jobs if "model=net1" in j and "optimizer=adam" in j]
    by_seed = {s: [lr_of(j) for j in adam if f"seed={s}" in j] for s in (0, 1)}
    assert by_seed[0] == by_seed[1] and len(set(by_seed[0])) == 5


def test_where_a_run_executes_does_not_change_its_draws():
    combo = ["model=net1", "optimizer=adam", "seed=0"]
    plain = tuning_jobs([combo], PROTOCOL, "adam")
    executed = ["threads=1", "device=cpu", "data.root=/elsewhere", "sweep.append=true"]
    moved = tuning_jobs([[*combo, *executed]], PROTOCOL, "adam")
    assert [lr_of(j) for j in moved] == [lr_of(j) for j in plain]
    # A key that changes what a run computes draws its own trials.
    other = tuning_jobs([[*combo, "data.val_size=500"]], PROTOCOL, "adam")
    assert [lr_of(j) for j in other] != [lr_of(j) for j in plain]


@pytest.mark.parametrize(
    "protocol,message",
    [
        ({**PROTOCOL, "budget": 0}, "tune.budget (trials per combination) must be an integer >= 1"),
        ({**PROTOCOL, "method": "bayes"}, "tune.method must be one of random, grid"),
        (
            {**PROTOCOL, "space": {"default": {"optimizer.lr": "tag(log, interval(-1.0, 3.0))"}}},
            "a log-scale interval needs bounds > 0",
        ),
        (
            {**PROTOCOL, "space": {"default": {"optimizer.lr": "interval(3.0, 1.0)"}}},
            "needs numbers low < high",
        ),
        ({**PROTOCOL, "space": {"default": {"optimizer.lr": "0.1"}}}, "is not a range to search"),
        ({**PROTOCOL, "space": {"adam": {}}}, "no entry for optimizer sgd and no default entry"),
    ],
)
def test_a_protocol_that_cannot_run_is_one_config_error(protocol, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_protocol(protocol)
        search_space(protocol, "sgd")


def test_a_range_on_the_command_line_is_a_search_space_not_an_axis():
    parse = OverridesParser.create().parse_overrides
    overrides = parse(
        [
            "optimizer=sgd,adam",
            "optimizer.lr=tag(log, interval(1e-5, 1e-3))",
            "tune.space.momentum.optimizer.momentum=interval(0.8, 0.9)",
        ]
    )
    tune, rest = with_command_line_spaces(PROTOCOL, overrides)
    assert [o.key_or_group for o in rest] == ["optimizer"]  # the grid axis stays an axis
    space = tune["space"]
    # Every space that tunes something gets the range; YellowFin's empty space stays empty.
    assert space["default"] == {"optimizer.lr": "tag(log, interval(1e-5, 1e-3))"}
    assert space["momentum"] == {
        "optimizer.lr": "tag(log, interval(1e-5, 1e-3))",
        "optimizer.momentum": "interval(0.8, 0.9)",
    }
    assert space["yellowfin"] == {}
    assert PROTOCOL["space"]["default"] == {"optimizer.lr": LOG_LR}  # the input is not changed


def test_a_tuning_sweep_draws_its_trials_from_the_command_lines_range():
    with hydra_context():
        cfg = compose_config(["experiment=course_tune"], return_hydra_config=True)
        # As Hydra records `harness-train -m experiment=course_tune optimizer.lr=...`.
        task = [*cfg.hydra.overrides.task, "optimizer.lr=tag(log, interval(1e-5, 1e-3))"]
        OmegaConf.set_readonly(cfg.hydra.overrides, False)
        cfg.hydra.overrides.task = task
        jobs = sweep_jobs(cfg)
    assert len(jobs) == 273  # the budget per combination is the preset's
    tuned = [job for job in jobs if "optimizer=yellowfin" not in job]
    assert all(1e-5 <= lr_of(job) <= 1e-3 for job in tuned)
    assert not any(o.startswith("optimizer.lr=") for j in jobs if j not in tuned for o in j)


def test_a_centred_range_is_searched_uniformly_and_keeps_the_plain_searchs_draws_inside_it():
    space = search_space(PROTOCOL, "adam")
    region = centred_range(space[0], 1e-3, 2)
    assert region == pytest.approx((1e-5, 1e-1))
    assert centred_range(space[0], None, 2) == (1e-4, 3.0)  # no rate in the config
    combo = ["model=net1", "optimizer=adam"]
    plain = [lr_of(t) for t in trials(space, "random", 10, 0, combo)]
    centred = [lr_of(t) for t in centred_trials(space, "optimizer.lr", region, 10, 0, combo)]
    assert len(set(centred)) == 10 and all(1e-5 <= v <= 1e-1 for v in centred)
    # the plain search's trials inside the range come first, in their order: a study run
    # again under a centred range trains only what is new
    kept = [v for v in centred if v in plain]
    assert kept == [v for v in plain if 1e-5 <= v <= 1e-1][: len(kept)] and len(kept) >= 5
    # uniform over the range, whatever part of it the plain search covers
    pooled = [
        lr_of(t)
        for i in range(300)
        for t in centred_trials(space, "optimizer.lr", region, 10, 0, [f"model=m{i}"])
    ]
    fraction = [(math.log10(v) + 5) / 4 for v in pooled]
    assert stats.kstest(fraction, "uniform").pvalue > 0.01
    below = sum(v < 1e-4 for v in pooled) / len(pooled)
    assert below == pytest.approx(0.25, abs=0.03)  # a quarter of the range lies below 1e-4


def test_beyond_an_edge_a_combination_searches_further_at_the_same_density():
    protocol = {**PROTOCOL, "budget": 10, "centre": {"optimizer.lr": 2}}
    protocol["beyond_edge"] = {"decades": 2, "rounds": 2}
    check_protocol(protocol)
    [combination] = combinations_of([["model=net1", "optimizer=adam", "seed=0"]], protocol, "x")
    first = first_trials(combination, protocol, value_of=lambda given, key: 1e-3)
    assert len(first) == 10 and combination.region == pytest.approx((1e-5, 1e-1))
    more = [lr_of(t) for t in beyond_edge(combination, "high", protocol)]
    assert len(more) == 5 and all(0.1 <= v <= 10 for v in more)
    assert combination.region == pytest.approx((1e-5, 10.0))
    assert combination.jobs([["optimizer.lr=0.5"]]) == [
        ["model=net1", "optimizer=adam", "optimizer.lr=0.5", "seed=0"]
    ]


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"centre": {"optimizer.lr": -1}}, "tune.centre must name one key and its decades"),
        ({"centre": {"optimizer.lr": 2}, "method": "grid"}, "tune.centre needs tune.method=random"),
        ({"beyond_edge": {"decades": 2, "rounds": 1}}, "tune.beyond_edge needs tune.centre"),
        (
            {"centre": {"optimizer.lr": 2}, "beyond_edge": {"decades": 2}},
            "tune.beyond_edge needs decades > 0 and rounds >= 1",
        ),
    ],
)
def test_a_centre_or_edge_rule_that_cannot_run_is_one_config_error(extra, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_protocol({**PROTOCOL, **extra})


@pytest.mark.slow
def test_a_pick_at_the_edge_of_its_range_is_searched_again_beyond_it(tmp_path, mnist_dir):
    # 20 steps of SGD at rates around 1e-5 (one decade each way): the larger the rate, the
    # better, so the pick is at the high edge of every range until the rounds run out.
    result = run_cli(
        "-m", "experiment=course_tune", "model=net1", "optimizer=sgd", "optimizer.lr=1e-5",
        "tune.budget=3", "tune.centre={optimizer.lr: 1}",
        "tune.beyond_edge={decades: 1, rounds: 2}", *TINY, f"hydra.sweep.dir={tmp_path / 't'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    log = result.stdout + result.stderr
    assert "beyond the edge, round 1: 2 more runs" in log  # 1 decade of 2: half the density
    assert "beyond the edge, round 2: 2 more runs" in log
    runs = _runs(tmp_path / "t")
    assert len(runs) == 7 and runs["lr"].between(1e-6, 1e-2).all()
    assert (runs["lr"] > 1e-4).sum() == 4  # the two rounds: 1e-4..1e-3 and 1e-3..1e-2
    assert json.loads((tmp_path / "t" / SWEEP_FILE).read_text())["invocations"][-1]["jobs"] == 7
    best = runs.loc[runs["final_val_accuracy"].idxmax(), "lr"]
    assert best == runs["lr"].max()  # still at the edge: the rounds ran out, not the search
    again = run_cli(
        "-m", "experiment=course_tune", "model=net1", "optimizer=sgd", "optimizer.lr=1e-5",
        "tune.budget=3", "tune.centre={optimizer.lr: 1}",
        "tune.beyond_edge={decades: 1, rounds: 2}", *TINY, f"hydra.sweep.dir={tmp_path / 't'}",
        cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert (again.stdout + again.stderr).count("skipped: this config already finished") == 7


def _runs(folder) -> pd.DataFrame:
    return storage.read_runs(folder)  # its tables, parts included


def _mtimes(folder) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob(RUN_FILE)}


def _tuning_study(cwd, folder):
    """The tuning study of `tuning_study`, into `folder`."""
    return run_cli(
        "-m",
        "experiment=course_tune",
        "model=net1",
        "optimizer=sgd,adam",
        "tune.budget=3",
        *TINY,
        f"hydra.sweep.dir={folder}",
        cwd=cwd,
    )


@pytest.fixture(scope="module")
def tuning_study(tmp_path_factory, mnist_dir):
    """A random-search tuning study on a tiny subset: net1 x sgd, adam, 3 trials each."""
    cwd = tmp_path_factory.mktemp("tuning")
    folder = cwd / "tune"
    result = _tuning_study(cwd, folder)
    assert result.returncode == 0, result.stderr
    return cwd, folder


@pytest.mark.slow
def test_random_search_trains_its_trials_stacked_and_resumes(tuning_study):
    cwd, folder = tuning_study
    runs = _runs(folder)
    assert len(runs) == 6 and runs.groupby("optimizer")["lr"].nunique().to_dict() == {
        "adam": 3,
        "sgd": 3,
    }
    records = [json.loads(p.read_text()) for p in folder.rglob(RUN_FILE)]
    assert {r["engine"] for r in records} == {"stacked"}
    protocol = json.loads((folder / "tuning.json").read_text())
    assert protocol["budget"] == 3 and protocol["tuned_keys"] == ["optimizer.lr"]
    before = _mtimes(folder)
    again = _tuning_study(cwd, folder)
    assert again.returncode == 0, again.stderr
    assert _mtimes(folder) == before  # every trial had finished: nothing trained again


@pytest.mark.slow
def test_a_study_resumed_from_its_committed_tables_alone_trains_nothing_again(tuning_study):
    # A fresh clone has a sweep's consolidated tables (committed) but no run folders (ignored):
    # the study picks up from the tables, as a long study does across machines.
    cwd, folder = tuning_study
    clone = cwd / "clone"
    clone.mkdir()
    for table in (RUNS_TABLE, "curves.parquet"):
        (clone / table).write_bytes((folder / table).read_bytes())
    again = _tuning_study(cwd, clone)
    assert again.returncode == 0, again.stderr
    assert not list(clone.rglob(RUN_FILE))  # nothing trained
    assert "skipped: this config already finished" in again.stderr + again.stdout
    pd.testing.assert_frame_equal(
        _runs(clone).drop(columns="run_dir"), _runs(folder).drop(columns="run_dir")
    )


@pytest.mark.slow
def test_the_evaluation_phase_takes_the_rate_the_validation_set_chose(tuning_study):
    cwd, folder = tuning_study
    tuned = _runs(folder)
    completed = tuned[tuned["status"] == "completed"]
    expected = completed.loc[completed.groupby("optimizer")["final_val_accuracy"].idxmax()]
    expected = dict(zip(expected["optimizer"], expected["lr"], strict=True))
    evaluation = cwd / "eval"
    result = run_cli(
        "-m",
        "experiment=course",
        "model=net1",
        "optimizer=sgd,adam",
        "seed=1,2",
        f"tune.source={folder}",
        *TINY,
        f"hydra.sweep.dir={evaluation}",
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    runs = _runs(evaluation)
    assert len(runs) == 4 and set(runs["seed"]) == {1, 2}
    chosen = runs.groupby("optimizer")["lr"].unique().map(list).to_dict()
    assert chosen == {o: [lr] for o, lr in expected.items()}
    selection = (evaluation / "selection.md").read_text()
    assert "final_val_accuracy" in selection and "The test set chose nothing" in selection
    study = report.tuning_study(evaluation)  # its tuning curves: the trials it chose among
    assert isinstance(study, report.TuningStudy)
    assert study.sweep == folder and study.keys == ["optimizer.lr"] and len(study.runs) == 6
    # the zoo's reading of it: Bonferroni over the one other setting, phase 1's 3 trials each
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_reading

    reading = zoo_reading.main(evaluation)
    assert "Of 1 other settings:" in reading and "with Bonferroni over 1:" in reading
    tuning = reading.split("## Which are cheap to tune")[1].split("\n## ")[0]
    assert "| sgd | 3 |" in tuning and "| adam | 3 |" in tuning
    assert "SGD " in reading.split("## Which are expensive per step")[1]


def test_a_pick_is_at_the_edge_of_the_search_a_shortlist_was_drawn_from(tuning_study, tmp_path):
    """A shortlist holds two of the search's three rates per optimizer: sgd's middle and
    largest with the middle one best (no edge of the search, though it is one of the two), adam's
    smallest best (an edge). 'At the edge' is judged on the search, followed back from the
    shortlist's tuning.json."""
    from harness.tuning.selection import searched_study, selection_table

    _, search = tuning_study
    runs = pd.read_parquet(search / RUNS_TABLE).sort_values("lr")
    by_optimizer = dict(list(runs.groupby("optimizer")))
    sgd, adam = by_optimizer["sgd"].iloc[1:], by_optimizer["adam"].iloc[:2]
    short = pd.concat(
        [sgd.assign(final_val_accuracy=[0.9, 0.8]), adam.assign(final_val_accuracy=[0.9, 0.8])]
    )
    folder = tmp_path / "shortlist"
    folder.mkdir()
    short.to_parquet(folder / RUNS_TABLE, index=False)
    curves = pd.read_parquet(search / "curves.parquet")
    curves[curves["run_dir"].isin(short["run_dir"])].to_parquet(folder / "curves.parquet")
    protocol = {
        "method": "shortlist",
        "source": str(search),
        "phase_keys": [],
        "tuned_keys": ["optimizer.lr"],
    }
    (folder / "tuning.json").write_text(json.dumps(protocol))

    assert searched_study(str(folder))[0] == str(search)
    table = selection_table(str(folder), ["optimizer.lr"], []).set_index("setting")
    assert table.loc["sgd", "optimizer.lr"] == sgd["lr"].iloc[0]  # the search's middle rate
    assert table.loc["sgd", "at the edge"] == ""
    assert table.loc["adam", "optimizer.lr"] == runs[runs["optimizer"] == "adam"]["lr"].min()
    assert table.loc["adam", "at the edge"] == "optimizer.lr"
    (folder / "tuning.json").unlink()  # the shortlist alone: both picks are edges of its two
    assert (
        selection_table(str(folder), ["optimizer.lr"], [])["at the edge"].tolist()
        == ["optimizer.lr"] * 2
    )


def test_a_search_whose_trials_all_end_alike_has_no_edge(tuning_study, tmp_path):
    """Where every trial of a search ends with the same validation quality (the rate moves
    nothing), the tie-break's pick at the smallest rate is no edge: not searched beyond, and
    marked so in selection.md; adam, its smallest rate made best, is at an edge."""
    from harness.tuning.selection import edges, group_of, selection_table

    _, search = tuning_study
    runs = pd.read_parquet(search / RUNS_TABLE)
    sgd, adam = runs["optimizer"] == "sgd", runs["optimizer"] == "adam"
    smallest_adam = adam & (runs["lr"] == runs.loc[adam, "lr"].min())
    runs.loc[sgd, ["final_val_accuracy", "final_train_loss"]] = 0.5  # as if the rate did nothing
    runs.loc[adam, "final_val_accuracy"] = 0.4 + 0.5 * smallest_adam[adam]
    folder = tmp_path / "alike"
    folder.mkdir()
    runs.to_parquet(folder / RUNS_TABLE, index=False)
    (folder / "curves.parquet").write_bytes((search / "curves.parquet").read_bytes())

    groups = {
        o: group_of(
            json.loads(runs.loc[runs["optimizer"] == o, "config"].iloc[0]), ["optimizer.lr"]
        )
        for o in ("sgd", "adam")
    }
    assert edges(folder, "optimizer.lr") == {groups["adam"]: "low"}
    table = selection_table(str(folder), ["optimizer.lr"], []).set_index("setting")
    assert table.loc["sgd", "at the edge"] == "(every trial alike)"
    assert table.loc["sgd", "optimizer.lr"] == runs.loc[sgd, "lr"].min()  # the tie-break's
    assert table.loc["adam", "at the edge"] == "optimizer.lr"


def test_an_evaluation_of_an_unfinished_tuning_study_is_one_line(tuning_study, tmp_path):
    """A tuning study stopped part-way (a session's end) has fewer trials of some settings
    than it plans: a choice among them is not its protocol's, so the next phase refuses."""
    _, folder = tuning_study
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    for name in (SWEEP_FILE, "curves.parquet"):
        (unfinished / name).write_bytes((folder / name).read_bytes())
    pd.read_parquet(folder / RUNS_TABLE).iloc[:4].to_parquet(unfinished / RUNS_TABLE)
    assert_evaluation_refused(
        train_in_process, tmp_path, unfinished, "is unfinished: 4 of the 6 runs"
    )


def test_an_evaluation_of_a_study_without_validation_data_is_one_line(tuning_study, tmp_path):
    """A study that held no validation data out could choose only on the test set."""
    _, folder = tuning_study
    blind = tmp_path / "blind"
    blind.mkdir()
    (blind / SWEEP_FILE).write_bytes((folder / SWEEP_FILE).read_bytes())
    runs = pd.read_parquet(folder / RUNS_TABLE)
    runs.drop(columns=[c for c in runs if "_val_" in c]).to_parquet(blind / RUNS_TABLE)
    assert_evaluation_refused(train_in_process, tmp_path, blind, "has no validation split")


@pytest.mark.slow
def test_an_evaluation_without_its_tuning_study_is_one_line(tmp_path):
    message = "is not a folder: run the tuning study first"
    assert_evaluation_refused(run_cli, tmp_path, tmp_path / "nothing", message)


@pytest.mark.slow
def test_a_single_run_without_its_tuning_study_is_one_line(tmp_path):
    # raised by the ${tuned:} resolver inside the job: one line, not OmegaConf's wrapping of it
    # after a line of Hydra's about the job; and no run folder
    source, run_dir = tmp_path / "nothing", tmp_path / "run"
    result = run_cli(
        "experiment=course",
        "model=net1",
        "optimizer=sgd",
        f"tune.source={source}",
        *TINY,
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"harness-train: error: tune.source={source} is not a folder: run the tuning study first"
    ]
    assert not run_dir.exists()


def assert_evaluation_refused(run, cwd, source, message: str) -> None:
    """The evaluation phase of the tuning study in `source`, run by `run` (a process or in
    this one), ends in one line that says `message`, and writes nothing."""
    evaluation = cwd / "eval"
    result = run(
        "-m",
        "experiment=course",
        "model=net1",
        "optimizer=sgd,adam",
        f"tune.source={source}",
        *TINY,
        f"hydra.sweep.dir={evaluation}",
        cwd=cwd,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert not evaluation.exists()


@pytest.mark.slow
def test_optuna_tpe_tunes_in_stacked_batches_and_resumes(tmp_path):
    folder = tmp_path / "tpe"
    command = [
        "-m",
        "experiment=tune_tpe",
        "model=net1",
        "optimizer=adam",
        "tune.budget=4",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.sampler.n_startup_trials=2",
        *TINY,
        f"hydra.sweep.dir={folder}",
    ]
    result = run_cli(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    runs = _runs(folder)
    assert len(runs) == 4 and runs["lr"].nunique() == 4
    records = [json.loads(p.read_text()) for p in folder.rglob(RUN_FILE)]
    assert {r["engine"] for r in records} == {"stacked"}  # each batch of 2 trials one stack
    assert "training 2 net1 models stacked" in result.stdout + result.stderr
    best = runs.loc[runs["final_val_accuracy"].idxmax(), "lr"]
    assert (
        f"'optimizer.lr': {best}" in result.stdout + result.stderr
    )  # Optuna's best is the best on validation
    before = _mtimes(folder)
    again = run_cli(*command, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _mtimes(folder) == before and len(_runs(folder)) == 4  # the same trials, answered
    assert "UserWarning" not in result.stderr + again.stderr  # the sweep callback ran clean


@pytest.mark.slow
def test_a_shortlist_trains_the_best_trials_of_its_earlier_study_at_another_length(tuning_study):
    cwd, folder = tuning_study
    tuned = _runs(folder)
    ranked = tuned.sort_values("final_val_accuracy", ascending=False)
    expected = {o: sorted(g["lr"].head(2)) for o, g in ranked.groupby("optimizer")}
    shortlist = cwd / "shortlist"
    result = run_cli(
        "-m",
        "experiment=course_tune",
        "model=net1",
        "optimizer=sgd,adam",
        "tune.method=shortlist",
        "tune.budget=2",
        f"+tune.source={folder}",
        "+tune.phase_keys=[train.iterations]",
        *TINY,
        "train.iterations=60",  # the earlier study's length was TINY's
        f"hydra.sweep.dir={shortlist}",
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr
    runs = _runs(shortlist)
    assert set(runs["iterations"]) == {60} and len(runs) == 4
    found = {o: sorted(g["lr"]) for o, g in runs.groupby("optimizer")}
    assert found == expected  # the two best by validation accuracy, none drawn anew
    # Its tuning curves are its source's: its own trials are that study's best, not draws.
    report.write_report(shortlist, formats=("png",))
    summary = (shortlist / "report" / "summary.md").read_text()
    assert f"trials of 20 iterations in {folder}), over every" in summary
    table = summary.split("## Tuning curves")[1].split("##")[0]
    assert "| net1 | sgd | 3 |" in table and "| net1 | adam | 3 |" in table
    assert (shortlist / "report" / "tuning_curves.png").exists()


def test_a_tuning_study_is_followed_back_to_its_trials_or_skipped_in_one_line(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "elsewhere" / "results"

    def study(name: str, **protocol) -> Path:
        (results / name).mkdir(parents=True, exist_ok=True)
        (results / name / PROTOCOL_FILE).write_text(
            json.dumps({"tuned_keys": ["optimizer.lr"], **protocol})
        )
        return results / name

    shortlist = study("shortlist", method="shortlist", source="results/tune")
    missing = report.tuning_study(shortlist)
    assert isinstance(missing, report.Skipped)
    assert str(missing) == f"the tuning study of {shortlist}, results/tune, is not here"
    with pytest.raises(report.Skipped, match="is not here"):  # not its own, flattering trials
        report.tuning_study_or_rates(shortlist, pd.DataFrame())
    # the source as the study named it, found under the current folder (the report runs where
    # the study ran) ...
    here = tmp_path / "results" / "tune"
    here.mkdir(parents=True)
    (here / PROTOCOL_FILE).write_text(json.dumps({"tuned_keys": ["lr"], "method": "random"}))
    found = report.tuning_study(shortlist)
    assert isinstance(found, report.TuningStudy) and found.sweep == Path("results/tune")
    # ... or beside the sweep, which wins: a copied results tree reads its own study
    tune = study("tune", method="random")
    found = report.tuning_study(shortlist)
    assert isinstance(found, report.TuningStudy) and found.sweep == tune
    study("tune", method="shortlist", source="results/shortlist")
    circle = report.tuning_study(shortlist)
    assert isinstance(circle, report.Skipped) and "in a circle" in str(circle)


@pytest.mark.slow
# heavy: the phases test_the_evaluation_phase_takes_the_rate_the_validation_set_chose checks
@pytest.mark.heavy
def test_the_decayed_zoos_three_phases_decay_each_run_to_zero_over_its_own_length(tmp_path):
    """The decayed zoo's presets end to end on tiny runs: phase 1 (40 steps), its shortlist and
    the evaluation (80 steps each), each run's rate warmed up to its peak and decayed to zero
    at its last step (a run that diverged stops before), and the evaluation at the shortlist's
    pick on validation."""
    from harness.results import load_curves, load_runs

    names = 'tune.optimizers="sgd,schedulefree_sgd"'
    small = [*TINY[:3], "train.eval_train_size=100", "train.log_every=1", "model=net1", names]
    phases = [
        ("zoo_decay_tune", "tune", 40, None, ["tune.budget=2"]),
        ("zoo_decay_shortlist", "shortlist", 80, "tune", []),
        ("zoo_decay", "evaluate", 80, "shortlist", []),
    ]
    for experiment, name, steps, source, extra in phases:
        folder = tmp_path / name
        overrides = [f"experiment={experiment}", *small, f"train.iterations={steps}"]
        overrides += [f"train.eval_every={steps // 2}", *extra, f"hydra.sweep.dir={folder}"]
        if source:
            overrides.append(f"tune.source={tmp_path / source}")
        result = run_cli("-m", *overrides, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        runs = load_runs(folder)
        assert set(runs["schedule"]) == {"warmup_cosine"}
        rates = load_curves(folder, runs, metrics=["lr"]).groupby("run_dir")["value"]
        peak = runs.set_index("run_dir")["lr"]
        assert rates.max().to_dict() == pytest.approx(peak.to_dict())
        completed = runs.loc[runs["status"] == "completed", "run_dir"]
        assert len(completed) and (rates.last()[completed] < 1e-3 * peak[completed]).all()
    shortlist, evaluation = load_runs(tmp_path / "shortlist"), load_runs(tmp_path / "evaluate")
    assert set(evaluation["seed"]) == {1, 2, 3}
    best = shortlist.loc[shortlist.groupby("optimizer")["final_val_accuracy"].idxmax()]
    assert evaluation.groupby("optimizer")["lr"].unique().map(list).to_dict() == {
        o: [lr] for o, lr in zip(best["optimizer"], best["lr"], strict=True)
    }


def test_a_lineage_follows_shortlists_and_evaluations_back_to_the_search(tmp_path):
    """An evaluation (tune.source in its multirun.yaml) of a shortlist of a shortlist of a
    search: followed back to the search, with the phase keys of both shortlists; the report's
    tuning study and the selection's searched study are that one folder."""
    from harness.analysis import LR_KEY
    from harness.tuning.lineage import DREW, UNTUNED, lineage

    def study(name: str, protocol: dict | None = None, source: str | None = None) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        if protocol is not None:
            (folder / PROTOCOL_FILE).write_text(json.dumps({"tuned_keys": ["lr"], **protocol}))
        if source is not None:
            (folder / "multirun.yaml").write_text(f"tune:\n  source: {source}\n")
        return folder

    search = study("search", {"method": "random"})
    study("short", {"method": "shortlist", "source": "search", "phase_keys": ["a"]})
    study("shorter", {"method": "shortlist", "source": "short", "phase_keys": ["b"]})
    evaluation = study("evaluation", source="shorter")

    traced = lineage(evaluation)
    assert [s.folder.name for s in traced.studies] == ["evaluation", "shorter", "short", "search"]
    assert traced.end == DREW and traced.last.folder == search
    assert traced.phase_keys == ["b", "a"]
    assert report.tuning_study(evaluation).sweep == search
    grid = study("grid")
    assert lineage(grid).end == UNTUNED  # a sweep that tuned nothing ends at itself ...
    rates = report.tuning_study_or_rates(grid, pd.DataFrame({"lr": [0.1]}))
    assert rates.sweep == grid and rates.keys == [LR_KEY]  # ... its own rates are its trials
    untuned_source = study("untuned_source", source="grid")  # an evaluation of those rates
    with pytest.raises(report.Skipped, match="not a tuning study"):
        report.tuning_study_or_rates(untuned_source, pd.DataFrame())
