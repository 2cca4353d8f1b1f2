"""Colours: one fixed colour per optimizer in every figure, colours for the rest by a stable
hash, the zoo's palette, and the perceptual distance (CIEDE2000) that keeps any two apart."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence

import matplotlib
import numpy as np

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
# The grey a zoo's others are drawn in, behind the settings in colour.
CONTEXT_COLOR = "0.78"


# Settings of a single optimizer get these in turn (colour-blind-safe, Okabe & Ito).
SETTING_COLORS = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"]


# Optimizers not listed above get one of these, by a stable hash of their name.
EXTRA_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]


def optimizer_color(name: str) -> str:
    if name in OPTIMIZER_COLORS:
        return OPTIMIZER_COLORS[name]
    return EXTRA_COLORS[zlib.crc32(name.encode()) % len(EXTRA_COLORS)]


def optimizer_order(names) -> list[str]:
    names = set(names)
    return [n for n in OPTIMIZER_ORDER if n in names] + sorted(names - set(OPTIMIZER_ORDER))


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


COURSE_OPTIMIZERS = OPTIMIZER_ORDER[:9]  # the course's nine: sgd ... nadam


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
    taken = [CONTEXT_COLOR, *(OPTIMIZER_COLORS[o] for o in optimizers if o in OPTIMIZER_COLORS)]
    colours = {o: OPTIMIZER_COLORS[o] for o in optimizers if o in OPTIMIZER_COLORS}
    for optimizer in dict.fromkeys(o for o in optimizers if o not in OPTIMIZER_COLORS):
        best = max(ZOO_PALETTE, key=lambda c: min(color_distance(c, t) for t in taken))
        colours[optimizer] = best
        taken.append(best)
    return colours


# --- one style per optimizer across a study's figures ------------------------------------------
# A study's optimizers beyond the course's get STUDY_HUES colours in turn, then the same colours
# again in the next line style and marker: few colours a reader tells apart in a legend, instead
# of 100+ that blur into near-twins (two greys, two pinks, two purples).
STUDY_HUES = 4


@functools.cache
def study_palette() -> tuple[str, ...]:
    """STUDY_HUES saturated colours of ZOO_PALETTE, each in turn the furthest (CIEDE2000) from the
    course's colours, the grey of a zoo's others and those taken before it: the colours of a
    study's optimizers beyond the course's."""
    taken = [CONTEXT_COLOR, "#ffffff", *OPTIMIZER_COLORS.values()]
    # saturated and of middle lightness: greys read as the context, pastels vanish as thin lines
    candidates = [
        c for c in ZOO_PALETTE if 30 <= cielab(c)[0] <= 70 and np.hypot(*cielab(c)[1:]) >= 40
    ]
    chosen: list[str] = []
    for _ in range(STUDY_HUES):
        best = max(
            (c for c in candidates if c not in chosen),
            key=lambda c: min(color_distance(c, t) for t in [*taken, *chosen]),
        )
        chosen.append(best)
    return tuple(chosen)


def study_colour_combinations() -> list[tuple[int, int]]:
    """(line style index, line marker index) in the order a study's optimizers take them: solid
    lines first, then the other line styles, then markers along lines."""
    return [(ls, lm) for lm in range(8) for ls in range(4)]
