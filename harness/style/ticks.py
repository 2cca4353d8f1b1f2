"""Log axes read as plain numbers: 1-2-5 ticks where they fit apart, labels as 0.3, 2, 0.0245."""

from __future__ import annotations

import functools

import numpy as np
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import text_to_path
from matplotlib.ticker import LogFormatter, LogLocator, MaxNLocator, NullFormatter


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
