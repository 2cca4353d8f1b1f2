"""Drawing a report's figures into files: in worker processes, one per core, or one after the
other in this process.

A zoo's 12 figures take about 75 s to draw and save on one core, and each figure is drawn from
the same tables alone; on two cores two workers draw them side by side while this process
writes the summary. The workers get the tables this process loaded (not the files again), so a
figure is the same file whichever process drew it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness import analysis
from harness.report.common import Skipped
from harness.report.figures import drawn, figure_makers
from harness.report.inputs import TuningStudy
from harness.style import save_figure

# At most this many workers: each holds a copy of the tables (a zoo's report: ~1 GB here and
# ~0.45 GB a worker), so four keep it under 3 GB on any machine.
MAX_WORKERS = 4

# The figures that take longest, longest first, so that no worker is left with a long one at the
# end (a zoo's, drawn and saved on one core: the tuning gain ~13 s, convergence ~8-9 s each, the
# course's nets, the quality against step time and the tuning curves ~6 s; most others 1-4 s).
SLOW_FIRST = (
    "tuning_gain",
    "convergence_",
    "course_",
    "quality_against",
    "tuning_curves",
    "performance_profile",
)


def workers_for() -> int:
    """How many worker processes draw a report's figures: one per core this process may use, at
    most MAX_WORKERS (a report has 14 figures or more, some skipped); none on one core. Even a
    small sweep gains (measured on 2 cores, --formats png: a 12-run study's 6 figures 13.9 s
    here, 8.2 s with two workers; the course's 50.0 s, 29.0 s; the zoo's 94.5 s, 49 s)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = min(cores or 1, MAX_WORKERS)
    return workers if workers > 1 else 0


def _context() -> multiprocessing.context.BaseContext:
    """How workers start: forked from a server process that has imported this module, not
    forked from this process, which holds pyarrow's threads (a fork would copy them mid-way);
    spawned where there is no forkserver (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["harness.report.drawing"])
    return context


def start_server() -> None:
    """Start the process the workers will be forked from now, so that its imports (matplotlib,
    pandas, the report's modules: ~3 s) overlap what this process does before it draws (the
    tables' loading) instead of delaying the first figure."""
    if _context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


def save(figure: Figure, out: Path, name: str, formats: Sequence[str]) -> list[Path]:
    """`figure` as <out>/<name>.<format> for each format, the paths in that order."""
    paths = []
    for fmt in formats:
        paths.append(out / f"{name}.{fmt}")
        save_figure(figure, paths[-1])
    return paths


def _drawn_and_saved(makers, name: str, out: Path, formats) -> list[Path] | str:
    """The files of figure `name`, or why the sweep cannot have it."""
    figure = drawn(makers[name])
    return str(figure) if isinstance(figure, Skipped) else save(figure, out, name, formats)


# A worker's tables and figure makers (set once by _start_worker), and its shared results.
_worker: dict = {}


def _start_worker(runs, curves, target, tuning) -> None:
    _worker["makers"] = figure_makers(runs, curves, target, tuning)
    _worker["results"] = ExitStack()
    _worker["results"].enter_context(analysis.shared_results())  # for the worker's life


def _draw_in_worker(name: str, out: Path, formats) -> list[Path] | str:
    return _drawn_and_saved(_worker["makers"], name, out, formats)


@contextmanager
def drawing(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    tuning: TuningStudy | Skipped | None,
    out: Path,
    formats: Sequence[str],
    workers: int,
) -> Iterator[Callable[[], dict[str, list[Path] | str]]]:
    """Draw every figure of the report into `out` in each of `formats`, in `workers` processes
    (0 or 1: in this one; `workers_for` says how many a machine has, and `start_server` first
    saves their start) started on entering, while the block does other work. Yields the
    function that waits for them: by name, in the report's order, the files written or why the
    figure was skipped. Use inside `analysis.shared_results()`."""
    makers = figure_makers(runs, curves, target, tuning)
    if workers < 2:
        yield lambda: {name: _drawn_and_saved(makers, name, out, formats) for name in makers}
        return
    slow_first = sorted(makers, key=_slowness)
    with ProcessPoolExecutor(
        workers,
        mp_context=_context(),
        initializer=_start_worker,
        initargs=(runs, curves, target, tuning),
    ) as pool:
        futures = {name: pool.submit(_draw_in_worker, name, out, formats) for name in slow_first}
        yield lambda: {name: futures[name].result() for name in makers}


def _slowness(name: str) -> int:
    return next((i for i, p in enumerate(SLOW_FIRST) if name.startswith(p)), len(SLOW_FIRST))
