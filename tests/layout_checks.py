"""What the layout tests check in a drawn figure: no text box covers another, none leaves the
figure (by matplotlib's own renderer extents, as the figure is saved)."""

import itertools
from collections.abc import Callable

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from harness import style

# Tick labels side by side read as one number unless apart (pixels at 100 dpi, each side: a
# gap of 2 points between two x tick labels, 1.4 between two y tick labels).
TICK_GAP = {"x": (1.4, 0.0), "y": (0.0, 1.0)}


def text_boxes(fig: Figure) -> list[tuple[str, object]]:
    """(what, extent in display pixels) of every visible, non-empty text and legend, as saved
    (`style.save_figure`: under the house style, which the tick locators read when they run)."""
    with matplotlib.rc_context(style.STYLE):
        return _text_boxes(fig)


def _text_boxes(fig: Figure) -> list[tuple[str, object]]:
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []

    def add(what, text, pad=(0.0, 0.0)):
        if text.get_visible() and text.get_text().strip():
            # an annotation's own extent spans its leader line: its text is what must not cover
            box = Text.get_window_extent(text, renderer).padded(*pad)
            boxes.append((f"{what} {text.get_text()!r}", box))

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
                    add(f"panel {i} {name} tick", label, TICK_GAP[name])
        if ax.get_legend() is not None:
            boxes.append((f"panel {i} legend", ax.get_legend().get_window_extent(renderer)))
        for text in ax.texts:  # labels of points and bars
            add(f"panel {i} text", text)
    return boxes


def overlaps(fig: Figure) -> list[str]:
    return [
        f"{a} over {b}"
        for (a, box_a), (b, box_b) in itertools.combinations(text_boxes(fig), 2)
        if box_a.overlaps(box_b)
        and min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 0.5
        and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 0.5
    ]


def outside(fig: Figure) -> list[str]:
    """The texts wider than the figure or past its sides: a saved figure (its bounding box
    tight) would widen around them, leaving its panels a strip in the middle."""
    width = fig.bbox.width
    return [what for what, box in text_boxes(fig) if box.x0 < -0.5 or box.x1 > width + 0.5]


def defects(
    figures: dict[str, Figure], checks: tuple[Callable[[Figure], list[str]], ...] = (overlaps,)
) -> dict[str, list[str]]:
    """What `checks` find in each figure, for the figures where they find anything."""
    found = {name: [d for check in checks for d in check(fig)] for name, fig in figures.items()}
    return {name: d for name, d in found.items() if d}
