"""A study's consolidated tables on disk: written by appending parts, read as one table with
only what is asked.

A study folder holds its runs table and its curves table in parts: the pair `runs.parquet` +
`curves.parquet` at its top (its first consolidation, or a compacted study) and any number of
parts in `parts/`, each a `<name>.runs.parquet` and a `<name>.curves.parquet`. Consolidating
new runs writes one new part (`append`): its curves
first, then its runs, each atomically, so a part counts (`parts`) only once its runs file is
there and a reader never sees half of one. Committing a study as it grows adds only its new
parts; `compact` folds a finished study's parts into the top pair.

**Each run once, each curve row once, at every instant.** A run may sit in two runs tables for a
while (a compaction killed after writing the top pair, before removing the parts; a part written
twice by writers racing): a reader takes each run from the last table that holds it (`owners`),
and each curves table gives only the rows of the runs its own runs table owns. So a top
curves.parquet that already holds the parts' rows, or rows of no run at all, never doubles a
row. Writers (`collect`, `compact`, `--check --repair`) hold the study's lock (`locked`: an
exclusive `flock` on `.tables.lock`), so two of them serialise, and the first thing a writer
does under it is to tidy what a killed one left (`tidy`: temporary files, a part's curves
without its runs).

Curves are stored sorted by metric, then run, then iteration, in row groups of
CURVES_ROW_GROUP rows, so that a read of some metrics (`read_curves`) touches only the row
groups that hold them (Parquet's statistics; the batch losses and rates logged every few steps
are 95 % of a zoo's rows, and no figure of test accuracy needs them). Reading is pyarrow's
(its dataset scanner pushes the filter into the files): measured against DuckDB and Polars on
the zoo's tables by bench/tables.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from harness.errors import HarnessError

RUNS_TABLE = "runs.parquet"
CURVES_TABLE = "curves.parquet"
PARTS_FOLDER = "parts"
RUNS_SUFFIX, CURVES_SUFFIX = ".runs.parquet", ".curves.parquet"
CURVES_ROW_GROUP = 131_072
# the columns of a curves table, beside run_dir
METRIC_COLUMNS = ["iteration", "epoch", "time_s", "metric", "value"]
# what identifies a curve row
ROW_KEY = ["run_dir", "metric", "iteration"]
LOCK_FILE = ".tables.lock"
TMP_SUFFIX = ".tmp"


class DamagedTableError(HarnessError):
    """A table file that cannot be read (cut short, not Parquet): named, and left as it is."""


@contextlib.contextmanager
def locked(sweep_dir: Path) -> Iterator[None]:
    """Hold the study's writer lock: writers of one study (a sweep's consolidation, harness-collect
    and its --compact or --repair, in any process) run one at a time. Readers take no lock.
    Re-entrant within a process; the kernel drops it when the holder dies (SIGKILL included)."""
    key = str(Path(sweep_dir).resolve())
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(sweep_dir) / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _held[key] = 1
        try:
            tidy(Path(sweep_dir))
            yield
        finally:
            del _held[key]
            fcntl.flock(handle, fcntl.LOCK_UN)


_held: dict[str, int] = {}  # studies whose lock this process holds: depth


def leftovers(sweep_dir: Path) -> list[Path]:
    """What a killed writer leaves: its temporary files, and a part's curves whose runs file was
    never written (or already removed by a compaction). No reader reads them."""
    # only the tables' own temporary files: other writers' (finished.json's) are not ours
    found = [sweep_dir / f".{name}{TMP_SUFFIX}" for name in (RUNS_TABLE, CURVES_TABLE)]
    found = [f for f in found if f.is_file()]
    folder = sweep_dir / PARTS_FOLDER
    if folder.is_dir():
        found += [f for f in folder.glob(f".*.parquet{TMP_SUFFIX}") if f.is_file()]
        complete = set(parts(sweep_dir))
        found += [
            f
            for f in folder.glob(f"*{CURVES_SUFFIX}")
            if f.name.removesuffix(CURVES_SUFFIX) not in complete
        ]
    return sorted(found)


def tidy(sweep_dir: Path) -> list[Path]:
    """Remove what killed writers left (`leftovers`); only under the study's lock, where no
    writer is half-way."""
    found = leftovers(sweep_dir)
    for path in found:
        path.unlink(missing_ok=True)
    return found


def parts(sweep_dir: Path) -> list[str]:
    """The names of the study's complete parts (its runs file written), oldest first."""
    folder = sweep_dir / PARTS_FOLDER
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(RUNS_SUFFIX) for p in folder.glob(f"*{RUNS_SUFFIX}"))


def runs_files(sweep_dir: Path) -> list[Path]:
    """The study's runs tables: the top one (if any), then its parts'."""
    top = [sweep_dir / RUNS_TABLE] if (sweep_dir / RUNS_TABLE).exists() else []
    return top + [sweep_dir / PARTS_FOLDER / f"{name}{RUNS_SUFFIX}" for name in parts(sweep_dir)]


def curves_files(sweep_dir: Path) -> list[Path]:
    """The study's curves tables that belong to a runs table (a part's curves without its runs
    file are a part being written, or cut short: not read)."""
    files = [sweep_dir / CURVES_TABLE] if (sweep_dir / RUNS_TABLE).exists() else []
    files += [sweep_dir / PARTS_FOLDER / f"{name}{CURVES_SUFFIX}" for name in parts(sweep_dir)]
    return [f for f in files if f.exists()]


def has_tables(sweep_dir: Path) -> bool:
    return bool(runs_files(sweep_dir))


def stamp(sweep_dir: Path) -> tuple:
    """What changes when the study's tables change (a part added, the study compacted): a
    key for caches of what was read from them."""
    return tuple((f.name, f.stat().st_mtime_ns) for f in runs_files(sweep_dir))


def read_table(path: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """One runs table, or a DamagedTableError naming the file."""
    try:
        return pd.read_parquet(path, columns=columns)
    except (OSError, pa.ArrowException) as exc:
        raise DamagedTableError(f"{path}: damaged, left as it is ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def owners(sweep_dir: Path) -> list[tuple[Path, Path, set[str]]]:
    """(runs table, its curves table, the runs it owns) for each table of the study, oldest
    first: a run held by several tables is owned by the last of them, so that every reader
    sees it, and its curve rows, once."""
    files = runs_files(sweep_dir)
    held = [set(read_table(f, ["run_dir"])["run_dir"]) for f in files]
    taken: set[str] = set()
    owned: list[set[str]] = []
    for runs in reversed(held):
        owned.append(runs - taken)
        taken |= runs
    return [
        (f, _curves_of(sweep_dir, f), mine) for f, mine in zip(files, reversed(owned), strict=True)
    ]


def _curves_of(sweep_dir: Path, runs_file: Path) -> Path:
    if runs_file == sweep_dir / RUNS_TABLE:
        return sweep_dir / CURVES_TABLE
    return runs_file.with_name(runs_file.name.removesuffix(RUNS_SUFFIX) + CURVES_SUFFIX)


def read_runs(sweep_dir: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The study's runs table, its parts read as one (a run in two of them, as between a
    compaction's writing and its removing the parts, once: the later)."""
    frames = [read_table(f, columns) for f in runs_files(sweep_dir)]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(columns or []))
    table = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    if "run_dir" in table and len(frames) > 1:
        table = table.drop_duplicates("run_dir", keep="last", ignore_index=True)
    return table


def read_curves(
    sweep_dir: Path,
    metrics: Iterable[str] | None = None,
    run_dirs: Iterable[str] | None = None,
    skip: Iterable[str] = (),
    columns: Sequence[str] = METRIC_COLUMNS,
) -> pa.Table:
    """The study's curve rows (run_dir relative to the study, then `columns` of
    METRIC_COLUMNS), of the `metrics` (but those in `skip`) and the runs (`run_dirs`, relative)
    asked for (None: all), the filters pushed into the Parquet scan; `run_dir` and `metric`
    dictionary-encoded. Each curves table gives only the rows of the runs its runs table owns
    (`owners`): each run's rows once, whatever a killed or racing writer left."""
    columns = ["run_dir", *columns]
    wanted = None if run_dirs is None else set(run_dirs)
    condition = None
    if metrics is not None:
        condition = pc.field("metric").isin(list(metrics))
    skip = list(skip)
    if skip:
        kept = ~pc.field("metric").isin(skip)
        condition = kept if condition is None else condition & kept
    tables = []
    for _, curves_file, owned in owners(sweep_dir):
        runs = owned if wanted is None else owned & wanted
        if not runs or not curves_file.exists():
            continue
        mine = pc.field("run_dir").isin(sorted(runs))
        where = mine if condition is None else condition & mine
        try:
            dataset = ds.dataset(str(curves_file), format=_FORMAT)
            tables.append(dataset.to_table(columns=columns, filter=where))
        except (OSError, pa.ArrowException) as exc:
            raise DamagedTableError(
                f"{curves_file}: damaged, left as it is ({_reason(exc)})"
            ) from None
    if not tables:
        return pa.table({c: pa.array([], pa.string()) for c in columns})
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


# run_dir and metric as dictionaries: a zoo's 5 million rows name ~1,200 runs and 9 metrics
_FORMAT = ds.ParquetFileFormat(read_options={"dictionary_columns": ["run_dir", "metric"]})


def append(sweep_dir: Path, runs: pd.DataFrame, curves: pd.DataFrame) -> Path | None:
    """A new part with `runs` (their rows, run_dir relative to the study) and `curves` (their
    rows: run_dir and METRIC_COLUMNS); None where there is nothing new. A study without tables
    gets them as its top pair (a sweep consolidated once is one pair of files). Curves first,
    runs last: the runs file makes the part count."""
    if runs.empty:
        return None
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not has_tables(sweep_dir):
        write_curves(curves, sweep_dir / CURVES_TABLE)
        write_table(runs, sweep_dir / RUNS_TABLE)
        return sweep_dir / RUNS_TABLE
    folder = sweep_dir / PARTS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{len(parts(sweep_dir)):05d}"
    write_curves(curves, folder / f"{name}{CURVES_SUFFIX}")
    write_table(runs, folder / f"{name}{RUNS_SUFFIX}")
    return folder / f"{name}{RUNS_SUFFIX}"


def compact(sweep_dir: Path) -> tuple[int, int]:
    """Fold the study's parts into its top runs.parquet and curves.parquet (a finished study: one
    pair of files instead of one per consolidation), then remove the parts. Returns (runs,
    curve rows). Readers meanwhile, and after a kill at any step, see every run and every curve
    row once (`owners`); running it again finishes the job."""
    with locked(sweep_dir):
        runs = read_runs(sweep_dir)
        curves = read_curves(sweep_dir).to_pandas()
        names = parts(sweep_dir)
        if names or not (sweep_dir / RUNS_TABLE).exists():
            write_curves(curves, sweep_dir / CURVES_TABLE)
            write_table(runs, sweep_dir / RUNS_TABLE)  # last: it marks the pair complete
        for name in names:
            remove_part(sweep_dir, name)
        if (sweep_dir / PARTS_FOLDER).is_dir() and not any((sweep_dir / PARTS_FOLDER).iterdir()):
            (sweep_dir / PARTS_FOLDER).rmdir()
        return len(runs), len(curves)


def remove_part(sweep_dir: Path, name: str) -> None:
    """A part's runs file first (the part stops counting), then its curves."""
    (sweep_dir / PARTS_FOLDER / f"{name}{RUNS_SUFFIX}").unlink()
    (sweep_dir / PARTS_FOLDER / f"{name}{CURVES_SUFFIX}").unlink(missing_ok=True)


def write_table(frame: pd.DataFrame, path: Path) -> None:
    """`frame` as Parquet at `path`, atomically: a reader never sees half a table."""
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    frame.to_parquet(tmp, index=False, compression="zstd")
    os.replace(tmp, path)


def write_curves(curves: pd.DataFrame, path: Path) -> None:
    """A curves table as `read_curves` reads it fastest: sorted by metric, run and iteration, in
    row groups of CURVES_ROW_GROUP rows, strings as Parquet dictionaries; atomically."""
    frame = curves[["run_dir", *METRIC_COLUMNS]].astype({"run_dir": str, "metric": str})
    frame = frame.sort_values(["metric", "run_dir", "iteration"], kind="stable")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    pq.write_table(table, tmp, compression="zstd", row_group_size=CURVES_ROW_GROUP)
    os.replace(tmp, path)
