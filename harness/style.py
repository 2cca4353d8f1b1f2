"""The house style of every figure: the report's (harness.report), the ESGD study's
(harness.esgd.figures) and the notebooks'. Colours, labels, axis helpers, figure shapes and
saving; it imports nothing of the harness, so that anything drawing can import it.

Conventions: one fixed colour per optimizer in every figure (OPTIMIZER_COLORS), seeds shown as
a mean line with a min-max band (curves) or min-max error bars (points), log scales for losses
and learning rates, legends outside the axes.
"""

from __future__ import annotations

import functools
import textwrap
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.textpath import text_to_path
from matplotlib.ticker import LogFormatter, LogLocator, MaxNLocator, NullFormatter
from matplotlib.transforms import Bbox

# One colour per optimizer, the same in every figure (colour-blind-safe where it matters most:
# the SGD family in blues/greys, the Adam family in reds/oranges/greens). Any two are at least
# MIN_COLOR_DISTANCE apart in CIEDE2000 (color_distance; tests/test_colors.py).
OPTIMIZER_COLORS = {
    "sgd": "#4d4d4d",
    "momentum": "#1f77b4",
    "nesterov": "#17becf",
    "adagrad": "#bcbd22",
    "adadelta": "#880055",
    "rmsprop": "#9467bd",
    "adam": "#d62728",
    "adamax": "#886600",
    "nadam": "#ff7f0e",
    "adamw": "#2ca02c",
    "radam": "#0b1f6b",
    "yellowfin": "#ff99aa",
}
OPTIMIZER_ORDER = list(OPTIMIZER_COLORS)
MIN_COLOR_DISTANCE = 20.0
# Settings of a single optimizer get these in turn (colour-blind-safe, Okabe & Ito).
SETTING_COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"]
# Optimizers not listed above get one of these, by a stable hash of their name.
EXTRA_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]

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

METRIC_LABELS = {
    "train_loss": "training loss",
    "test_loss": "test loss",
    "batch_loss": "mini-batch loss",
    "test_accuracy": "test accuracy (%)",
    "test_rmse": "test RMSE",
    "train_rmse": "training RMSE",
    "test_truth_rmse": "RMSE against the noiseless truth",
    "final_test_rmse": "final test RMSE",
    "best_test_rmse": "best test RMSE",
    "step_time_s": "time per step (s)",
    "train_accuracy": "training accuracy (%)",
    "lr": "learning rate",
    "final_train_loss": "final training loss",
    "final_test_loss": "final test loss",
    "final_test_accuracy": "final test accuracy (%)",
    "best_test_accuracy": "best test accuracy (%)",
    "val_loss": "validation loss",
    "val_accuracy": "validation accuracy (%)",
    "val_rmse": "validation RMSE",
    "final_val_loss": "final validation loss",
    "final_val_accuracy": "final validation accuracy (%)",
    "best_val_accuracy": "best validation accuracy (%)",
    "final_val_rmse": "final validation RMSE",
    "best_val_rmse": "best validation RMSE",
    "train_time_s": "training time (s, evaluations excluded)",
    "wall_time_s": "wall time per run (s)",
}
X_LABELS = {
    "iteration": "iteration (optimizer steps)",
    "epoch": "epoch (passes over the training set)",
    "time_s": "training time (s, evaluations excluded)",
}


TARGET_LABELS = {
    "iterations_to_target": "iterations to target",
    "epochs_to_target": "epochs to target",
    "seconds_to_target": "training seconds to target",
}


PROFILE_LABELS = {
    "iterations_to_target": "iterations to target",
    "seconds_to_target": "training seconds to target",
    "final_train_loss": "final training loss",
}


# The loss of each quality metric's problem, as titles name it.
LOSS_NAMES = {"accuracy": "cross-entropy, nats", "rmse": "mean squared error"}


SPLIT_NAMES = {"val": "validation", "test": "test", "train": "training"}


def target_text(target: float, quality: str = "accuracy", split: str = "test") -> str:
    """'97 % validation accuracy', 'test rmse 0.9': a target of time to target, on the split
    it is measured on (the selection split: see analysis.time_to_target)."""
    if quality == "accuracy":
        return f"{percent(target)} {SPLIT_NAMES[split]} accuracy"
    return f"{SPLIT_NAMES[split]} {quality} {target:g}"


def percent(fraction: float) -> str:
    """0.97 -> '97 %'."""
    return f"{fraction * 100:.4g} %"


def optimizer_color(name: str) -> str:
    if name in OPTIMIZER_COLORS:
        return OPTIMIZER_COLORS[name]
    return EXTRA_COLORS[zlib.crc32(name.encode()) % len(EXTRA_COLORS)]


def optimizer_order(names) -> list[str]:
    names = set(names)
    return [n for n in OPTIMIZER_ORDER if n in names] + sorted(names - set(OPTIMIZER_ORDER))


def natural_key(text: str):
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def net_order(frame: pd.DataFrame) -> list[str]:
    """Nets from the shallowest to the deepest, then by name."""
    layers = {
        net: 0 if hidden in ("none", "") else len(str(hidden).split("-"))
        for net, hidden in zip(frame["net"], frame["hidden"], strict=True)
    }
    return sorted(layers, key=lambda net: (layers[net], natural_key(net)))


def net_title(frame: pd.DataFrame, net: str) -> str:
    """'net2: hidden 100': a panel's title, with the net's hidden layer widths (a net whose
    label already names its varying model keys keeps its label)."""
    if ":" in net:
        return net
    hidden = str(frame.loc[frame["net"] == net, "hidden"].iloc[0])
    layers = "no hidden layer" if hidden in ("none", "") else f"hidden {hidden}"
    return f"{net}: {layers}"


def is_percent(metric: str) -> bool:
    return "accuracy" in metric


def scale(metric: str) -> float:
    """Plotted value = table value x scale (accuracies are drawn in %)."""
    return 100.0 if is_percent(metric) else 1.0


def lr_text(lr: float) -> str:
    """A learning rate as tables and legends show it; 'none' for an optimizer without one
    (A2Grad: its step size is its own schedule)."""
    return "none" if lr is None or lr != lr else f"{lr:.3g}"  # None or NaN: no lr


def seeds_text(n_seeds: Sequence[int]) -> str:
    n = sorted(set(int(k) for k in n_seeds))
    if not n:
        return "no seeds"
    if len(n) == 1:
        return f"{n[0]} seed" + ("s" if n[0] != 1 else "")
    return f"{n[0]}-{n[-1]} seeds"


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


def legend_of_settings(fig: Figure, styles: dict[str, dict], extra=()) -> None:
    """The figure's legend: each setting drawn in colour, one entry for the grey others of a
    zoo (`is_context`), then the `extra` (handle, label) entries."""
    shown = {name: s for name, s in styles.items() if not is_context(s)}
    handles = [
        Line2D([], [], color=s["color"], ls=s["ls"], marker=s["marker"], ms=4, lw=1.4)
        for s in shown.values()
    ]
    labels = list(shown)
    for handle, label in [*context_entries(len(styles) - len(shown)), *extra]:
        handles.append(handle)
        labels.append(label)
    figure_legend(fig, handles, labels, ncols=min(len(handles), 4))


def plain_number(x: float) -> str:
    """A log axis's tick label: 0.3, 2, 0.0245 (`_PlainLogFormatter`, `_OneTwoFiveLocator`)."""
    return f"{x:g}"


class _PlainLogFormatter(LogFormatter):
    """Log-axis labels as plain numbers (0.3, 2), not 3 x 10^-1; where a range of a few decades
    labels some minor ticks, 2 and 5 of each (matplotlib's 2, 3, 4 and 6: 0.3 and 0.4 touch
    on a panel with two decades)."""

    def _num_to_string(self, x, vmin, vmax):
        return plain_number(x)

    def set_locs(self, locs=None):
        super().set_locs(locs)
        if self._sublabels is not None and 1 < len(self._sublabels) < self._base:
            self._sublabels = {1.0, 2.0, 5.0}


def log_y(ax) -> None:
    """A log-scale y axis labelled with plain numbers, minor ticks labelled on short ranges."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


MIN_LOG_LABELS = 4
# Points of space between two x tick labels side by side (half a 9-point em): closer, two
# numbers read as one.
TICK_LABEL_GAP = 4.5


class _OneTwoFiveLocator(LogLocator):
    """Ticks at 1, 2 and 5 of each decade; where those leave fewer than MIN_LOG_LABELS in view,
    at 3 too (a decade and a half: 5, 10, 20 alone), and on a range shorter still, evenly
    spaced (0.85 to 2.7: 1, 1.5, 2, 2.5); over more than three decades, at each decade. Of
    those, only ticks whose labels fit side by side on the axis as drawn (`_labels_fit`): a
    range set by measured times (0.53 to 0.59 ms) would otherwise get 0.55 and 0.575 touching,
    and a narrow panel fewer, evenly spaced ticks."""

    def tick_values(self, vmin, vmax):
        low, high = sorted((vmin, vmax))
        if low <= 0 or high / low > 1e3:  # decades alone (those LogLocator keeps of many)
            self.set_params(subs=(1.0,))
            return super().tick_values(vmin, vmax)
        fallback, most = None, -1
        for ticks in self._candidates(low, high):
            if not self._labels_fit(ticks, low, high):
                continue
            shown = ((ticks >= low) & (ticks <= high)).sum()
            if shown >= MIN_LOG_LABELS:
                return ticks
            if shown > most:
                fallback, most = ticks, shown
        return fallback if fallback is not None else ticks  # none fits: the fewest ticks

    def _candidates(self, low, high):
        """The tick sets in order of preference: 1-2-5, 1-2-3-5, then evenly spaced, fewer
        and fewer (the last: the fewest)."""
        for subs in ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0)):
            self.set_params(subs=subs)
            yield super().tick_values(low, high)
        for bins in (5, 4, 3, 2, 1):
            yield MaxNLocator(nbins=bins, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)

    def _labels_fit(self, ticks: np.ndarray, low: float, high: float) -> bool:
        """Whether the labels of `ticks` in view keep TICK_LABEL_GAP apart on this axis (its
        length and its tick labels' font and text); True off an axis."""
        axis = self.axis
        if axis is None or axis.axes is None or axis.axis_name != "x":
            return True
        shown = ticks[(ticks >= low) & (ticks <= high)]
        length = axis.axes.bbox.width * 72 / axis.get_figure(root=True).dpi  # points
        font = axis.majorTicks[0].label1.get_fontproperties()  # as drawn: set when made
        widths = np.array([_label_width(plain_number(t), font) for t in shown])
        at = length * np.log(shown / low) / np.log(high / low)
        return bool(np.all(np.diff(at) >= (widths[:-1] + widths[1:]) / 2 + TICK_LABEL_GAP))


@functools.lru_cache(maxsize=4096)
def _label_width(text: str, font: FontProperties) -> float:
    """Points `text` takes in `font` (a tick label's)."""
    return text_to_path.get_text_width_height_descent(text, font, False)[0]


def log_x(ax) -> None:
    """A log-scale x axis labelled with plain numbers at 1, 2 and 5 of each decade, and 3 on a
    short range (`_OneTwoFiveLocator`; minor ticks unlabelled: side by side, their labels would
    touch)."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(_OneTwoFiveLocator(base=10))
    # LogFormatter labels only the decades of a range over minor_thresholds[0] decades (1 by
    # default): 2 and 5 keep their labels up to 3
    ax.xaxis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(3, 3)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def log_x_lr(ax) -> None:
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=10))
    ax.xaxis.set_minor_formatter(NullFormatter())


def log_label(label: str) -> str:
    """'loss (nats)' -> 'loss (nats; log scale)'."""
    return label[:-1] + "; log scale)" if label.endswith(")") else label + " (log scale)"


# --- settings: one colour per optimizer, one line style per setting of an optimizer -----------

LINE_STYLES = ["-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2))]
MARKERS = ["o", "s", "^", "D", "v", "P"]
# Markers along a line: the third channel, for panels of more settings (a zoo) than colours x
# line styles tell apart.
LINE_MARKERS = [None, "o", "s", "^", "D", "v", "P", "X"]


def setting_order(frame: pd.DataFrame, column: str = "setting") -> list[str]:
    """The settings of `frame` in optimizer order, then in natural order."""
    pairs = frame[["optimizer", column]].drop_duplicates()
    rank = {o: i for i, o in enumerate(optimizer_order(pairs["optimizer"]))}
    ordered = sorted(
        zip(pairs["optimizer"], pairs[column], strict=True),
        key=lambda pair: (rank[pair[0]], natural_key(pair[1])),
    )
    return [setting for _, setting in ordered]


def setting_styles(
    frame: pd.DataFrame, column: str = "setting", shown: Sequence[str] | None = None
) -> dict[str, dict]:
    """Per setting: its optimizer's colour (`optimizer_color`: the same in every figure), a line
    style, a marker for points (`marker`) and one along lines (`line_marker`, None for most):
    the n-th setting of an optimizer gets the n-th line style, and a setting whose colour is
    within MIN_COLOR_DISTANCE of an earlier setting's with the same line style and line marker
    (optimizers of the zoo share the extra colours) moves on to the next combination, so that
    any two lines of a figure differ in colour or in style. When every setting has one optimizer
    (what differs is something else: the embedding tables' optimizer, the momentum), each
    setting gets a colour of its own. `shown`: the settings drawn in colour (`focused`, for a
    zoo), in the order they get the zoo's colours (`zoo_colours`); the others get the grey
    CONTEXT style (default: every setting is shown)."""
    optimizer_of = dict(zip(frame[column], frame["optimizer"], strict=False))
    order = setting_order(frame, column)
    if shown is not None and set(order) - set(shown):
        colours = zoo_colours([optimizer_of[s] for s in shown if s in optimizer_of])
        coloured = _styles([s for s in order if s in set(shown)], optimizer_of, colours.get)
        return {s: coloured.get(s) or dict(CONTEXT) for s in order}
    return _styles(order, optimizer_of)


def _styles(
    order: list[str], optimizer_of: dict[str, str], colour_of: Callable = lambda _: None
) -> dict[str, dict]:
    """`setting_styles` of the settings in `order`: `colour_of` an optimizer, where it gives
    one, else `optimizer_color`."""
    one_optimizer = len(set(optimizer_of.values())) == 1 and len(optimizer_of) > 1
    styles: dict[str, dict] = {}
    count: dict[str, int] = {}
    combinations = [(ls, lm) for lm in LINE_MARKERS for ls in range(len(LINE_STYLES))]
    for i, setting in enumerate(order):
        optimizer = optimizer_of[setting]
        n = count.get(optimizer, 0)
        count[optimizer] = n + 1
        colour = SETTING_COLORS[i % len(SETTING_COLORS)] if one_optimizer else None
        colour = colour or colour_of(optimizer) or optimizer_color(optimizer)
        taken = {
            (s["ls_index"], s["line_marker"])
            for s in styles.values()
            if color_distance(s["color"], colour) < MIN_COLOR_DISTANCE
        }
        free = [c for c in combinations[n:] + combinations[:n] if c not in taken]
        ls, line_marker = free[0] if free else combinations[n % len(combinations)]
        styles[setting] = {
            "color": colour,
            "ls": LINE_STYLES[ls],
            "ls_index": ls,
            "marker": MARKERS[n % len(MARKERS)],
            "line_marker": line_marker,
        }
    return styles


def point_style(style: dict) -> dict:
    """The keyword arguments of ax.errorbar that draw points in a setting's style."""
    return {"color": style["color"], "ls": style["ls"], "marker": style["marker"]}


def line_style(style: dict, lw: float = 1.4) -> dict:
    """The keyword arguments of ax.plot that draw a line in a setting's style (`lw` wide; a
    grey context line thin, behind the others)."""
    if is_context(style):
        return {"color": style["color"], "ls": "-", "lw": CONTEXT_LW, "zorder": 1}
    marker = style.get("line_marker")
    extra = {"marker": marker, "markevery": 0.12, "ms": 3.5} if marker else {}
    return {"color": style["color"], "ls": style["ls"], "lw": lw, **extra}


def cielab(color) -> np.ndarray:
    """CIELAB (D65) of a matplotlib colour: L* 0-100, a*, b*."""
    rgb = np.array(matplotlib.colors.to_rgb(color))
    rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    srgb_to_xyz = np.array(
        [
            [0.4124564, 0.3575761, 0.1804375],
            [0.2126729, 0.7151522, 0.0721750],
            [0.0193339, 0.1191920, 0.9503041],
        ]
    )
    xyz = srgb_to_xyz @ rgb / np.array([0.95047, 1.0, 1.08883])
    d = 6 / 29
    f = np.where(xyz > d**3, np.cbrt(xyz), xyz / (3 * d**2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def color_distance(color_a, color_b) -> float:
    """CIEDE2000 colour difference (Sharma, Wu & Dalal 2005) between two matplotlib colours:
    about 1 is just noticeable side by side, 20 and more tells two thin lines apart."""
    # A zoo's figures compare each line's colour with every other's: each pair worked out once.
    return _rgb_distance(matplotlib.colors.to_rgb(color_a), matplotlib.colors.to_rgb(color_b))


@functools.lru_cache(maxsize=65536)
def _rgb_distance(color_a: tuple, color_b: tuple) -> float:
    return ciede2000(cielab(color_a), cielab(color_b))


def ciede2000(lab_a: Sequence[float], lab_b: Sequence[float]) -> float:
    """CIEDE2000 difference between two CIELAB colours (L*, a*, b*)."""
    l1, a1, b1 = lab_a
    l2, a2, b2 = lab_b
    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_mean**7 / (c_mean**7 + 25.0**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360
    dlp, dcp = l2 - l1, c2p - c1p
    dh = h2p - h1p
    if c1p * c2p == 0:
        dh = 0.0
    elif dh > 180:
        dh -= 360
    elif dh < -180:
        dh += 360
    dhp = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    lp, cp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hp = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hp = (h1p + h2p) / 2
    else:
        hp = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (
        1
        - 0.17 * np.cos(np.radians(hp - 30))
        + 0.24 * np.cos(np.radians(2 * hp))
        + 0.32 * np.cos(np.radians(3 * hp + 6))
        - 0.20 * np.cos(np.radians(4 * hp - 63))
    )
    sl = 1 + 0.015 * (lp - 50) ** 2 / np.sqrt(20 + (lp - 50) ** 2)
    sc = 1 + 0.045 * cp
    sh = 1 + 0.015 * cp * t
    rt = (
        -2
        * np.sqrt(cp**7 / (cp**7 + 25.0**7))
        * np.sin(np.radians(60 * np.exp(-(((hp - 275) / 25) ** 2))))
    )
    return float(
        np.sqrt((dlp / sl) ** 2 + (dcp / sc) ** 2 + (dhp / sh) ** 2 + rt * (dcp / sc) * (dhp / sh))
    )


# --- a zoo: more settings than colours, line styles and markers tell apart --------------------
# Up to LEGIBLE_SETTINGS settings, a figure draws each in a style of its own. A zoo's figures
# (100+) draw in colour the FOCUS_TOP best of each panel by the figure's own ranking (made on
# validation data where the panel's metric has it) and the best of the course's optimizers
# there, the reference a zoo is read against; the others are thin grey lines behind them.
LEGIBLE_SETTINGS, FOCUS_TOP = 16, 8
COURSE_OPTIMIZERS = OPTIMIZER_ORDER[:9]  # the course's nine: sgd ... nadam
CONTEXT = {
    "color": "0.78",
    "ls": "-",
    "ls_index": 0,
    "marker": "o",
    "line_marker": None,
    "context": True,
}
CONTEXT_LW = 0.7


def focused(ranked: Sequence[str], optimizer_of: dict[str, str], settings: int) -> list[str]:
    """The settings a panel draws in colour, best first: all of `ranked` (the panel's settings,
    best first) when the figure has at most LEGIBLE_SETTINGS `settings`; else the FOCUS_TOP
    first, and the first of a course optimizer (`optimizer_of` each setting's) if not among
    them."""
    ranked = list(ranked)
    if settings <= LEGIBLE_SETTINGS:
        return ranked
    shown = ranked[:FOCUS_TOP]
    reference = next((s for s in ranked if optimizer_of[s] in COURSE_OPTIMIZERS), None)
    return shown + ([reference] if reference is not None and reference not in shown else [])


# Colours a zoo's focus draws its optimizers beyond the course's in: qualitative palettes, of
# which each figure takes those furthest from the colours it has (`zoo_colours`); none lighter
# than L* 80, which a thin line on white loses.
ZOO_PALETTE = [
    hex_colour
    for name in ("tab10", "Dark2", "Set1", "tab20", "tab20b")
    for hex_colour in map(matplotlib.colors.to_hex, matplotlib.colormaps[name].colors)
    if cielab(hex_colour)[0] <= 80
]


def zoo_colours(optimizers: Sequence[str]) -> dict[str, str]:
    """A colour per optimizer of a zoo's focus: the course's keep theirs (OPTIMIZER_COLORS),
    each other in turn gets the colour of ZOO_PALETTE furthest (CIEDE2000) from every colour
    taken before it and from the grey of the others; where colours come close, setting_styles
    tells the settings apart by line style and marker."""
    taken = [CONTEXT["color"], *(OPTIMIZER_COLORS[o] for o in optimizers if o in OPTIMIZER_COLORS)]
    colours = {o: OPTIMIZER_COLORS[o] for o in optimizers if o in OPTIMIZER_COLORS}
    for optimizer in dict.fromkeys(o for o in optimizers if o not in OPTIMIZER_COLORS):
        best = max(ZOO_PALETTE, key=lambda c: min(color_distance(c, t) for t in taken))
        colours[optimizer] = best
        taken.append(best)
    return colours


def glyph(style: dict) -> str:
    """A marker of its own for each of a setting's line styles and line markers: what tells
    apart two settings of close colours in a figure whose line styles say something else (a
    tuning curve's solid validation and dashed test line)."""
    return style.get("line_marker") or MARKERS[style.get("ls_index", 0) % len(MARKERS)]


def is_context(style: dict) -> bool:
    """Whether a setting's style is the grey of the settings a zoo's figure does not focus on."""
    return style.get("context", False)


def context_entries(others: int, note: str = "") -> list[tuple[Line2D, str]]:
    """The legend entry of the `others` grey lines behind a zoo's focus (none if none)."""
    handle = Line2D([], [], color=CONTEXT["color"], lw=1.5)
    return [(handle, f"{others} other settings (grey){note}")] if others else []


def focus_note(ranking: str) -> str:
    """The line a zoo's figure adds to its title: which settings its colours show, the best of
    each panel by `ranking`."""
    return (
        f"in colour: the {FOCUS_TOP} best of each {ranking} and the best of the course's "
        "optimizers; grey: the others"
    )
