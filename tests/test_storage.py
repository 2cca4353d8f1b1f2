"""A study's tables on disk (harness.storage): a study grows by appending parts, reads them as one
table, never sees half a part, compacts into one pair; `load_curves` reads only what is asked
and gives what the whole table gives for it."""

import shutil

import pandas as pd
import pytest

from harness import storage
from harness.results import STEP_METRICS, collect, concat_curves, load_curves, load_runs


def _plain(frame: pd.DataFrame) -> pd.DataFrame:
    """A table with its categories as their values, rows in a fixed order: to compare."""
    text = [c for c in frame.columns if frame[c].dtype == "category" or frame[c].dtype == "str"]
    frame = frame.astype({c: object for c in text})
    order = [c for c in ("run_dir", "iteration", "metric") if c in frame]
    return frame.sort_values(order, kind="stable", ignore_index=True)


@pytest.fixture
def growing(tmp_path, smoke_sweep):
    """The smoke sweep's run folders, consolidated in two steps: 24 runs, then the other 16."""
    study = tmp_path / "study"
    runs = sorted(p.parent for p in smoke_sweep.glob("*/run.json"))
    for run in runs[:24]:
        shutil.copytree(run, study / run.name)
    collect(study)
    for run in runs[24:]:
        shutil.copytree(run, study / run.name)
    return study


def _rows(study) -> int:
    return sum(len(pd.read_parquet(f)) for f in storage.curves_files(study))


def test_a_study_grows_by_parts_and_reads_as_one_table(growing, smoke_sweep):
    rows = _rows(smoke_sweep)
    top = (growing / storage.RUNS_TABLE).read_bytes(), (growing / storage.CURVES_TABLE).read_bytes()
    assert collect(growing) == (40, rows)
    # the first pair is left as it was: a commit of the study adds only the new part
    assert top == (
        (growing / storage.RUNS_TABLE).read_bytes(),
        (growing / storage.CURVES_TABLE).read_bytes(),
    )
    assert len(storage.parts(growing)) == 1
    assert collect(growing) == (40, rows) and len(storage.parts(growing)) == 1  # nothing new
    for run_json in growing.glob("*/run.json"):  # as committed: the tables alone
        shutil.rmtree(run_json.parent)
    whole = load_runs(smoke_sweep)
    pd.testing.assert_frame_equal(
        load_runs(growing).drop(columns="run_dir"), whole.drop(columns="run_dir")
    )
    names = {r: r.rsplit("/", 1)[1] for r in whole["run_dir"]}
    expected = _plain(load_curves(smoke_sweep).assign(run_dir=lambda f: f["run_dir"].map(names)))
    found = load_curves(growing)
    found = _plain(
        found.assign(run_dir=found["run_dir"].astype(str).map(lambda r: r.rsplit("/", 1)[1]))
    )
    pd.testing.assert_frame_equal(found, expected)


def test_a_part_being_written_is_not_read(growing):
    collect(growing)
    [name] = storage.parts(growing)
    part_runs = growing / storage.PARTS_FOLDER / f"{name}{storage.RUNS_SUFFIX}"
    part_runs.rename(part_runs.with_name(".cut-short.tmp"))  # its curves written, its runs not
    for run_json in growing.glob("*/run.json"):
        shutil.rmtree(run_json.parent)
    assert len(load_runs(growing)) == 24
    assert load_curves(growing)["run_dir"].nunique() == 24


def test_a_finished_study_compacts_into_one_pair(growing):
    collect(growing)
    for run_json in growing.glob("*/run.json"):
        shutil.rmtree(run_json.parent)
    before_runs, before_curves = load_runs(growing), _plain(load_curves(growing))
    assert storage.compact(growing) == (40, _rows(growing))
    assert not (growing / storage.PARTS_FOLDER).exists()
    pd.testing.assert_frame_equal(load_runs(growing), before_runs)
    pd.testing.assert_frame_equal(_plain(load_curves(growing)), before_curves)


def test_only_the_metrics_and_runs_asked_for_are_read_and_they_equal_the_whole(smoke_sweep):
    runs = load_runs(smoke_sweep)
    whole = _plain(load_curves(smoke_sweep, runs))
    assert set(whole["metric"]) >= {"batch_loss", "lr", "test_accuracy"}
    evaluated = _plain(load_curves(smoke_sweep, runs, skip=STEP_METRICS))
    assert not set(evaluated["metric"]) & set(STEP_METRICS)
    kept = whole[~whole["metric"].isin(STEP_METRICS)].reset_index(drop=True)
    pd.testing.assert_frame_equal(evaluated, kept, check_categorical=False)
    some = runs[runs["optimizer"] == "adam"]
    read = load_curves(smoke_sweep, some, metrics=["test_accuracy"])
    accuracy = _plain(read)
    expected = whole[(whole["optimizer"] == "adam") & (whole["metric"] == "test_accuracy")]
    assert len(accuracy) == len(expected) > 0
    assert accuracy["value"].tolist() == expected["value"].tolist()
    # several reads, one table with categories
    joined = concat_curves([load_curves(smoke_sweep, runs, metrics=["lr"]), read])
    assert joined["metric"].dtype == "category" and len(joined) > len(read)
    assert set(joined["metric"]) == {"lr", "test_accuracy"}


def test_curves_hold_each_runs_identity_once_not_per_row(smoke_sweep):
    curves = load_curves(smoke_sweep)
    for column in ("model", "optimizer", "run_dir", "metric", "config_id", "status"):
        assert curves[column].dtype == "category", column
    copied = curves.astype({c: object for c in curves.columns if curves[c].dtype == "category"})
    assert curves.memory_usage(deep=True).sum() < copied.memory_usage(deep=True).sum() / 3


def test_only_the_columns_asked_for_are_read(smoke_sweep):
    curves = load_curves(smoke_sweep, metrics=["test_accuracy"], columns=["optimizer", "time_s"])
    assert list(curves.columns) == ["optimizer", "iteration", "time_s", "metric", "value"]
    whole = load_curves(smoke_sweep, metrics=["test_accuracy"])
    assert curves["value"].tolist() == whole["value"].tolist()
    assert curves["time_s"].tolist() == whole["time_s"].tolist()
