"""Colours that stay distinct (issue 20, item 3): the CIEDE2000 distance of harness.style
against published values, and every two optimizers' colours at least MIN_COLOR_DISTANCE apart."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from harness import style


@pytest.mark.parametrize(
    ("lab_a", "lab_b", "expected"),
    [  # Sharma, Wu & Dalal (2005), table 1, pairs 1, 3, 7 and 25
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 2.8361, -74.0200), (50.0, 0.0, -82.7485), 3.4412),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ],
)
def test_ciede2000_matches_the_published_test_data(lab_a, lab_b, expected):
    assert style.ciede2000(lab_a, lab_b) == pytest.approx(expected, abs=1e-4)
    assert style.ciede2000(lab_b, lab_a) == pytest.approx(expected, abs=1e-4)


def test_cielab_of_known_colours():
    assert style.cielab("white") == pytest.approx([100, 0, 0], abs=0.01)
    assert style.cielab("black") == pytest.approx([0, 0, 0], abs=0.01)
    assert style.cielab("#ff0000") == pytest.approx([53.24, 80.09, 67.20], abs=0.05)


def test_any_two_optimizers_colours_are_far_apart():
    colours = style.OPTIMIZER_COLORS
    close = [
        (a, b, round(style.color_distance(colours[a], colours[b]), 1))
        for a, b in itertools.combinations(colours, 2)
        if style.color_distance(colours[a], colours[b]) < style.MIN_COLOR_DISTANCE
    ]
    assert close == [], f"CIEDE2000 below {style.MIN_COLOR_DISTANCE}: {close}"


@pytest.mark.slow
def test_an_unknown_optimizer_keeps_its_colour_across_processes():
    names = ["lion", "adan", "sophiah", "prodigy"]
    code = (
        "import json; from harness import style; "
        f"print(json.dumps([style.optimizer_color(n) for n in {names!r}]))"
    )
    drawn = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONHASHSEED": seed},
            ).stdout
        )
        for seed in ("1", "2")
    ]
    assert drawn[0] == drawn[1] == [style.optimizer_color(n) for n in names]
    assert not set(drawn[0]) & set(style.OPTIMIZER_COLORS.values())
