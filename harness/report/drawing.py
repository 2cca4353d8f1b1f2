"""Drawing a report's figures into files: in worker processes when the sweep is large enough
that drawing outweighs starting them, else one after the other in this process.

A zoo's 12 figures take about 100 s to draw and save on one core, and each figure is drawn
from the same tables alone; on two cores two workers draw them side by side while this process
writes the summary. The workers get the tables this process loaded (not the files again), so a
figure is the same file whichever process drew it.
"""

from __future__ import annotations

import multiprocessing
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

# Below this many curve rows a sweep's figures are drawn here: a worker's start (its imports
# and a copy of the tables, ~2 s) costs more than it saves (the course: 27 runs, 60,000 rows).
PARALLEL_CURVE_ROWS = 200_000

# The figures that take longest, started first so that no worker is left with a long one at the
# end (a zoo's convergence figures: ~10 s each on one core; most others 1-3 s).
SLOW_FIRST = ("convergence_", "course_", "tuning_gain", "quality_against", "tuning_curves")


def workers_for(curves: pd.DataFrame, figures: int) -> int:
    """How many worker processes draw a sweep's figures: none for a small sweep, else one per
    core this process may use (at most one per figure)."""
    if len(curves) < PARALLEL_CURVE_ROWS or figures < 2:
        return 0
    return min(len(os.sched_getaffinity(0)), figures)


def save(figure: Figure, out: Path, name: str, formats: Sequence[str]) -> list[Path]:
    """`figure` as <out>/<name>.<format> for each format; the figure is closed after."""
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
    workers: int | None = None,
) -> Iterator[Callable[[], dict[str, list[Path] | str]]]:
    """Draw every figure of the report into `out` in each of `formats`, in `workers` processes
    (0: this one, when asked; default `workers_for`) started on entering, while the block does
    other work. Yields the function that waits for them: by name, in the report's order, the
    files written or why the figure was skipped. Use inside `analysis.shared_results()`."""
    makers = figure_makers(runs, curves, target, tuning)
    workers = workers_for(curves, len(makers)) if workers is None else workers
    if workers < 2:
        yield lambda: {name: _drawn_and_saved(makers, name, out, formats) for name in makers}
        return
    # forkserver, not fork: this process holds pyarrow's threads, which a fork would copy mid-way
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["harness.report.drawing"])
    slow_first = sorted(makers, key=_slowness)
    with ProcessPoolExecutor(
        workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(runs, curves, target, tuning),
    ) as pool:
        futures = {name: pool.submit(_draw_in_worker, name, out, formats) for name in slow_first}
        yield lambda: {name: futures[name].result() for name in makers}


def _slowness(name: str) -> int:
    return next((i for i, p in enumerate(SLOW_FIRST) if name.startswith(p)), len(SLOW_FIRST))
