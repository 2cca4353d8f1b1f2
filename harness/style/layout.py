"""Figure shapes and text: the rcParams of the house (STYLE), panels, titles wrapped to the
figure, one legend outside the panels, labels beside points, and saving a figure the same way
every time."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from harness.style.settings import context_entries, is_context

STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "figure.titlesize": 12,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "svg.fonttype": "none",
}


PANEL_WIDTH, PANEL_HEIGHT = 4.2, 3.3


BAND_ALPHA = 0.18


def new_figure(n_cols: int, n_rows: int = 1, **kwargs) -> tuple[Figure, np.ndarray]:
    """A figure of n_rows x n_cols panels. Figures are made without pyplot (no backend, no
    global state: nothing to close); the Agg and SVG canvases draw them when saved, and a
    notebook's inline backend shows them."""
    fig = Figure(figsize=(PANEL_WIDTH * n_cols, PANEL_HEIGHT * n_rows + 0.9), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False, **kwargs)
    return fig, axes


# Inches a line of a 12-point title takes.
TITLE_LINE_INCHES = 0.22


def wrapped_suptitle(fig: Figure, text: str, room: int | None = None) -> None:
    """The figure's title, each of its lines wrapped where it is wider than the figure (as the
    renderer measures it): a title wider than the panels would widen the saved figure (its
    bounding box is tight) and leave them a strip in its middle. The figure grows by a line's
    height for each line beyond `room` (default: the lines `text` has), so that the panels keep
    theirs."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    font = FontProperties(
        size=matplotlib.rcParams["figure.titlesize"],
        weight=matplotlib.rcParams["figure.titleweight"],
    )
    usable = 0.98 * fig.get_figwidth() * fig.dpi  # pixels, a little margin on each side

    lines = _wrapped(text, font, renderer, usable)
    fig.suptitle("\n".join(lines))
    extra = len(lines) - (len(text.split("\n")) if room is None else room)
    fig.set_figheight(fig.get_figheight() + TITLE_LINE_INCHES * max(0, extra))


def _wrapped(text: str, font: FontProperties, renderer, usable: float) -> list[str]:
    """`text`'s lines in `font`, each wrapped where it is wider than `usable` pixels (as
    `renderer` measures it)."""

    def width(line: str) -> float:
        return renderer.get_text_width_height_descent(line, font, ismath=False)[0]

    lines = []
    for line in text.split("\n"):
        # the most characters per line that keep every wrapped line inside: from the line's own
        # mean character width, down (to one: a figure narrower than a letter keeps its letters)
        characters = max(1, min(len(line), int(len(line) * usable / max(width(line), 1.0)) + 2))
        while characters > 1 and any(width(p) > usable for p in textwrap.wrap(line, characters)):
            characters -= 1
        lines += textwrap.wrap(line, characters) or [""]  # an empty line stays a line
    return lines


def fit_panel_titles(fig: Figure) -> None:
    """Wrap a panel's title to its panel where, centred over it, the title would leave the
    figure or run into another panel's title (the depth study's 'mlp: hidden=[100, 100, 100,
    100, 100]' over the last of five panels). Titles that fit keep their one line, and so do
    titles with mathtext (wrapping could split a `$...$`)."""
    titles = [
        title
        for ax in fig.get_axes()
        if ax.get_visible()
        for title in (ax.title, ax._left_title, ax._right_title)  # no public list of the three
        if title.get_text() and title.get_visible()
    ]
    if not titles:
        return
    renderer = FigureCanvasAgg(fig).get_renderer()
    engine = fig.get_layout_engine()
    if engine is not None:  # the panels' places as the figure will have them; not drawn
        engine.execute(fig)
    boxes = [title.get_window_extent(renderer) for title in titles]
    for i, (title, box) in enumerate(zip(titles, boxes, strict=True)):
        crowded = any(
            box.overlaps(other) and min(box.x1, other.x1) - max(box.x0, other.x0) > 0.5
            for j, other in enumerate(boxes)
            if j != i
        )
        if not (crowded or box.x0 < 0 or box.x1 > fig.bbox.width) or "$" in title.get_text():
            continue
        usable = title.axes.get_window_extent(renderer).width
        wrapped = _wrapped(title.get_text(), title.get_fontproperties(), renderer, usable)
        title.set_text("\n".join(wrapped))


# Offsets (points) tried in turn for a point's label until it covers no other label.
LABEL_OFFSETS = tuple(
    (side, dy)
    for distance in range(0, 14)
    for dy in ((3 + 9 * distance, -6 - 9 * distance) if distance else (-4,))
    for side in (5, -5)  # right of the point, then left of it
)


# Points between a point's label and the panel's edges: a label flush with the left spine had
# the spine through its first letter ("pid" in the zoo's quality-against-step-time figure).
LABEL_MARGIN_PT = 2.0


def settled(fig: Figure):
    """Lay `fig` out as it will be drawn (its panel titles fitted first: a title wrapped later
    would move its panel) and return the renderer its positions in pixels are final for."""
    fit_panel_titles(fig)
    FigureCanvasAgg(fig)
    fig.canvas.draw()  # the constrained layout settles
    return fig.canvas.get_renderer()


def label_points(ax, xs, ys, labels, fontsize: float = 7, others=((), ()), renderer=None) -> None:
    """Name the points (xs, ys) of `ax`, each label at the first of LABEL_OFFSETS where it
    stays inside the panel (`LABEL_MARGIN_PT` off its edges) and covers no point (theirs, or
    the unnamed `others`: (xs, ys)) and no label placed before it (on the figure's settled
    layout; the labels do not move it), the lowest point first; where no place is free, at the
    one inside the panel that covers the fewest (never outside it, where it would be cut
    off). `renderer`: of the figure already `settled` (labelling several panels, it is laid
    out once)."""
    fig = ax.figure
    renderer = renderer or settled(fig)
    margin = LABEL_MARGIN_PT * fig.dpi / 72
    panel = ax.get_window_extent(renderer).padded(-margin)  # off the spines
    points = ax.transData.transform(
        np.column_stack([np.concatenate([xs, others[0]]), np.concatenate([ys, others[1]])])
    )
    radius = 3.5 * fig.dpi / 72  # a marker's half-width, in pixels
    markers = [Bbox.from_extents(x - radius, y - radius, x + radius, y + radius) for x, y in points]
    placed: list[Bbox] = []  # the labels placed so far
    for x, y, text in sorted(zip(xs, ys, labels, strict=True), key=lambda p: p[1]):
        best = None  # ((outside, labels and points covered, offset's rank), label, its box)
        for rank, offset in enumerate(LABEL_OFFSETS):
            near = abs(offset[1]) < 9  # beside its point; further away, a thin line to it
            label = ax.annotate(
                text,
                (x, y),
                xytext=offset,
                textcoords="offset points",
                fontsize=fontsize,
                ha="left" if offset[0] > 0 else "right",
                arrowprops=None if near else {"arrowstyle": "-", "lw": 0.5, "color": "0.55"},
            )
            label.set_in_layout(False)
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer)  # the text's, not its line's
            inside = panel.contains(box.x0, box.y0) and panel.contains(box.x1, box.y1)
            covered = sum(box.overlaps(m) for m in markers) + sum(
                # with a margin: two labels side by side ("pid novograd") read as one
                box.padded(margin).overlaps(o)
                for o in placed
            )
            score = (not inside, covered, rank)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, label, box)
            else:
                label.remove()
            if score[:2] == (False, 0):  # free: the first such place
                break
        placed.append(best[2])


def styled(function: Callable) -> Callable:
    """Run a figure function under the report's rcParams (fonts, grid, spines), its panel
    titles fitted to the figure (`fit_panel_titles`)."""

    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(STYLE):
            made = function(*args, **kwargs)
            if isinstance(made, Figure):
                fit_panel_titles(made)
            return made

    wrapper.__name__, wrapper.__doc__ = function.__name__, function.__doc__
    wrapper.__wrapped__ = function
    return wrapper


def save_figure(figure: Figure, path: str | Path) -> None:
    """Save as the file's suffix says (png at 150 dpi, svg with text kept as text). The same
    figure gives the same file: an svg without its date and with ids from a fixed salt (not
    random), so that a committed report drawn again changes only where a figure did."""
    svg = Path(path).suffix == ".svg"
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": "optimizer-harness"}):
        figure.savefig(
            path,
            dpi=150,
            bbox_inches="tight",
            pad_inches=0.05,
            metadata={"Date": None} if svg else None,
        )


# Legend entries: a few fit in rows below the panels; more go beside them, in columns of at most
# LEGEND_ROWS entries, and the figure grows by a column's width for each (a zoo of 100+).
LEGEND_BELOW_MAX, LEGEND_ROWS = 8, 24


def text_width(characters: int, points: float) -> float:
    """Inches a line of `characters` characters of `points`-point text takes, about (DejaVu
    Sans: 0.062 in a character at 8 points)."""
    return 0.00775 * points * characters


def legend_column_width(characters: int, points: float = 8) -> float:
    """Inches a legend column of `points`-point labels of `characters` characters takes: its
    handle and its text, so the panels beside it keep their width."""
    return 0.45 + text_width(characters, points)


def figure_legend(
    fig: Figure, handles, labels, ncols: int | None = None, title_lines: int = 1
) -> None:
    """One legend for the whole figure, outside its panels (never over data or text): below
    them for up to LEGEND_BELOW_MAX entries, else beside them in columns, the figure at least
    as tall as they are with its title of `title_lines` lines above (a taller legend would
    climb into the title)."""
    if not handles:
        return
    longest = max(len(str(label)) for label in labels)
    if len(handles) <= LEGEND_BELOW_MAX:
        # as many columns as the figure's width holds (long names: fewer, in more rows)
        column = legend_column_width(longest, STYLE["legend.fontsize"])
        wanted = ncols or min(len(handles), 6)
        ncols = max(1, min(wanted, int(fig.get_figwidth() // column)))
        added_rows = -(-len(handles) // ncols) - -(-len(handles) // wanted)
        fig.set_figheight(fig.get_figheight() + 0.2 * added_rows)
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False)
        # a column wider than the figure (one panel, long names) widens it, as measured
        width = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer()).width / fig.dpi
        fig.set_figwidth(max(fig.get_figwidth(), width + 0.1))
        return
    columns = -(-len(handles) // LEGEND_ROWS)
    width = legend_column_width(longest)
    fig.set_figwidth(fig.get_figwidth() + width * columns)
    title = TITLE_LINE_INCHES * (title_lines - 1)  # the room below counts one line
    fig.set_figheight(max(fig.get_figheight(), 0.2 * min(len(handles), LEGEND_ROWS) + 1.5 + title))
    fig.legend(
        handles, labels, loc="outside right center", ncols=columns, frameon=False, fontsize=8
    )


def legend_of_settings(
    fig: Figure, styles: dict[str, dict], extra=(), names: dict[str, str] | None = None
) -> None:
    """The figure's legend: each setting drawn in colour (by its display name in `names`, where
    given), one entry for the grey others of a zoo (`is_context`), then the `extra` (handle,
    label) entries."""
    shown = {name: s for name, s in styles.items() if not is_context(s)}
    handles = [
        Line2D([], [], color=s["color"], ls=s["ls"], marker=s["marker"], ms=4, lw=1.4)
        for s in shown.values()
    ]
    labels = [(names or {}).get(name, name) for name in shown]
    for handle, label in [*context_entries(len(styles) - len(shown)), *extra]:
        handles.append(handle)
        labels.append(label)
    figure_legend(fig, handles, labels, ncols=min(len(handles), 4))
