"""Layout that never overlaps (issue 20, item 1): in every figure the report makes, no two text
boxes (titles, axis labels, tick labels, legends) intersect, by matplotlib's own renderer
extents; on the smoke sweep and on the committed course study (nine optimizers, three nets).

Today's figures fail it (crowded log and logit tick labels, legends of neighbouring panels, the
performance profile's x ticks, and suptitle hits not yet read): strict xfail until issue 20's
layout lands, so that the day they pass, the marker must go."""

import itertools
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from smoke_sweep import TARGET

from harness import analysis
from harness.report import default_target, make_figures
from harness.results import load_curves, load_runs

REPO = Path(__file__).resolve().parent.parent
COURSE = REPO / "results" / "course"


def text_boxes(fig: Figure) -> list[tuple[str, object]]:
    """(what, extent in display pixels) of every visible, non-empty text and legend."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []

    def add(what, text):
        if text.get_visible() and text.get_text().strip():
            boxes.append((f"{what} {text.get_text()!r}", text.get_window_extent(renderer)))

    if fig._suptitle is not None:
        add("suptitle", fig._suptitle)
    for legend in fig.legends:
        boxes.append(("figure legend", legend.get_window_extent(renderer)))
    for i, ax in enumerate(fig.get_axes()):
        for title in (ax.title, ax._left_title, ax._right_title):
            add(f"panel {i} title", title)
        add(f"panel {i} x label", ax.xaxis.label)
        add(f"panel {i} y label", ax.yaxis.label)
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for tick in axis._update_ticks():  # the ticks drawn: inside the view limits
                for label in (tick.label1, tick.label2):
                    add(f"panel {i} {name} tick", label)
        if ax.get_legend() is not None:
            boxes.append((f"panel {i} legend", ax.get_legend().get_window_extent(renderer)))
    return boxes


def overlaps(fig: Figure) -> list[str]:
    return [
        f"{a} over {b}"
        for (a, box_a), (b, box_b) in itertools.combinations(text_boxes(fig), 2)
        if box_a.overlaps(box_b)
        and min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0.5
        and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0.5
    ]


def figures_of(folder: Path, target: float | None) -> dict[str, Figure]:
    runs, curves = load_runs(folder), load_curves(folder)
    if target is None:
        target = default_target(analysis.quality(runs))
    made = make_figures(runs, curves, target)
    return {name: fig for name, fig in made.items() if isinstance(fig, Figure)}


LAYOUT_PENDING = pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="issue 20: today's figures overlap"
)


@LAYOUT_PENDING
def test_no_text_covers_another_in_the_smoke_sweeps_figures(smoke_sweep):
    figures = figures_of(smoke_sweep, TARGET)
    assert "convergence_train_loss" in figures
    found = {name: overlaps(fig) for name, fig in figures.items()}
    assert {name: o for name, o in found.items() if o} == {}


@LAYOUT_PENDING
@pytest.mark.skipif(not COURSE.exists(), reason="no committed course study")
def test_no_text_covers_another_in_the_course_studys_figures():
    figures = figures_of(COURSE, None)
    assert "convergence_test_accuracy" in figures
    found = {name: overlaps(fig) for name, fig in figures.items()}
    assert {name: o for name, o in found.items() if o} == {}
