"""One look per optimizer across a study's figures: its colour, line style and line marker, and
its display name, worked out once for the whole study and passed to every figure.

Each figure of a zoo draws in colour the few settings that matter in it (its best and the
course's best) and the rest in grey; when each figure chose colours for the optimizers it
happened to show, the same optimizer changed colour from one figure to the next (MARS navy in
one, teal in another). A `Study` fixes them: the course's optimizers keep their colours
(OPTIMIZER_COLORS), every other optimizer, in the study's order (best first), takes the next
of STUDY_HUES colours, then the same colours in the next line style and marker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pandas as pd

from harness.style.colors import (
    MIN_COLOR_DISTANCE,
    OPTIMIZER_COLORS,
    color_distance,
    optimizer_order,
    study_colour_combinations,
    study_palette,
)
from harness.style.names import display_name, display_setting
from harness.style.settings import LINE_MARKERS, LINE_STYLES


@dataclass(frozen=True)
class Study:
    """Per optimizer (catalogue name): `looks`, its colour, line style index and line marker;
    `names`, its display name. An optimizer the study did not list gets its catalogue name and
    no look (`look` is None: the figure's own choice)."""

    looks: dict[str, dict] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, ranked: Sequence[str], targets: dict[str, str] | None = None) -> Study:
        """The study of optimizers `ranked` (catalogue names, the study's best first: the first
        get the solid lines of the palette's colours), their classes `targets` (dotted
        `_target_` per optimizer, where known) naming them."""
        targets = targets or {}
        ranked = list(dict.fromkeys(ranked))
        palette, combinations = study_palette(), study_colour_combinations()
        # the course's colours first: a colour of the palette near one of them (brown near
        # Adam's red) takes its next line style, so the look is told apart in any figure
        looks = {
            o: {"color": OPTIMIZER_COLORS[o], "ls_index": 0, "line_marker": None}
            for o in ranked
            if o in OPTIMIZER_COLORS
        }
        others = [o for o in ranked if o not in OPTIMIZER_COLORS]
        for i, optimizer in enumerate(others):
            colour = palette[i % len(palette)]
            taken = {
                (look["ls_index"], look["line_marker"])
                for look in looks.values()
                if color_distance(look["color"], colour) < MIN_COLOR_DISTANCE
            }
            ls, lm = next(
                (c for c in combinations if (c[0], LINE_MARKERS[c[1]]) not in taken),
                combinations[0],
            )
            looks[optimizer] = {"color": colour, "ls_index": ls, "line_marker": LINE_MARKERS[lm]}
        looks = {o: looks[o] for o in ranked}
        names = {o: display_name(o, targets.get(o)) for o in ranked}
        # two catalogue names of one class (a config's variants) would share a name: each
        # then keeps its catalogue name beside it, so that a legend never lists one name twice
        shared = pd.Series(names).duplicated(keep=False)
        names = {o: f"{n} [{o}]" if shared[o] else n for o, n in names.items()}
        return cls(looks, names)

    @classmethod
    def of_figure(cls, optimizers: Iterable[str]) -> Study:
        """A study of one figure's optimizers alone, in the course's order (a notebook's figure
        drawn without its study)."""
        return cls.of(optimizer_order(optimizers))

    def look(self, optimizer: str) -> dict | None:
        return self.looks.get(optimizer)

    def colour(self, optimizer: str) -> str | None:
        look = self.looks.get(optimizer)
        return look["color"] if look else None

    def line_style(self, optimizer: str):
        look = self.looks.get(optimizer)
        return LINE_STYLES[look["ls_index"]] if look else "-"

    def name(self, optimizer: str) -> str:
        return self.names.get(optimizer, optimizer)

    def setting(self, setting: str, optimizer: str) -> str:
        """A setting's label with its optimizer's display name ('Adam: weight_decay=0.1')."""
        return display_setting(setting, optimizer, self.names)
