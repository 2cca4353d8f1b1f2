"""A study's tables under crashes and concurrency (harness.storage, harness.sweeps.integrity):
each run once and each curve row once at every instant, after a SIGKILL at any file operation
of a consolidation or a compaction and after the command runs again; two writers serialise;
`harness-collect --check` finds what is wrong and `--repair` fixes what can be fixed."""

import fcntl
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness import storage
from harness.results import collect
from harness.sweeps.integrity import check, repair

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "results" / "course"
KILL_AT = Path(__file__).with_name("kill_at.py")


def _course_runs(count: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`count` runs of the committed course study, and their curve rows."""
    runs = storage.read_runs(COURSE).iloc[:count]
    curves = storage.read_curves(COURSE, run_dirs=runs["run_dir"]).to_pandas()
    return runs, curves


@pytest.fixture
def split_study(tmp_path) -> tuple[Path, int]:
    """12 runs of the course study as a top pair of 4 and two parts of 4, and its row count."""
    runs, curves = _course_runs(12)
    study = tmp_path / "study"
    for part in (slice(0, 4), slice(4, 8), slice(8, 12)):
        some = runs.iloc[part]
        storage.append(study, some, curves[curves["run_dir"].isin(some["run_dir"])])
    assert len(storage.parts(study)) == 2
    return study, len(curves)


def _assert_each_once(study: Path, runs: set[str], rows: int) -> None:
    """The invariant: a reader sees every run once and every (run, metric, iteration) once."""
    table = storage.read_runs(study)
    assert not table["run_dir"].duplicated().any()
    assert set(table["run_dir"]) == runs
    keys = storage.read_curves(study, columns=["iteration", "metric"]).to_pandas()
    assert not keys.duplicated(storage.ROW_KEY).any()
    assert len(keys) == rows
    assert set(keys["run_dir"]) == runs


def _kill(study: Path, command: str, at: int) -> bool:
    """The command on `study`, SIGKILLed at its `at`-th file operation; False if it ended first."""
    done = subprocess.run(
        [sys.executable, str(KILL_AT), str(at), command, str(study)],
        capture_output=True,
        cwd=ROOT,
    )
    assert done.returncode in (0, -9), done.stderr.decode()
    return done.returncode == -9


def test_a_top_table_written_before_the_parts_go_doubles_no_row(split_study):
    """The state a compaction killed between writing the top pair and removing the parts
    leaves (the defect: every part's rows read twice, then written twice by the next one)."""
    study, rows = split_study
    runs = set(storage.read_runs(study)["run_dir"])
    whole = storage.read_curves(study).to_pandas()
    storage.write_curves(whole, study / storage.CURVES_TABLE)  # curves written, runs not yet
    _assert_each_once(study, runs, rows)
    storage.write_table(storage.read_runs(study), study / storage.RUNS_TABLE)  # runs too
    _assert_each_once(study, runs, rows)
    assert storage.compact(study) == (12, rows)
    _assert_each_once(study, runs, rows)
    assert len(pd.read_parquet(study / storage.CURVES_TABLE)) == rows


@pytest.mark.slow
def test_a_compaction_killed_at_every_file_operation_keeps_each_run_and_row_once(
    split_study, tmp_path
):
    study, rows = split_study
    runs = set(storage.read_runs(study)["run_dir"])
    killed = 0
    for at in range(1, 40):
        copy = tmp_path / f"killed-{at}"
        shutil.copytree(study, copy)
        if not _kill(copy, "compact", at):
            break
        killed += 1
        _assert_each_once(copy, runs, rows)
        assert storage.compact(copy) == (12, rows)  # run again: it finishes the job
        _assert_each_once(copy, runs, rows)
        assert not storage.parts(copy) and not storage.leftovers(copy)
        assert all(finding.ok for finding in check(copy)[0])
    assert killed >= 8  # two tables written, two renamed, four files removed, at least


@pytest.mark.slow
@pytest.mark.parametrize("tables_before", [False, True], ids=["first", "appended"])
def test_a_consolidation_killed_at_every_file_operation_keeps_each_run_and_row_once(
    smoke_sweep, tmp_path, tables_before
):
    folders = sorted(p.parent for p in smoke_sweep.glob("*/run.json"))[:8]
    study = tmp_path / "study"
    for folder in folders[:4] if tables_before else []:
        shutil.copytree(folder, study / folder.name)
    if tables_before:
        collect(study)
    for folder in folders[4:] if tables_before else folders:
        shutil.copytree(folder, study / folder.name)
    runs = {f.name for f in folders}
    rows = sum(len(pd.read_parquet(f / "metrics.parquet")) for f in folders)
    killed = 0
    for at in range(1, 20):
        copy = tmp_path / f"killed-{at}"
        shutil.copytree(study, copy)
        if not _kill(copy, "collect", at):
            break
        killed += 1
        held = set(storage.read_runs(copy)["run_dir"]) if storage.has_tables(copy) else set()
        assert held <= runs
        if held:  # what the tables hold so far, each once
            _assert_each_once(
                copy,
                held,
                sum(len(pd.read_parquet(copy / r / "metrics.parquet")) for r in held),
            )
        assert collect(copy) == (8, rows)
        _assert_each_once(copy, runs, rows)
        assert all(finding.ok for finding in check(copy)[0])
    assert killed >= 3


def test_a_writer_waits_for_the_study_lock(split_study):
    """A consolidation started while another writer holds the study's lock does nothing until
    it is released (two writers serialise)."""
    study, _ = split_study
    before = storage.parts(study)
    with open(study / storage.LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        compaction = subprocess.Popen(
            ["harness-collect", "--compact", str(study)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(3.0)  # time to start, and to block on the lock
        assert compaction.poll() is None
        assert storage.parts(study) == before
        fcntl.flock(handle, fcntl.LOCK_UN)
        out, err = compaction.communicate(timeout=60)
    assert compaction.returncode == 0, err.decode()
    assert not storage.parts(study)


@pytest.mark.slow
def test_two_consolidations_at_once_write_each_run_once(smoke_sweep, tmp_path):
    folders = sorted(p.parent for p in smoke_sweep.glob("*/run.json"))[:8]
    for attempt in range(3):
        study = tmp_path / f"study-{attempt}"
        for folder in folders:
            shutil.copytree(folder, study / folder.name)
        writers = [
            subprocess.Popen(["harness-collect", str(study)], stdout=subprocess.PIPE)
            for _ in range(2)
        ]
        compaction = subprocess.Popen(
            ["harness-collect", "--compact", str(study)], stdout=subprocess.PIPE
        )
        assert all(w.wait(timeout=120) == 0 for w in [*writers, compaction])
        written = [pd.read_parquet(f, columns=["run_dir"]) for f in storage.runs_files(study)]
        physical = pd.concat(written)["run_dir"]
        assert len(physical) == 8 and physical.is_unique  # each run written once, anywhere
        assert all(finding.ok for finding in check(study)[0])


def test_check_finds_duplicates_and_repair_drops_them(split_study):
    study, rows = split_study
    runs = set(storage.read_runs(study)["run_dir"])
    # a part written twice (as racing writers without the lock did) and a row twice in a part
    [first, second] = storage.parts(study)
    part = study / storage.PARTS_FOLDER
    for suffix in (storage.CURVES_SUFFIX, storage.RUNS_SUFFIX):
        shutil.copy(part / f"{first}{suffix}", part / f"{first}-again{suffix}")
    curves = pd.read_parquet(part / f"{second}{storage.CURVES_SUFFIX}")
    storage.write_curves(
        pd.concat([curves, curves.iloc[:5]]), part / f"{second}{storage.CURVES_SUFFIX}"
    )
    (part / f".x{storage.CURVES_SUFFIX}{storage.TMP_SUFFIX}").write_bytes(b"half")
    findings = {f.check: f for f in check(study)[0]}
    assert not findings["runs unique"].ok and "in parts/" in findings["runs unique"].problems[0]
    assert any("5 rows twice" in p for p in findings["curve rows unique"].problems)
    assert not findings["parts complete"].ok
    assert findings["config hashes"].ok
    done = repair(study)
    assert any("removed" in line for line in done) and any("5 rows" in line for line in done)
    assert all(finding.ok for finding in check(study)[0])
    _assert_each_once(study, runs, rows)


def test_check_finds_a_config_hash_that_is_not_its_configs(split_study):
    study, _ = split_study
    table = pd.read_parquet(study / storage.RUNS_TABLE)
    table.loc[0, "config_hash"] = "0123456789abcdef"
    storage.write_table(table, study / storage.RUNS_TABLE)
    [hashes] = [f for f in check(study)[0] if f.check == "config hashes"]
    [problem] = hashes.problems
    assert problem.startswith(f"{table.loc[0, 'run_dir']}: 0123456789abcdef, its config ")
    assert not hashes.fixable


@pytest.mark.parametrize("command", [["--compact"], ["--check"], []])
def test_a_damaged_table_is_named_in_one_line_and_left_as_it_is(split_study, command):
    study, _ = split_study
    table = study / storage.CURVES_TABLE
    table.write_bytes(table.read_bytes()[:1000])  # cut short
    damaged = table.read_bytes()
    done = subprocess.run(
        ["harness-collect", *command, str(study)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("harness-collect: error: ") and str(table) in line
    assert "damaged" in line and "Traceback" not in done.stderr
    assert table.read_bytes() == damaged


def test_check_on_a_clean_study_says_ok_for_each_check(split_study):
    study, rows = split_study
    done = subprocess.run(
        ["harness-collect", "--check", str(study)], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "runs unique",
        "curve rows unique",
        "parts complete",
        "config hashes",
        "finished.json",
    ]
    assert all(": ok (" in line for line in lines)
    assert f"{rows} rows" in lines[1]
