"""A study's fsck (`harness-collect --check [--repair]`): are its tables what a reader may trust?

Each check reads the files as they lie on disk, not through the reader's de-duplication
(harness.storage.owners), and says in one line what it found:

* **runs unique:** no run in two tables or twice in one, and no config (with its seed) trained
  twice under two run folders;
* **curve rows unique:** no (run, metric, iteration) row twice in what the study holds, and
  every row belonging to a run of its own table;
* **parts complete:** every part has its runs and its curves, and no writer left a temporary
  file or a part's curves without its runs;
* **config hashes:** each run's `config_hash` is the hash of its recorded config (from its
  run.json where its folder is still there, else from its identity in the table and its seed);
* **finished.json:** the sweep's index of finished runs names exactly the runs it holds.

`repair` fixes what can be fixed, under the study's writer lock: duplicates dropped (a run
kept where a reader takes it from: the last table that holds it), rows of no run dropped, what
killed writers left removed, finished.json made again. A hash that does not match its config
is reported, not changed. A file that cannot be read is named and left as it is.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from harness import storage
from harness.config.identity import config_hash
from harness.results import RUN_FILE, atomic_write_bytes, read_run
from harness.sweeps.resume import INDEX_FILE, finished_runs


@dataclass
class Finding:
    """One check's verdict: its name, what it found (empty: nothing wrong), and whether
    `repair` can fix it."""

    check: str
    problems: list[str] = field(default_factory=list)
    fixable: bool = True

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self, detail: str) -> str:
        if self.ok:
            return f"{self.check}: ok ({detail})"
        shown = "; ".join(self.problems[:3])
        more = f"; and {len(self.problems) - 3} more" if len(self.problems) > 3 else ""
        return f"{self.check}: {len(self.problems)} found: {shown}{more}"


@dataclass
class _Tables:
    """What the study's table files hold, file by file."""

    runs: dict[Path, pd.DataFrame]  # runs file -> its run_dir, config_hash, config, seed
    curves: dict[Path, pd.DataFrame]  # curves file -> its run_dir, metric, iteration
    owners: list[tuple[Path, Path, set[str]]]


def _read(sweep_dir: Path) -> _Tables:
    owners = storage.owners(sweep_dir)
    runs = {
        f: storage.read_table(f, ["run_dir", "config_hash", "config", "seed"]) for f, _, _ in owners
    }
    curves = {c: _read_keys(c) for _, c, _ in owners if c.exists()}
    return _Tables(runs, curves, owners)


def _read_keys(path: Path) -> pd.DataFrame:
    return storage.read_table(path, storage.ROW_KEY)


def check(sweep_dir: Path) -> tuple[list[Finding], dict[str, int]]:
    """Every check of the study in `sweep_dir`, and its counts (runs, curve rows). Raises
    storage.DamagedTableError (naming the file) where a table cannot be read."""
    tables = _read(sweep_dir)
    counts = {
        "runs": len({r for frame in tables.runs.values() for r in frame["run_dir"]}),
        "rows": sum(len(frame) for frame in tables.curves.values()),
        "tables": len(tables.runs),
    }
    return [
        _runs_unique(sweep_dir, tables),
        _rows_unique(tables),
        _parts_complete(sweep_dir, tables),
        _hashes(sweep_dir, tables),
        _index(sweep_dir, tables),
    ], counts


def _runs_unique(sweep_dir: Path, tables: _Tables) -> Finding:
    found = Finding("runs unique")
    seen: dict[str, Path] = {}
    for path, frame in tables.runs.items():
        name = path.relative_to(sweep_dir)
        for run_dir in frame.loc[frame["run_dir"].duplicated(), "run_dir"].unique():
            found.problems.append(f"{run_dir} twice in {name}")
        for run_dir in frame["run_dir"].unique():
            if run_dir in seen:
                found.problems.append(f"{run_dir} in {seen[run_dir]} and {name}")
            seen[run_dir] = name
    kept = _kept_runs(tables)
    for digest, group in kept.groupby("config_hash")["run_dir"]:
        if len(group) > 1:
            found.problems.append(f"config {digest} trained twice: {', '.join(sorted(group))}")
    return found


def _kept_runs(tables: _Tables) -> pd.DataFrame:
    """Each run once, from the table a reader takes it from."""
    frames = []
    for runs_file, _, owned in tables.owners:
        frame = tables.runs[runs_file].drop_duplicates("run_dir", keep="last")
        frames.append(frame[frame["run_dir"].isin(owned)])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_dir"])


def _rows_unique(tables: _Tables) -> Finding:
    found = Finding("curve rows unique")
    everywhere = []
    for runs_file, curves_file, _ in tables.owners:
        if curves_file not in tables.curves:
            continue
        keys = tables.curves[curves_file]
        held = set(tables.runs[runs_file]["run_dir"])
        orphans = ~keys["run_dir"].isin(held)
        if orphans.any():
            found.problems.append(
                f"{int(orphans.sum())} rows in {curves_file.name} of no run of its table"
            )
        twice = keys.duplicated(storage.ROW_KEY)
        if twice.any():
            found.problems.append(f"{int(twice.sum())} rows twice in {curves_file.name}")
        everywhere.append(keys.loc[~orphans & ~twice, storage.ROW_KEY])
    if len(everywhere) > 1:  # the same row in two files: a run's rows in two tables
        rows = pd.concat(everywhere, ignore_index=True)
        across = int(rows.duplicated(storage.ROW_KEY).sum())
        if across:
            found.problems.append(f"{across} rows in two tables")
    missing = set(_kept_runs(tables)["run_dir"]) - {
        r for keys in tables.curves.values() for r in keys["run_dir"].unique()
    }
    if missing:
        found.problems.append(f"{len(missing)} runs without curve rows ({min(missing)}, ...)")
    return found


def _parts_complete(sweep_dir: Path, tables: _Tables) -> Finding:
    found = Finding("parts complete")
    for _, curves_file, _ in tables.owners:
        if not curves_file.exists():
            found.problems.append(f"{curves_file.relative_to(sweep_dir)} missing")
            found.fixable = False
    for path in storage.leftovers(sweep_dir):
        found.problems.append(f"{path.relative_to(sweep_dir)} left by a killed writer")
    return found


def _hashes(sweep_dir: Path, tables: _Tables) -> Finding:
    found = Finding("config hashes", fixable=False)
    for row in _kept_runs(tables).itertuples():
        run_file = sweep_dir / row.run_dir / RUN_FILE
        if run_file.exists():
            record = read_run(run_file.parent)
            recomputed = config_hash(record["config"])
        else:
            recomputed = config_hash(_config_of(json.loads(row.config), row.seed))
        if recomputed != row.config_hash:
            found.problems.append(f"{row.run_dir}: {row.config_hash}, its config {recomputed}")
    return found


def _config_of(identity: dict, seed) -> dict:
    """A run's config as `config_hash` reads it, from its identity in the runs table (dotted
    keys, lists as '[a, b]' strings) and its seed."""
    nested: dict = {}
    for key, value in identity.items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _cell(value)
    nested["seed"] = None if pd.isna(seed) else int(seed)
    return nested


def _cell(value):
    if isinstance(value, str) and value.startswith("[") and value.endswith("]"):
        try:  # Python's own repr of a list (None, True, numbers, quoted strings)
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):  # bare words: [relu, sigmoid]
            return yaml.safe_load(value)
    return value


def _index(sweep_dir: Path, tables: _Tables) -> Finding:
    found = Finding("finished.json")
    index_file = sweep_dir / INDEX_FILE
    if not index_file.exists():
        return found  # made when a sweep starts: a study written another way has none
    index = json.loads(index_file.read_text())
    kept = _kept_runs(tables)
    expected = dict(zip(kept["config_hash"], kept["run_dir"], strict=True))
    for run_file in sweep_dir.rglob(RUN_FILE):  # finished, not consolidated yet
        run_dir = str(run_file.parent.relative_to(sweep_dir))
        if run_dir not in set(kept["run_dir"]):
            expected[read_run(run_file.parent)["config_hash"]] = run_dir
    missing = [run_dir for digest, run_dir in expected.items() if digest not in index]
    if missing:
        found.problems.append(f"{len(missing)} runs not in it ({min(missing)}, ...)")
    for digest, run_dir in index.items():
        if digest not in expected and run_dir in expected.values():
            found.problems.append(f"{run_dir} named under another config hash")
        elif digest not in expected:
            found.problems.append(f"{run_dir} named, not in the study")
        elif expected[digest] != run_dir:
            found.problems.append(f"{run_dir} named for {expected[digest]}")
    return found


def repair(sweep_dir: Path) -> list[str]:
    """Fix what `check` found that can be fixed, under the study's writer lock. Returns what
    it did, a line each."""
    done: list[str] = []
    with storage.locked(sweep_dir):  # its first act tidies what killed writers left
        tables = _read(sweep_dir)
        index = _index_of(sweep_dir)
        keep = _runs_to_keep(tables, index)
        for runs_file, curves_file, _ in tables.owners:
            done += _rewrite(sweep_dir, runs_file, curves_file, keep[runs_file])
        if (sweep_dir / INDEX_FILE).exists() and not _index(sweep_dir, _read(sweep_dir)).ok:
            atomic_write_bytes(
                sweep_dir / INDEX_FILE, json.dumps(finished_runs(sweep_dir), indent=0).encode()
            )
            done.append(f"{INDEX_FILE} made again from the study")
    return done


def _index_of(sweep_dir: Path) -> dict[str, str]:
    path = sweep_dir / INDEX_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def _runs_to_keep(tables: _Tables, index: dict[str, str]) -> dict[Path, set[str]]:
    """The runs each table keeps: those it owns, less a config's second training (the run the
    index names stays, else the one a reader takes last)."""
    keep = {runs_file: set(owned) for runs_file, _, owned in tables.owners}
    kept = _kept_runs(tables)
    for digest, group in kept.groupby("config_hash")["run_dir"]:
        if len(group) < 2:
            continue
        stays = index.get(digest) if index.get(digest) in set(group) else group.iloc[-1]
        for run_dir in set(group) - {stays}:
            for owned in keep.values():
                owned.discard(run_dir)
    return keep


def _rewrite(sweep_dir: Path, runs_file: Path, curves_file: Path, keep: set[str]) -> list[str]:
    """One table pair with only the runs in `keep`, each once, and their rows, each once;
    rewritten (curves first, runs last, each atomically) only where that changes it."""
    runs = pd.read_parquet(runs_file)
    fixed_runs = runs[runs["run_dir"].isin(keep)].drop_duplicates("run_dir", keep="last")
    curves = pd.read_parquet(curves_file) if curves_file.exists() else None
    fixed_curves = None
    if curves is not None:
        fixed_curves = curves[curves["run_dir"].isin(keep)].drop_duplicates(storage.ROW_KEY)
    name = runs_file.relative_to(sweep_dir)
    done = []
    is_part = runs_file.parent.name == storage.PARTS_FOLDER
    if is_part and fixed_runs.empty:
        storage.remove_part(sweep_dir, runs_file.name.removesuffix(storage.RUNS_SUFFIX))
        return [f"{name}: every run held elsewhere; the part removed"]
    if fixed_curves is not None and len(fixed_curves) != len(curves):
        storage.write_curves(fixed_curves, curves_file)
        done.append(
            f"{curves_file.relative_to(sweep_dir)}: {len(curves) - len(fixed_curves)} rows dropped"
        )
    if len(fixed_runs) != len(runs):
        storage.write_table(fixed_runs.reset_index(drop=True), runs_file)
        done.append(f"{name}: {len(runs) - len(fixed_runs)} runs dropped")
    return done
