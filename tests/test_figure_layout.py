"""Layout that never overlaps: in every figure the report makes, no two text boxes (titles, axis
labels, tick labels, legends) intersect, by matplotlib's own renderer extents (layout_checks);
on the smoke sweep and on sweeps made from it: the course's nine optimizers, a zoo of 120, names
as long as a study's; and any two lines of a panel differ in colour or in style."""

import functools
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from layout_checks import defects, outside, overlaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from smoke_sweep import TARGET

from harness import analysis, style
from harness.config.identity import identity_hash
from harness.report import TuningStudy, load_sweep, make_figures
from harness.report.common import study_of
from harness.report.figures import figure_makers
from harness.report.summary import against_the_course_markdown, net_table_markdown
from harness.report.tables import final_metrics_table
from harness.results import with_config_columns


def zoo_sized(runs: pd.DataFrame, curves: pd.DataFrame, copies: int, suffix: str = ""):
    """The smoke sweep's tables as if each optimizer came in `copies` variants
    (`<name><suffix>_<i>`, made-up optimizers: colours of the zoo), each with its own identity
    and slightly shifted curves: a sweep as many settings wide as the optimizer zoo."""
    return copied(runs, curves, copies, lambda optimizer, i: f"{optimizer}{suffix}_{i}")


# The smoke sweep's three optimizers, three copies each, named as the course's nine.
COURSE_NAMES = {
    "sgd": ("sgd", "adagrad", "adadelta"),
    "momentum": ("momentum", "nesterov", "rmsprop"),
    "adam": ("adam", "adamax", "nadam"),
}


def course_sized(runs: pd.DataFrame, curves: pd.DataFrame):
    """The smoke sweep's tables as a course study: the course's nine optimizers on its nets."""
    assert sorted(style.COURSE_OPTIMIZERS) == sorted(sum(COURSE_NAMES.values(), ()))
    return copied(runs, curves, 3, lambda optimizer, i: COURSE_NAMES[optimizer][i])


def copied(runs: pd.DataFrame, curves: pd.DataFrame, copies: int, name: Callable[[str, int], str]):
    """`copies` copies of a sweep's tables, copy i of each optimizer named `name(optimizer, i)`,
    with its own identity and curves shifted a little."""
    run_frames, curve_frames = [], []
    for i in range(copies):
        shift = 1 + 0.002 * i
        names = {o: name(o, i) for o in runs["optimizer"].unique()}
        new_runs = runs.assign(
            optimizer=runs["optimizer"].map(names),
            run_dir=runs["run_dir"] + f"/zoo{i}",
            final_val_accuracy=runs["final_val_accuracy"] / shift,
        )
        identities = [
            {**json.loads(c), "optimizer.name": o}
            for c, o in zip(runs["config"], new_runs["optimizer"], strict=True)
        ]
        new_runs["config"] = [json.dumps(d, sort_keys=True) for d in identities]
        new_runs["config_id"] = [identity_hash(d) for d in identities]
        ids = dict(zip(runs["run_dir"], new_runs["config_id"], strict=True))
        new_curves = curves.assign(  # its text columns are categories (load_curves): as text
            optimizer=curves["optimizer"].astype(str).map(names),
            config_id=curves["run_dir"].astype(str).map(ids),
            run_dir=curves["run_dir"].astype(str) + f"/zoo{i}",
            value=np.where(
                curves["metric"].str.endswith("loss"),
                curves["value"] * shift,
                curves["value"] / shift,
            ),
        )
        run_frames.append(new_runs)
        curve_frames.append(new_curves)
    zoo_runs = pd.concat(run_frames, ignore_index=True).drop(
        columns=["optimizer.name"], errors="ignore"
    )
    return with_config_columns(zoo_runs), pd.concat(curve_frames, ignore_index=True)


def figures_of(
    folder: Path, resized: Callable | None = None, runs: pd.DataFrame | None = None
) -> dict[str, Figure]:
    """The figures of the report of the sweep in `folder` (as the report reads its tables; its
    rates as the trials of its tuning curves), or of `resized(runs, curves)`, or of `runs`."""
    tables = load_sweep(folder)
    if resized is not None:
        tables = resized(*tables)
    if runs is not None:
        tables = runs, tables[1][tables[1]["run_dir"].isin(runs["run_dir"])]
    trials = TuningStudy(folder, [analysis.LR_KEY], tables[0])
    made = make_figures(*tables, TARGET, trials)
    return {name: fig for name, fig in made.items() if isinstance(fig, Figure)}


@pytest.mark.slow
def test_no_text_covers_another_in_the_smoke_sweeps_figures(smoke_sweep):
    figures = figures_of(smoke_sweep)
    assert "convergence_train_loss" in figures
    assert defects(figures) == {}


@pytest.mark.slow
def test_no_text_covers_another_in_a_course_sized_sweeps_figures(smoke_sweep):
    """The course's nine optimizers, named as the course names them, on the smoke sweep's nets:
    nine legend entries go beside the panels, not below them."""
    figures = figures_of(smoke_sweep, course_sized)
    assert {"convergence_test_accuracy", "course_net1", "course_net2"} <= set(figures)
    assert defects(figures) == {}


@pytest.mark.slow
def test_a_single_nets_figures_keep_their_titles_within_their_width(smoke_sweep):
    """One net: one panel a figure, narrower than any title; the titles wrap to it."""
    runs, _ = course_sized(*load_sweep(smoke_sweep))
    figures = figures_of(smoke_sweep, course_sized, runs[runs["model"] == "net2"])
    assert {"quality_against_step_time", "performance_profile", "tuning_curves"} <= set(figures)
    assert defects(figures, (outside, overlaps)) == {}


def test_wrapped_suptitle_wraps_to_the_figure_and_grows_it_by_the_lines_it_adds():
    fig, _ = style.new_figure(1)
    height = fig.get_figheight()
    text = "a title " * 30 + "\nits second line"
    style.wrapped_suptitle(fig, text)
    lines = fig.get_suptitle().split("\n")
    assert len(lines) > 2 and outside(fig) == []
    assert " ".join(" ".join(lines).split()) == " ".join(text.split())  # nothing lost
    added = style.TITLE_LINE_INCHES * (len(lines) - 2)
    assert fig.get_figheight() == pytest.approx(height + added)
    wide, _ = style.new_figure(3)
    style.wrapped_suptitle(wide, "short\ntitle")
    assert wide.get_suptitle() == "short\ntitle" and wide.get_figheight() == height
    for text in ("a\n\nb", "title\n", ""):  # empty lines stay
        style.wrapped_suptitle(wide, text)
        assert wide.get_suptitle() == text
    narrow = Figure(figsize=(0.1, 1))  # narrower than a letter: a letter a line, and it ends
    style.wrapped_suptitle(narrow, "W wide")
    assert narrow.get_suptitle() == "W\nw\ni\nd\ne"


def test_a_legend_below_one_panel_never_overhangs_it():
    """Names longer than a single panel is wide: the figure widens to one legend column."""
    fig, axes = style.new_figure(1)
    names = [
        f"momentum: study.budget=epochs, study.lr_scaling=linear, batch_size={b}" for b in (64, 128)
    ]
    lines = [axes[0, 0].plot([1, 2], [1, i])[0] for i in (1, 2)]
    style.figure_legend(fig, lines, names)
    style.wrapped_suptitle(fig, "a title as wide as the figure " * 3)
    assert fig.get_figwidth() > style.PANEL_WIDTH and outside(fig) + overlaps(fig) == []


@pytest.mark.slow
def test_a_log_x_axis_keeps_its_labels_apart_on_any_range():
    """Where measured step times set the range, the ticks fit their labels: CI's machine put
    one net's between 0.53 and 0.59 ms, and 0.55 touched 0.575. Over ranges from 3 % to three
    times their start, from hundredths to hundreds, on the narrowest panel."""
    fig, axes = style.new_figure(1)
    ax = axes[0, 0]
    ranges = [(0.53, 0.59)] + [
        (low, low * ratio)
        for low in np.geomspace(0.013, 130, 9)
        for ratio in np.geomspace(1.03, 3.3, 8)
    ]
    found = []
    for low, high in ranges:
        ax.set_xlim(low, high)
        style.log_x(ax)
        found += [f"{low:.3g} to {high:.3g}: {o}" for o in overlaps(fig)]
    assert found == []


def test_a_short_log_axis_gets_labels_at_3_too_and_a_shorter_one_evenly_spaced():
    fig, axes = style.new_figure(1)
    ax = axes[0, 0]
    ax.set_xlim(2.1, 35)
    style.log_x(ax)
    FigureCanvasAgg(fig).draw()
    low, high = ax.get_xlim()
    assert [t for t in ax.get_xticks() if low <= t <= high] == [3, 5, 10, 20, 30]
    ax.set_xlim(0.85, 2.7)  # half a decade: evenly spaced
    FigureCanvasAgg(fig).draw()
    shown = [t for t in ax.get_xticks() if 0.85 <= t <= 2.7]
    assert shown == pytest.approx([1, 1.5, 2, 2.5])
    assert [t.get_text() for t in ax.get_xticklabels() if 0.85 <= t.get_position()[0] <= 2.7] == [
        "1",
        "1.5",
        "2",
        "2.5",
    ]
    ax.set_xlim(1e-6, 1e5)  # eleven decades: each decade, labelled every other
    FigureCanvasAgg(fig).draw()
    assert [t for t in ax.get_xticks() if 1e-6 <= t <= 1e5] == pytest.approx(
        [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10, 100, 1e3, 1e4, 1e5]
    ) or [t for t in ax.get_xticks() if 1e-6 <= t <= 1e5] == pytest.approx(
        [1e-6, 1e-4, 1e-2, 1, 100, 1e4]
    )
    ax.set_xlim(0.5, 200)  # 2.6 decades: 1, 2 and 5 of each are plenty
    ticks = [t for t in ax.get_xticks() if 0.5 <= t <= 200]
    assert ticks == pytest.approx([0.5, 1, 2, 5, 10, 20, 50, 100, 200])


@pytest.mark.slow
def test_no_text_covers_another_in_a_zoo_sized_sweeps_figures(smoke_sweep):
    """120 optimizers (3 of the smoke sweep x 40 made-up variants), each at its best rate."""
    figures = figures_of(smoke_sweep, functools.partial(zoo_sized, copies=40))
    legend = [t.get_text() for t in figures["convergence_train_loss"].axes[1].get_legend().texts]
    # in colour: the best by the selection rule; the others counted in one grey entry
    assert len(legend) <= style.FOCUS_TOP + 2
    [(_, others)] = style.context_entries(120 - (len(legend) - 1))
    assert legend[-1] == others
    assert defects(figures) == {}


@pytest.mark.slow
@pytest.mark.heavy
def test_long_setting_names_widen_the_figures_not_squeeze_their_panels(smoke_sweep):
    """Settings named like a batch-size study's (`momentum: study.budget=epochs, ...`): the
    names beside bars and in legends take their width; no panel collapses (pyproject turns
    matplotlib's warning into an error), no text leaves the figure or covers another."""
    long_names = functools.partial(zoo_sized, copies=2, suffix="_with_a_name_as_long_as_a_study_s")
    figures = figures_of(smoke_sweep, long_names)
    assert defects(figures, (outside, overlaps)) == {}


def test_any_two_lines_of_a_zoo_sized_figure_differ_in_colour_or_style():
    names = [f"zoo_{i:03d}" for i in range(150)] + list(style.OPTIMIZER_COLORS)
    frame = pd.DataFrame({"optimizer": names, "setting": names})
    styles = style.setting_styles(frame)
    alike = [
        (a, b)
        for a, b in itertools.combinations(names, 2)
        if (styles[a]["ls_index"], styles[a]["line_marker"])
        == (styles[b]["ls_index"], styles[b]["line_marker"])
        and style.color_distance(styles[a]["color"], styles[b]["color"]) < style.MIN_COLOR_DISTANCE
    ]
    assert alike == []
    assert styles["adam"]["color"] == style.OPTIMIZER_COLORS["adam"]  # its colour everywhere


@pytest.mark.slow
def test_a_zoos_figures_draw_in_colour_the_best_on_validation_and_the_courses_best(smoke_sweep):
    """In a zoo, a setting is drawn in colour for its validation quality, never its test
    quality: one made-up optimizer is made the best on validation and the worst on test, one the
    reverse. The course's optimizers of the smoke sweep are made the worst on validation: the
    best of them (momentum) is drawn in colour all the same, the reference; the others grey."""
    course, course_curves = load_sweep(smoke_sweep)
    runs, curves = zoo_sized(course, course_curves, 40)
    runs = pd.concat([course, runs], ignore_index=True)
    curves = pd.concat([course_curves, curves], ignore_index=True)
    made_up = {"adam_7": (1.0, 0.0), "sgd_3": (0.0, 1.0)}
    made_up |= {"sgd": (0.05, 1.0), "momentum": (0.06, 1.0), "adam": (0.04, 1.0)}
    for optimizer, (val, test) in made_up.items():
        mine = runs["optimizer"] == optimizer
        runs.loc[mine, "final_val_accuracy"], runs.loc[mine, "final_test_accuracy"] = val, test
    tuning = TuningStudy(smoke_sweep, [analysis.LR_KEY], runs)
    with analysis.shared_results():
        makers = figure_makers(runs, curves, TARGET, tuning)
        checked = ("convergence_train_loss", "convergence_test_accuracy", "lr_sensitivity")
        # the three that show the ranking by colour; the layout tests draw every figure
        figures = {name: makers[name]() for name in checked}
    named = study_of(runs).names  # legends name optimizers by their display names
    for name, figure in figures.items():
        legends = [ax.get_legend() for ax in figure.axes if ax.get_legend()] + figure.legends
        shown = {
            re.sub(r"^\d+\. |, lr .*$", "", text.get_text())
            for legend in legends
            for text in legend.get_texts()
        }
        assert {named["adam_7"], named["momentum"]} <= shown, name
        assert not {named["sgd_3"], named["sgd"], named["adam"]} & shown, name
        grey = [line for ax in figure.axes for line in ax.get_lines() if line.get_color() == "0.78"]
        assert grey, name  # the others: thin grey lines behind
    # the summary ranks every setting against the course's best, chosen the same way
    best = analysis.best_at_reference_batch(runs)[1]
    markdown = "\n".join(against_the_course_markdown(runs, best))
    assert markdown.count("gain over momentum") == best["net"].nunique()
    # and writes its net x setting tables a setting per row, not 123 columns wide
    table = net_table_markdown(final_metrics_table(best)).splitlines()
    assert table[0] == "| setting | net1 | net2 |"
    assert len(table) == 2 + best["setting"].nunique()


def test_a_zoos_focus_is_its_best_and_the_courses_best_in_colours_apart():
    ranked = [f"zoo_{i}" for i in range(30)] + ["adam", "sgd"]
    optimizer_of = {s: s for s in ranked}
    assert style.focused(ranked, optimizer_of, 12) == ranked  # a few: every one
    shown = style.focused(ranked, optimizer_of, len(ranked))
    assert shown == ranked[: style.FOCUS_TOP] + ["adam"]  # the course's best of the panel
    frame = pd.DataFrame({"optimizer": ranked, "setting": ranked})
    styles = style.setting_styles(frame, shown=shown)
    assert [s for s in ranked if style.is_context(styles[s])] == ranked[style.FOCUS_TOP : -2] + [
        "sgd"
    ]
    assert styles["adam"]["color"] == style.OPTIMIZER_COLORS["adam"]
    colours = [styles[s]["color"] for s in shown]
    closest = min(style.color_distance(a, b) for a, b in itertools.combinations(colours, 2))
    assert closest >= style.MIN_COLOR_DISTANCE / 2  # apart, where the hashed colours repeat


@pytest.mark.slow
def test_crowded_point_labels_stay_inside_their_panel():
    """Where no place near a point is free (a zoo's Pareto front in one corner), its label
    goes where it covers the least inside the panel, never outside it (where it was cut off)."""
    fig, axes = style.new_figure(1)
    ax = axes[0][0]
    rng = np.random.default_rng(0)
    xs, ys = 1 + rng.random(20) * 0.05, 1 + rng.random(20) * 0.05
    ax.scatter(xs, ys)
    ax.set_xlim(0.99, 3)
    ax.set_ylim(0.99, 3)  # every point in the lower left corner
    style.label_points(ax, xs, ys, [f"setting {i}" for i in range(20)])
    fig.canvas.draw()
    panel = ax.get_window_extent()
    boxes = [Text.get_window_extent(t) for t in ax.texts]
    assert len(boxes) == 20
    assert all(panel.contains(b.x0, b.y0) and panel.contains(b.x1, b.y1) for b in boxes)


@pytest.mark.slow
def test_point_labels_keep_off_the_panels_edges_and_each_other():
    """A point near the left spine whose right is taken by its neighbours: its label goes to
    its left, where it had sat flush with the spine, the spine through its first letter; and
    no two labels touch."""
    fig, axes = style.new_figure(1)
    ax = axes[0][0]
    xs = np.array([1.0, 1.05, 1.1, 1.15, 1.2, 1.25])
    ys = np.ones_like(xs)
    ax.scatter(xs, ys)
    ax.set_ylim(0, 2)
    fig.canvas.draw()
    labels = ["pid", "a", "b", "c", "d", "e"]
    for left in np.linspace(0.9, 0.95, 26):  # the point ever nearer the spine
        ax.set_xlim(left, 2)
        for text in list(ax.texts):
            text.remove()
        style.label_points(ax, xs, ys, labels)
        fig.canvas.draw()
        panel = ax.get_window_extent()
        boxes = [Text.get_window_extent(t) for t in ax.texts]
        margin = style.LABEL_MARGIN_PT * fig.dpi / 72 - 0.5
        assert min(b.x0 - panel.x0 for b in boxes) >= margin, left
        # nor side by side: "pid novograd" read as one label
        assert not any(a.padded(margin).overlaps(b) for a, b in itertools.combinations(boxes, 2))


def test_a_lone_points_label_sits_beside_it():
    """The first place, beside its point, with no line to it: the margin between labels is
    not one between a label and its own point."""
    fig, axes = style.new_figure(1)
    ax = axes[0][0]
    xs, ys = np.array([1.0, 2.0, 3.0]), np.array([1.0, 3.0, 2.0])
    ax.scatter(xs, ys)
    ax.set_xlim(0, 5)
    ax.set_ylim(0, 4)
    style.label_points(ax, xs, ys, ["a", "b", "c"])
    assert [t.xyann for t in ax.texts] == [style.LABEL_OFFSETS[0]] * 3


def test_a_log_axis_of_two_decades_labels_2_and_5_between_them():
    """matplotlib labels 2, 3, 4 and 6 of each decade there: 0.3 and 0.4 touched on a panel of
    a batch-size study's figure."""
    fig, axes = style.new_figure(1)
    ax = axes[0, 0]
    style.log_y(ax)
    ax.set_ylim(0.02, 3)
    with matplotlib.rc_context(style.STYLE):
        FigureCanvasAgg(fig).draw()
    minor = [
        t.get_text()
        for t in ax.yaxis.get_minorticklabels()
        if t.get_text() and 0.02 <= t.get_position()[1] <= 3
    ]
    assert minor == ["0.02", "0.05", "0.2", "0.5", "2"]
    assert overlaps(fig) == []


def test_a_panel_title_wider_than_its_panel_wraps_where_it_would_leave_the_figure():
    """The depth study's nets are named by their layers: over the last of five panels,
    'mlp: hidden=[100, 100, 100, 100, 100]' ran past the figure's edge, and neighbours' long
    titles run into each other. A styled figure wraps those titles to their panel; a title
    that fits keeps its one line."""
    long = f"mlp: hidden=[{', '.join(['100'] * 14)}]"  # wider than a panel

    @style.styled
    def panels(titles: list[str]) -> Figure:
        fig, axes = style.new_figure(len(titles))
        for ax, title in zip(axes[0], titles, strict=True):
            ax.plot([1, 2], [1, 2])
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(title)
        return fig

    fig = panels(["net1: no hidden layer", long, long])
    texts = [ax.get_title() for ax in fig.get_axes()]
    assert texts[0] == "net1: no hidden layer" and all("\n" in t for t in texts[1:])
    assert outside(fig) + overlaps(fig) == []

    @style.styled
    def left_titled() -> Figure:  # as the convergence figures title their panels
        fig, axes = style.new_figure(2)
        for ax in axes[0]:
            ax.set_title(long, loc="left")
        return fig

    fig = left_titled()
    assert all("\n" in ax.get_title(loc="left") for ax in fig.get_axes())
    assert outside(fig) + overlaps(fig) == []
    assert [ax.get_title() for ax in panels(["net1", "net2"]).get_axes()] == ["net1", "net2"]
