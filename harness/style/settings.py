"""How each setting is drawn: its colour, line style and marker, and a zoo's focus (the best in
colour, the others as grey context behind them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
from matplotlib.lines import Line2D

from harness.style.colors import (
    CONTEXT_COLOR,
    COURSE_OPTIMIZERS,
    MIN_COLOR_DISTANCE,
    SETTING_COLORS,
    color_distance,
    optimizer_color,
    optimizer_order,
    zoo_colours,
)
from harness.style.labels import natural_key

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
    frame: pd.DataFrame,
    column: str = "setting",
    shown: Sequence[str] | None = None,
    study=None,
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
    CONTEXT style (default: every setting is shown). `study` (`harness.style.study.Study`):
    the look of each optimizer across the study's figures, so that an optimizer has one colour
    in all of them; without it the figure chooses (`zoo_colours` for a zoo's focus)."""
    optimizer_of = dict(zip(frame[column], frame["optimizer"], strict=False))
    order = setting_order(frame, column)
    look_of = study.look if study is not None else lambda _: None
    if shown is not None and set(order) - set(shown):
        if study is None:
            colours = zoo_colours([optimizer_of[s] for s in shown if s in optimizer_of])
            look_of = lambda o: {"color": colours[o]} if o in colours else None  # noqa: E731
        coloured = _styles([s for s in order if s in set(shown)], optimizer_of, look_of)
        return {s: coloured.get(s) or dict(CONTEXT) for s in order}
    return _styles(order, optimizer_of, look_of)


def _styles(
    order: list[str], optimizer_of: dict[str, str], look_of: Callable = lambda _: None
) -> dict[str, dict]:
    """`setting_styles` of the settings in `order`: `look_of` an optimizer (its colour and, from
    a study, its line style and marker), where it gives one, else `optimizer_color`."""
    one_optimizer = len(set(optimizer_of.values())) == 1 and len(optimizer_of) > 1
    styles: dict[str, dict] = {}
    count: dict[str, int] = {}
    combinations = [(ls, lm) for lm in LINE_MARKERS for ls in range(len(LINE_STYLES))]
    for i, setting in enumerate(order):
        optimizer = optimizer_of[setting]
        n = count.get(optimizer, 0)
        count[optimizer] = n + 1
        look = look_of(optimizer) or {}
        colour = SETTING_COLORS[i % len(SETTING_COLORS)] if one_optimizer else None
        colour = colour or look.get("color") or optimizer_color(optimizer)
        # the study's line style and marker come first: the optimizer's look in every figure
        own = (look.get("ls_index", 0), look.get("line_marker"))
        start = combinations.index(own) + n if own in combinations else n
        taken = {
            (s["ls_index"], s["line_marker"])
            for s in styles.values()
            if color_distance(s["color"], colour) < MIN_COLOR_DISTANCE
        }
        ordered = combinations[start:] + combinations[:start]
        free = [c for c in ordered if c not in taken]
        ls, line_marker = free[0] if free else ordered[0]
        if n == 0 and "ls_index" in look and not one_optimizer:
            # a study's look is the optimizer's in every figure, told apart from the others'
            # by the study (`Study.of`): a figure never moves it on
            ls, line_marker = own
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


# --- a zoo: more settings than colours, line styles and markers tell apart --------------------
# Up to LEGIBLE_SETTINGS settings, a figure draws each in a style of its own. A zoo's figures
# (100+) draw in colour the FOCUS_TOP best of each panel by the figure's own ranking (made on
# validation data where the panel's metric has it) and the best of the course's optimizers
# there, the reference a zoo is read against; the others are thin grey lines behind them.
LEGIBLE_SETTINGS, FOCUS_TOP = 16, 8


CONTEXT = {
    "color": CONTEXT_COLOR,
    "ls": "-",
    "ls_index": 0,
    "marker": "o",
    "line_marker": None,
    "context": True,
}


CONTEXT_LW = 0.7


def focused(
    ranked: Sequence[str], optimizer_of: dict[str, str], settings: int, top: int = FOCUS_TOP
) -> list[str]:
    """The settings a panel draws in colour, best first: all of `ranked` (the panel's settings,
    best first) when the figure has at most LEGIBLE_SETTINGS `settings`; else the `top` first,
    and the first of a course optimizer (`optimizer_of` each setting's) if not among them."""
    ranked = list(ranked)
    if settings <= LEGIBLE_SETTINGS:
        return ranked
    shown = ranked[:top]
    reference = next((s for s in ranked if optimizer_of[s] in COURSE_OPTIMIZERS), None)
    return shown + ([reference] if reference is not None and reference not in shown else [])


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
