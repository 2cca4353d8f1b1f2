"""harness.report: the figures draw the analysis tables (checked on the plotted data itself),
the Markdown summary holds them, and harness-report writes it all or fails in one line."""

import itertools
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle
from smoke_sweep import BATCH_64_LR, TARGET
from test_analysis import validation_against_test

from conftest import REPO, SMALL_RUN, compose_config, hydra_context
from harness import analysis, report, style
from harness.results import CURVES_TABLE, RUNS_TABLE, load_curves, load_runs


@pytest.fixture(scope="module")
def tables(smoke_sweep):
    return load_runs(smoke_sweep), load_curves(smoke_sweep)


def write_sweep(folder: Path, runs: pd.DataFrame, curves: pd.DataFrame) -> Path:
    """A consolidated sweep folder holding only these rows (as a committed study does)."""
    folder.mkdir(parents=True)
    runs.to_parquet(folder / RUNS_TABLE, index=False)
    curves[curves["run_dir"].isin(runs["run_dir"])].to_parquet(folder / CURVES_TABLE, index=False)
    return folder


def xy(line) -> tuple[np.ndarray, np.ndarray]:
    """A line's plotted data as float arrays."""
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def lines_by_color(ax) -> dict[str, list]:
    """The axes' lines with data (error-bar caps left out), keyed by the optimizer whose colour
    they have."""
    names = {mcolors.to_hex(c): n for n, c in style.OPTIMIZER_COLORS.items()}
    found = {}
    for line in ax.get_lines():
        if len(line.get_xdata()) == 0 or line.get_marker() in ("_", "|"):
            continue
        if line.get_linestyle() == ":" and mcolors.to_hex(line.get_color()) == "#808080":
            continue  # a marker line of the axes (the profile's score ends at tau 4)
        found.setdefault(names[mcolors.to_hex(line.get_color())], []).append(line)
    return found


def test_convergence_lines_are_the_mean_over_seeds_of_the_curves_table(tables):
    runs, curves = tables
    fig = report.convergence_figure(runs, curves, "train_loss")
    best = analysis.best_configs(analysis.summarize(runs[runs["batch_size"] == 128]))
    axes = np.array(fig.get_axes()).reshape(2, 2)  # a row per net: the run, its final stretch
    assert [ax.get_title(loc="left") for ax in axes[:, 0]] == [
        "net1: no hidden layer",
        "net2: hidden 100",
    ]
    for (full, zoom), net in zip(axes, ["net1", "net2"], strict=True):
        final = {}
        for ax in (full, zoom):
            assert ax.get_yscale() == "log"
            drawn = lines_by_color(ax)
            assert sorted(drawn) == ["adam", "momentum", "sgd"]
            for optimizer, lines in drawn.items():
                lr = best[(best["net"] == net) & (best["optimizer"] == optimizer)]["lr"].item()
                seeds = curves[
                    (curves["metric"] == "train_loss")
                    & (curves["model"] == net)
                    & (curves["optimizer"] == optimizer)
                    & (curves["lr"] == lr)
                    & (curves["batch_size"] == 128)
                ].pivot_table(index="iteration", columns="seed", values="value")
                (line,) = lines
                np.testing.assert_array_equal(line.get_xdata(), seeds.index)
                np.testing.assert_allclose(line.get_ydata(), seeds.mean(axis=1))
                final[optimizer] = (lr, seeds.mean(axis=1).iloc[-1])
            # One band per optimizer, spanning the seeds' min and max.
            bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
            assert len(bands) == 3
        # the zoom shows the last quarter; its legend numbers the settings by the selection rule
        low, high = zoom.get_xlim()
        assert high == 60 and low == 60 - 0.25 * 60
        # the legend lists the settings by the final value it prints, the lowest loss first
        legend = [t.get_text() for t in zoom.get_legend().get_texts()]
        ranked = sorted(final, key=lambda o: final[o][1])
        assert legend == [
            f"{i}. {style.DISPLAY_NAMES[o]}, lr {final[o][0]:.3g}: {final[o][1]:.3g}"
            for i, o in enumerate(ranked, start=1)
        ]
    assert axes[0, 0].get_ylabel().startswith("training loss")
    assert "iteration" in axes[1, 0].get_xlabel()


def test_convergence_legends_list_the_settings_by_the_value_they_print(tables):
    """Validation is made to rank the settings in the reverse of their test accuracy: the
    learning rates are chosen on validation all the same (the title says so), while the legend
    of the test-accuracy figure lists them by the test error it prints, so that its values fall
    in order (listed by validation, they jumped up and down)."""
    runs, curves = tables
    runs = runs.assign(final_val_accuracy=1 - runs["final_test_accuracy"])
    fig = report.convergence_figure(runs, curves, "test_accuracy")
    for zoom in fig.get_axes()[1::2]:
        legend = [t.get_text() for t in zoom.get_legend().get_texts()]
        printed = [float(re.search(r": ([\d.]+) %", text).group(1)) for text in legend]
        assert printed == sorted(printed)
        assert [int(text.split(".")[0]) for text in legend] == list(range(1, len(legend) + 1))
    assert "learning rates chosen by final validation accuracy; legend: best first by the" in (
        fig._suptitle.get_text().replace("\n", " ")
    )


def test_convergence_of_accuracy_is_error_in_percent_on_a_log_axis(tables):
    runs, curves = tables
    fig = report.convergence_figure(runs, curves, "test_accuracy")
    ax = fig.get_axes()[0]
    assert ax.get_yscale() == "log"
    assert ax.get_ylabel() == "test error (%, 100 - accuracy; log scale)"
    bands = analysis.curve_bands(
        runs, curves, analysis.best_at_reference_batch(runs)[1], "test_accuracy"
    ).query("net == 'net1' and optimizer == 'adam'")
    (line,) = lines_by_color(ax)["adam"]
    np.testing.assert_allclose(line.get_ydata(), (1 - bands["mean"]) * 100)


def test_the_course_figure_of_a_net_is_its_loss_and_error_rows(tables):
    runs, curves = tables
    fig = report.course_figure(runs, curves, "net2")
    axes = np.array(fig.get_axes()).reshape(2, 2)
    assert [ax.get_title(loc="left") for ax in axes[:, 0]] == ["training loss", "test error"]
    loss = report.convergence_figure(runs, curves, "train_loss").get_axes()[2]  # net2's row
    for (optimizer, lines), (_, same) in zip(
        sorted(lines_by_color(axes[0, 0]).items()),
        sorted(lines_by_color(loss).items()),
        strict=True,
    ):
        np.testing.assert_array_equal(lines[0].get_ydata(), same[0].get_ydata()), optimizer
    assert report.nets_of(runs) == ["net1", "net2"]


def test_convergence_marks_a_diverged_curve_where_it_ends(tables):
    runs, curves = tables
    diverged = runs[runs["lr"] == 50.0]  # sgd, diverged at step 5 with both seeds
    fig = report.convergence_figure(diverged, curves, "test_accuracy")
    lines = lines_by_color(fig.get_axes()[0])["sgd"]
    cross = [line for line in lines if line.get_marker() == "x"]
    assert len(cross) == 1 and list(cross[0].get_xdata()) == [0]
    (legend,) = [t.get_text() for t in fig.get_axes()[1].get_legend().get_texts()]
    assert re.fullmatch(r"1\. SGD, lr 50: [\d.]+ % \(2/2 diverged\)", legend)


@pytest.mark.slow
def test_a_setting_whose_seed_diverged_is_a_cross_off_the_front(tables):
    """Quality against step time: a setting at a config with a diverged seed plots the mean of
    what its seeds recorded, so it is drawn as a cross and never joins the Pareto front."""
    runs, _ = tables
    # a step time of its own per config (a stack's members share their measured one)
    step = (runs["config_id"].rank(method="dense") * 1e-4).to_numpy()
    runs = runs.assign(step_time_alone_s=step, step_time_s=step)
    fastest = runs.loc[runs["step_time_s"].idxmin()]
    net, optimizer = fastest["model"], fastest["optimizer"]
    seed_one = (runs["model"] == net) & (runs["optimizer"] == optimizer) & (runs["seed"] == 1)
    # every rate of that setting has a diverged seed: its chosen config has one
    broken = runs.assign(status=runs["status"].where(~seed_one, "diverged"))
    cross = MarkerStyle("x").get_path().transformed(MarkerStyle("x").get_transform()).vertices
    for frame, crossed in ((runs, False), (broken, True)):
        figure = report.quality_against_step_time_figure(frame)
        ax = figure.axes[style.net_order(frame.assign(net=frame["model"])).index(net)]
        summary = analysis.summarize(frame, metrics=["final_test_accuracy", "step_time_s"])
        best = analysis.best_configs(summary)
        row = best[(best["net"] == net) & (best["optimizer"] == optimizer)].iloc[0]
        x = row["step_time_s_mean"] * 1e3
        marks = {"x": [], "o": []}
        for points in ax.collections:
            if len(points.get_paths()) and len(points.get_offsets()):
                shape = points.get_paths()[0].vertices
                is_cross = shape.shape == cross.shape and np.allclose(shape, cross)
                marks["x" if is_cross else "o"] += list(points.get_offsets()[:, 0])
        front = next(line for line in ax.lines if line.get_linestyle() == "--").get_xdata()
        assert np.isclose(marks["x" if crossed else "o"], x).any()
        assert np.isclose(front, x).any() != crossed


@pytest.mark.slow
def test_lr_sensitivity_points_are_the_summary_and_the_star_is_the_best_lr(tables):
    runs, _ = tables
    fig = report.lr_sensitivity_figure(runs)
    summary = analysis.summarize(runs[runs["batch_size"] == 128])
    best = analysis.best_configs(summary)
    # rows: training loss, validation accuracy (which chooses the star), test accuracy
    axes = np.array(fig.get_axes()).reshape(3, 2)
    panels = [("final_train_loss", 1), ("final_val_accuracy", 100), ("final_test_accuracy", 100)]
    for col, net in enumerate(["net1", "net2"]):
        for row, (metric, k) in enumerate(panels):
            ax = axes[row, col]
            assert ax.get_xscale() == "log"
            for optimizer, lines in lines_by_color(ax).items():
                rows = summary[(summary["net"] == net) & (summary["optimizer"] == optimizer)]
                ok = rows[rows["n_diverged"] == 0].sort_values("lr")
                curve = next(li for li in lines if li.get_marker() == "o")
                x, y = xy(curve)
                np.testing.assert_allclose(x, ok["lr"])
                np.testing.assert_allclose(y, ok[f"{metric}_mean"] * k)
                star = next(li for li in lines if li.get_marker() == "*")
                chosen = best[(best["net"] == net) & (best["optimizer"] == optimizer)]
                x, y = xy(star)
                np.testing.assert_allclose(x, chosen["lr"])
                np.testing.assert_allclose(y, chosen[f"{metric}_mean"] * k)
                crosses = [li for li in lines if li.get_marker() == "x"]
                if optimizer == "sgd":  # lr 50 diverged: a cross at the panel's edge
                    assert [xy(c)[0].tolist() for c in crosses] == [[50.0]]
                else:
                    assert not crosses
    # Error bars span the seeds' min-max.
    segments = [
        seg
        for c in axes[2, 0].collections
        if hasattr(c, "get_segments")
        for seg in c.get_segments()
        if len(seg) == 2 and seg[0][0] == seg[1][0]
    ]
    adam = summary.query("net == 'net1' and optimizer == 'adam'")
    spans = {
        (round(s[0][0], 6), round(min(s[0][1], s[1][1]), 6), round(max(s[0][1], s[1][1]), 6))
        for s in segments
    }
    for _, r in adam.iterrows():
        lo, hi = r["final_test_accuracy_min"] * 100, r["final_test_accuracy_max"] * 100
        assert (round(r["lr"], 6), round(lo, 6), round(hi, 6)) in spans


def test_batch_size_points_are_the_best_lr_per_batch_size(tables):
    runs, _ = tables
    fig = report.batch_size_figure(runs)
    table = analysis.batch_size_table(runs)
    axes = np.array(fig.get_axes()).reshape(2, 2)
    assert "batch size" in axes[1, 0].get_xlabel() and axes[0, 0].get_xscale() == "log"
    for col, net in enumerate(["net1", "net2"]):
        for row, (metric, k) in enumerate([("final_test_accuracy", 100), ("train_time_s", 1)]):
            for optimizer, (line,) in lines_by_color(axes[row, col]).items():
                expected = table[(table["net"] == net) & (table["optimizer"] == optimizer)]
                expected = expected.sort_values("batch_size")
                x, y = xy(line)
                assert x.tolist() == [64, 128]
                np.testing.assert_allclose(y, expected[f"{metric}_mean"] * k)
    assert axes[1, 0].get_ylabel().startswith("training time (s")


def test_time_to_target_bars_are_the_fastest_configs(tables):
    runs, curves = tables
    ts = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, TARGET))
    fig = report.time_to_target_figure(ts, TARGET)
    axes = np.array(fig.get_axes()).reshape(2, 2)
    for row, measure in enumerate(["iterations_to_target", "seconds_to_target"]):
        fastest = analysis.fastest_configs(ts, measure)
        for col, net in enumerate(["net1", "net2"]):
            ax = axes[row, col]
            # tick labels name settings by display name ('SGD: batch_size=64')
            names = [
                re.sub(r"^[^:]+", lambda m: CATALOGUE[m.group(0)], t.get_text())
                for t in ax.get_yticklabels()
            ]
            widths = [bar.get_width() for bar in ax.patches]
            expected = fastest[fastest["net"] == net].set_index("setting").loc[names]
            cost = expected[f"{measure}_cost"]
            want = expected[f"{measure}_mean"].where(np.isfinite(cost), 0.0)
            np.testing.assert_allclose(widths, want)
            texts = [t.get_text().strip() for t in ax.texts]
            for name, c in zip(names, cost, strict=True):
                lr = style.lr_text(expected.loc[name, "lr"])
                assert (f"lr {lr}" if np.isfinite(c) else "not reached") in texts


def test_a_zoo_panel_where_nothing_reached_the_target_is_drawn_empty(tables, monkeypatch):
    """A zoo's net where no setting reached the target and no course optimizer ran has no bar:
    its panel says so instead of failing on an empty maximum."""
    runs, curves = tables
    ts = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, TARGET))
    monkeypatch.setattr("harness.report.time_to_target.LEGIBLE_SETTINGS", 0)  # zoo layout
    net2 = ts["net"] == "net2"
    ts.loc[net2, "optimizer"] = "lamb"  # not one of the course's: no reference bar
    ts.loc[net2, "n_reached"] = 0
    for measure in ("iterations_to_target", "seconds_to_target"):
        ts.loc[net2, f"{measure}_cost"] = np.inf
    settings = ts.loc[net2, "setting"].nunique()
    fig = report.time_to_target_figure(ts, TARGET)
    for ax in np.array(fig.get_axes()).reshape(2, 2)[:, 1]:
        assert [t.get_text() for t in ax.get_yticklabels()] == [f"{settings} others"]
        assert not ax.patches and ax.get_xticks().size == 0
        assert any("0 reached it" in t.get_text() for t in ax.texts)


def test_performance_profile_steps_are_the_profile(tables):
    runs, curves = tables
    costs = analysis.profile_tables(runs, curves, TARGET)
    fig = report.performance_profile_figure(costs, TARGET)
    for ax, (key, matrix) in zip(fig.get_axes(), costs.items(), strict=True):
        profile = analysis.performance_profile(matrix)
        assert f"{len(matrix)} problems" in ax.get_title()
        for optimizer, (line,) in lines_by_color(ax).items():
            np.testing.assert_allclose(line.get_xdata()[:-1], profile.index)
            np.testing.assert_allclose(line.get_ydata()[:-1], profile[optimizer] * 100)
        assert key in style.PROFILE_LABELS


def optimizer_named(label: str) -> str:
    """The optimizer (display name) a legend entry or tick label names: 'Adam: weight_decay=0.1,
    lr 0.01', or a ranked entry '2. Adam, lr 0.01: 7.5 %'."""
    return re.split(r"[:,]", re.sub(r"^\d+\. ", "", label), maxsplit=1)[0].strip()


CATALOGUE = {shown: name for name, shown in style.DISPLAY_NAMES.items()}


def catalogue_named(label: str) -> str:
    """The catalogue name of the optimizer a label names by its display name ('Adam' -> 'adam')."""
    return CATALOGUE[optimizer_named(label)]


@pytest.mark.slow
def test_one_colour_per_optimizer_in_every_figure(tables):
    runs, curves = tables
    figures = report.make_figures(runs, curves, TARGET)
    skipped = [n for n, f in figures.items() if isinstance(f, report.Skipped)]
    assert skipped == ["effective_step", "tuned_hyperparameters", "tuning_curves", "tuning_gain"]
    figures = {n: f for n, f in figures.items() if n not in skipped}
    colours = {}  # optimizer -> the colours it was drawn with, over every figure
    for name, figure in figures.items():
        legends = [ax.get_legend() for ax in figure.get_axes() if ax.get_legend()]
        legends += figure.legends
        entries = [
            (text.get_text(), handle)
            for legend in legends
            for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
            if not text.get_text().startswith(("best learning rate", "diverged"))
        ]
        for ax in figure.get_axes():  # time to target: bars named by their tick labels
            if ax.patches:
                ticks = [t.get_text() for t in ax.get_yticklabels()]
                entries += list(zip(ticks, ax.patches, strict=True))
            for points in ax.collections:  # points named by their labels (quality vs cost)
                if not hasattr(points, "get_offsets") or not len(points.get_offsets()):
                    continue
                offsets, faces = np.asarray(points.get_offsets()), points.get_facecolors()
                for text in (t for t in ax.texts if hasattr(t, "xy")):
                    at = np.flatnonzero(np.all(np.isclose(offsets, text.xy), axis=1))
                    if len(at) == 1:  # settings at one point (one step time, one error): any
                        entries += [(text.get_text(), Line2D([], [], color=faces[at[0]]))]
        assert entries, name
        for label, artist in entries:
            colour = (
                artist.get_color()
                if hasattr(artist, "get_linestyle") and not hasattr(artist, "get_width")
                else artist.get_facecolor()
            )
            # every figure names an optimizer by its display name, never its catalogue name
            assert optimizer_named(label) in CATALOGUE, (name, label)
            colours.setdefault(catalogue_named(label), set()).add(mcolors.to_hex(colour))
    assert set(colours) == {"sgd", "momentum", "adam"}
    for optimizer, drawn in colours.items():
        assert drawn == {style.OPTIMIZER_COLORS[optimizer]}, optimizer
    # Unknown optimizers get a colour of their own, fixed by their name (a CRC, not hash():
    # the same in every process, see tests/test_colors.py) and so the same in every figure.
    assert style.optimizer_color("lion") == style.EXTRA_COLORS[zlib.crc32(b"lion") % 7]
    assert style.optimizer_color("lion") not in style.OPTIMIZER_COLORS.values()


def test_an_optimizer_without_a_learning_rate_says_so_in_the_tables(tables):
    """A2Grad has no lr (its config's lr is null: NaN in the tables): 'lr none', not 'lr nan'."""
    runs, _ = tables
    runs = runs.assign(lr=runs["lr"].where(runs["optimizer"] != "adam"))
    best = analysis.best_at_reference_batch(runs)[1]
    cells = report.final_metrics_table(best)["adam"]
    assert cells.str.contains(r"\(lr none\)").all() and not cells.str.contains("nan").any()


def test_the_star_marks_the_best_learning_rate_of_every_net_and_setting(tables):
    runs, _ = tables
    batch, best = analysis.best_at_reference_batch(runs)
    summary = analysis.summarize(runs[runs["batch_size"] == batch])
    table = report.configs_table(summary, best)
    starred = table[table[""] == "★"]
    # One star per net and optimizer, the optimizers without a momentum (adam: NaN) included.
    assert sorted(zip(starred["net"], starred["setting"], strict=True)) == sorted(
        (net, o) for net in ("net1", "net2") for o in ("adam", "momentum", "sgd")
    )
    for _, row in starred.iterrows():
        chosen = best[(best["net"] == row["net"]) & (best["setting"] == row["setting"])]
        assert row["lr"] == style.lr_text(chosen["lr"].item())


def test_final_metrics_table_values_are_the_summary(tables):
    """Each cell is the test metric of the rate validation chose, and each net's bold setting is
    validation's pick, on runs whose validation ranks the configs against the test set."""
    runs, _ = tables
    runs = validation_against_test(runs)
    summary = analysis.summarize(runs[runs["batch_size"] == 128])
    best = analysis.best_configs(summary)
    table = report.final_metrics_table(best, "final_test_accuracy")
    val = runs.groupby("config_id")["final_val_accuracy"].mean()
    assert table.index.tolist() == ["net1", "net2"]
    assert table.columns.tolist() == ["sgd", "momentum", "adam"]
    for net in table.index:
        bold = [o for o in table.columns if table.loc[net, o].startswith("**")]
        assert len(bold) == 1
        for optimizer in table.columns:
            r = best[(best["net"] == net) & (best["optimizer"] == optimizer)].iloc[0]
            mean, ci, lr = re.match(
                r"\**([\d.]+) ± ([\d.]+) \(lr ([\d.e+-]+)\)", table.loc[net, optimizer]
            ).groups()
            assert float(mean) == pytest.approx(r["final_test_accuracy_mean"] * 100, abs=0.005)
            assert float(ci) == pytest.approx(r["final_test_accuracy_ci"] * 100, abs=0.005)
            assert float(lr) == pytest.approx(r["lr"])
            mine = summary[(summary["net"] == net) & (summary["optimizer"] == optimizer)]
            assert r["config_id"] == val[mine[mine["n_diverged"] == 0]["config_id"]].idxmax()
        chosen = best[best["net"] == net].set_index("optimizer")
        assert bold == [val[chosen["config_id"]].set_axis(chosen.index).idxmax()]
        assert bold != [chosen["final_test_accuracy_mean"].idxmax()]  # the test set's bold


@pytest.mark.slow
def test_report_writes_every_figure_and_the_summary(smoke_sweep, tmp_path):
    out = tmp_path / "report"
    report.main([str(smoke_sweep), "--out", str(out), "--target", str(TARGET)])
    names = sorted(p.name for p in out.iterdir())
    # The smoke sweep has no self-tuning optimizer (see test_tuned_hyperparameters_figure) and
    # one momentum.
    not_here = (
        "tuned_hyperparameters",
        "effective_step",
        "convergence_test_rmse",
        "tuning_curves",
        "tuning_gain",
    )
    drawn = ["course_net1", "course_net2", *(n for n in report.FIGURES if n not in not_here)]
    expected = sorted(f"{n}.png" for n in drawn)  # vector formats only when asked
    assert names == sorted([*expected, "summary.md"])
    for path in out.glob("*.png"):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (out / "summary.md").read_text()
    for heading in [
        "## Final metrics at the best learning rate (batch 128)",
        "## Every configuration",
        "## Time to 80 % validation accuracy",
        "## Test accuracy after",
        "## Performance profiles",
        "## Figures",
    ]:
        assert heading in text
    _, best = analysis.best_at_reference_batch(load_runs(smoke_sweep))
    assert report.markdown_table(report.final_metrics_table(best)) in text
    assert [line for line in text.splitlines() if "skipped" in line] == [
        "* skipped: test accuracy against the effective step lr / (1 - momentum): the sweep "
        "does not vary both the momentum and the learning rate",
        "* skipped: learning rate and momentum chosen by self-tuning optimizers: no optimizer "
        "in the sweep tunes its own learning rate and momentum",
        "* skipped: tuning curves: expected quality after k trials of tuning: not a tuning study "
        "(no tuning.json in the sweep folder, no tune.source)",
        "* skipped: what tuning gains: each setting after one trial and after all of them: not a "
        "tuning study (no tuning.json in the sweep folder, no tune.source)",
    ]


@pytest.mark.slow
def test_report_skips_what_the_sweep_cannot_show_and_says_why(tables, tmp_path):
    runs, curves = tables
    # One learning rate per optimizer and one batch size; no run reaches 99.9 %.
    one = runs[(runs["batch_size"] == 128) & (runs["lr"] == runs["optimizer"].map(BATCH_64_LR))]
    sweep = write_sweep(tmp_path / "one-lr", one, curves)
    result = report.write_report(sweep, tmp_path / "out", target=0.999, formats=("png",))
    assert set(result.skipped) == {
        "lr_sensitivity",
        "batch_size",
        "time_to_target_by_batch",
        "effective_step",
        "time_to_target",
        "tuned_hyperparameters",
        "tuning_curves",
        "tuning_gain",
    }
    assert "single learning rate" in result.skipped["lr_sensitivity"]
    assert "single batch size" in result.skipped["batch_size"]
    assert "99.9 %" in result.skipped["time_to_target"]
    written = sorted(p.name for p in result.written)
    assert written == [
        "convergence_test_accuracy.png",
        "convergence_time.png",
        "convergence_train_loss.png",
        "course_net1.png",
        "course_net2.png",
        "performance_profile.png",
        "quality_against_step_time.png",
        "summary.md",
    ]
    # The profiles of time to target are left out (nobody reached it), and the figure says so.
    profile = report.performance_profile_figure(analysis.profile_tables(one, curves, 0.999), 0.999)
    assert [ax.get_title().splitlines()[0] for ax in profile.get_axes()] == ["final training loss"]
    title = " ".join(profile.get_suptitle().split())  # wrapped to the figure's width
    assert "left out, no optimizer succeeded: iterations to 99.9 %" in title
    text = (tmp_path / "out" / "summary.md").read_text()
    assert "skipped: final metrics against the learning rate: the sweep has a single" in text
    assert "No run reached 99.9 % validation accuracy." in text
    with pytest.raises(report.Skipped, match="single learning rate"):
        report.lr_sensitivity_figure(one)
    assert report.show(report.lr_sensitivity_figure, one) is None


@pytest.mark.slow
@pytest.mark.filterwarnings("error::UserWarning")  # not even matplotlib's, on one-point lines
def test_a_sweep_of_diverged_runs_only_still_reports(tables, tmp_path):
    runs, curves = tables
    sweep = write_sweep(tmp_path / "diverged", runs[runs["status"] == "diverged"], curves)
    result = report.write_report(sweep, tmp_path / "out", formats=("png",))
    assert (tmp_path / "out" / "summary.md").exists()
    assert "convergence_train_loss" not in result.skipped


# A committed study whose summary.md was drawn with today's code (checked before the report became
# a package): drawing it again must give the same summary.md and the same figures.
COMMITTED = "results/course_test_selected"


@pytest.mark.slow
def test_a_committed_report_is_drawn_again_identically(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # summary.md names the sweep folder as given: results/...
    committed = Path(COMMITTED) / "report"
    result = report.write_report(COMMITTED, tmp_path, formats=("png",))
    assert (tmp_path / "summary.md").read_text() == (committed / "summary.md").read_text()
    figures = {p.stem for p in committed.iterdir() if p.suffix in (".png", ".svg")}
    assert {p.stem for p in tmp_path.glob("*.png")} == figures
    assert set(result.skipped) == set(report.FIGURES) - figures - {"convergence_test_rmse"}


@pytest.mark.slow
def test_figures_drawn_by_worker_processes_are_the_files_drawn_here(smoke_sweep, tmp_path):
    here = report.write_report(smoke_sweep, tmp_path / "here", formats=("png",), workers=0)
    workers = report.write_report(smoke_sweep, tmp_path / "workers", formats=("png",), workers=2)
    assert [p.name for p in workers.written] == [p.name for p in here.written]
    assert workers.skipped == here.skipped
    for path in here.written:
        assert (tmp_path / "workers" / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.slow
def test_the_zoos_reading_is_drawn_from_a_sweeps_tables(smoke_sweep, tmp_path):
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_reading

    runs, curves = load_runs(smoke_sweep), load_curves(smoke_sweep)
    sweep = write_sweep(tmp_path / "smoke", runs, curves)
    text = zoo_reading.main(sweep)
    assert text == (sweep / "reading.md").read_text()
    versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
    reference = versus[versus["verdict"] == "reference"].iloc[0]
    named = style.DISPLAY_NAMES[reference["optimizer"]]
    assert f"Reference: {named} (lr {reference['lr']:.3g})" in text
    assert "After Holm over " in text and "TOST at ±0.2 points" in text
    assert "Not drawn: not a tuning study" in text  # the smoke sweep tuned nothing
    assert "Refused before training" not in text  # no catalogue beside it
    # bad input: one line, exit status 2
    empty = write_sweep(tmp_path / "empty", runs[runs["optimizer"] == "x"], curves)
    for folder, message in [
        (tmp_path / "missing", "is not a folder"),
        (empty, "no runs in"),
    ]:
        result = subprocess.run(
            [sys.executable, str(REPO / "experiments" / "zoo_reading.py"), str(folder)],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr
    # an option it does not take is refused, not ignored (it had written where it was not told)
    result = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "zoo_reading.py"), str(tmp_path), "--out", "x"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "unrecognized arguments: --out x" in result.stderr


@pytest.mark.slow
def test_a_figure_saved_again_is_the_same_file(tables, tmp_path):
    # a committed report drawn again changes only where a figure did: no date, no random ids
    runs, curves = tables
    for name in ("first", "again"):
        figure = report.convergence_figure(runs, curves, "train_loss")
        for fmt in ("svg", "png"):
            style.save_figure(figure, tmp_path / f"{name}.{fmt}")
    for fmt in ("svg", "png"):
        assert (tmp_path / f"first.{fmt}").read_bytes() == (tmp_path / f"again.{fmt}").read_bytes()


@pytest.mark.slow
def test_bad_input_from_the_command_line_is_one_line_and_exit_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", "from harness.report import main; main()", str(tmp_path / "no")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert result.returncode == 2
    assert result.stderr == f"harness-report: error: no such folder: {tmp_path / 'no'}\n"
    assert result.stdout == ""


@pytest.mark.parametrize("case", ["empty", "file", "corrupt"])
def test_bad_input_is_one_line_on_stderr_and_exit_status_2(tmp_path, capsys, case):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / RUNS_TABLE).write_bytes(b"not parquet")
    args, message = {
        "empty": ([tmp_path / "empty"], "no runs in"),
        "file": ([tmp_path / "a.txt"], "not a folder"),
        "corrupt": ([tmp_path / "corrupt"], "Parquet"),
    }[case]
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(a) for a in args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("harness-report: error: "), err
    assert message in err
    assert not list(tmp_path.rglob("summary.md"))


def test_an_accuracy_target_outside_0_1_is_one_line(smoke_sweep, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(smoke_sweep), "--target", "97", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        err
        == "harness-report: error: --target is an accuracy here, a fraction in (0, 1]; got 97.0\n"
    )
    assert not (tmp_path / "out").exists()


def test_tuned_hyperparameters_figure_draws_what_yellowfin_chose(tmp_path, mnist_dir):
    from harness.training.run import execute

    with hydra_context():
        for seed in (0, 1):
            cfg = compose_config(
                [f"data.root={mnist_dir}", "model=net1", "optimizer=yellowfin", f"seed={seed}"]
                + [*SMALL_RUN, "train.progress=false", "threads=1"]
            )
            choices = {"model": "net1", "optimizer": "yellowfin", "schedule": "constant"}
            execute(cfg, tmp_path / f"yellowfin-{seed}", choices)
    runs, curves = report.load_sweep(tmp_path)
    fig = report.tuned_hyperparameters_figure(runs, curves)
    lr_ax, momentum_ax = fig.get_axes()
    assert lr_ax.get_yscale() == "log" and momentum_ax.get_ylabel() == "momentum μ"
    for ax, metric in ((lr_ax, "lr"), (momentum_ax, "momentum")):
        seeds = curves[curves["metric"] == metric].pivot_table(
            index="iteration", columns="seed", values="value"
        )
        assert seeds.shape[1] == 2 and seeds.iloc[:, 0].nunique() > 3  # tuned: it moves
        (line,) = lines_by_color(ax)["yellowfin"]
        np.testing.assert_array_equal(line.get_xdata(), seeds.index)
        np.testing.assert_allclose(line.get_ydata(), seeds.mean(axis=1))


def test_time_to_target_by_batch_is_the_fastest_learning_rate_per_batch_size(tables):
    runs, curves = tables
    ts = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, TARGET))
    fig = report.time_to_target_by_batch_figure(ts, TARGET)
    axes = np.array(fig.get_axes()).reshape(2, 2)
    table = analysis.fastest_along(ts, analysis.BATCH_KEY)
    checked = 0
    for row, measure in enumerate(["iterations_to_target", "seconds_to_target"]):
        fastest = analysis.fastest_configs(ts, measure)
        for col, net in enumerate(["net1", "net2"]):
            for optimizer, lines in lines_by_color(axes[row, col]).items():
                (line,) = [li for li in lines if li.get_marker() == "o"]
                expected = table[(table["net"] == net) & (table["optimizer"] == optimizer)]
                expected = expected[np.isfinite(expected[f"{measure}_mean"])].sort_values("x")
                x, y = xy(line)
                np.testing.assert_allclose(x, expected["x"])
                np.testing.assert_allclose(y, expected[f"{measure}_mean"])
                for batch, value in zip(x, y, strict=True):  # each its own fastest config
                    own = fastest[
                        (fastest["net"] == net)
                        & (fastest["optimizer"] == optimizer)
                        & (fastest["batch_size"] == batch)
                    ]
                    assert own[f"{measure}_mean"].item() == pytest.approx(value)
                    checked += 1
    assert checked > 4


@pytest.fixture(scope="module")
def momentum_sweep(tmp_path_factory, mnist_dir):
    """Classical and Nesterov momentum at two momentum values and two learning rates, 2 seeds."""
    from harness.training.run import execute

    folder = tmp_path_factory.mktemp("momentum")
    with hydra_context():
        for nesterov, momentum, lr, seed in itertools.product(
            ("false", "true"), (0.5, 0.9), (0.01, 0.1), (0, 1)
        ):
            overrides = [
                f"optimizer.nesterov={nesterov}",
                f"optimizer.momentum={momentum}",
                f"optimizer.lr={lr}",
                f"seed={seed}",
            ]
            cfg = compose_config(
                [f"data.root={mnist_dir}", "model=net1", "optimizer=momentum", *overrides]
                + [*SMALL_RUN, "train.progress=false", "threads=1"]
            )
            choices = {"model": "net1", "optimizer": "momentum", "schedule": "constant"}
            execute(cfg, folder / ",".join(overrides), choices)
    return folder


@pytest.mark.slow
def test_momentum_axis_and_effective_step_figures(momentum_sweep):
    runs, curves = report.load_sweep(momentum_sweep)
    assert analysis.swept_keys(runs) == ["optimizer.momentum"]  # nesterov: a label, not an axis
    figures = report.make_figures(runs, curves, 0.5)
    assert not isinstance(figures["optimizer.momentum"], report.Skipped)
    assert not isinstance(figures["effective_step"], report.Skipped)
    # Accuracy against momentum: one line per kind of momentum, each value at its best lr.
    table = analysis.axis_table(runs, analysis.MOMENTUM_KEY)
    accuracy_ax = figures["optimizer.momentum"].get_axes()[0]
    legend = [t.get_text() for t in figures["optimizer.momentum"].legends[0].get_texts()]
    assert legend == ["Momentum: nesterov=False", "Momentum: nesterov=True"]  # display names
    lines = [li for li in accuracy_ax.get_lines() if li.get_marker() in ("o", "s")]
    assert len(lines) == 2
    catalogue = [n.replace("Momentum", "momentum", 1) for n in legend]
    for line, name in zip(lines, catalogue, strict=True):
        expected = table[table["line"] == name].sort_values("x")
        assert expected["x"].tolist() == [0.5, 0.9]
        np.testing.assert_allclose(xy(line)[1], expected["final_test_accuracy_mean"] * 100)
    # Effective step: every (lr, momentum) config at lr / (1 - momentum).
    steps = analysis.effective_steps(runs)
    assert len(steps) == 8
    ax = figures["effective_step"].get_axes()[0]
    drawn = sorted(x for li in ax.get_lines() for x in li.get_xdata() if li.get_marker() != "_")
    assert drawn == pytest.approx(sorted(steps["effective_step"]))
    assert sorted(set(np.round(drawn, 6))) == [0.02, 0.1, 0.2, 1.0]


@pytest.mark.slow
def test_the_decayed_studys_reading_compares_picks_made_on_validation(smoke_sweep, tmp_path):
    """The decayed study's reading against the constant-rate one, on tables whose answers are
    known: every decayed test accuracy is the constant one plus a point (so each difference is
    +1 point and the verdicts rank alike), adam's validation lifted so that it is the decayed
    reference, and a Schedule-Free copy of adam two points below it at a constant rate."""
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_decay_reading

    runs, curves = load_runs(smoke_sweep), load_curves(smoke_sweep)
    adam = runs["optimizer"] == "adam"
    free = runs[adam & (runs["batch_size"] == 128)].assign(
        optimizer="schedulefree_adamw",
        config_id=lambda f: "sf" + f["config_id"],
        run_dir=lambda f: f["run_dir"] + "-sf",
        final_test_accuracy=lambda f: f["final_test_accuracy"] - 0.02,
    )
    free["config"] = [  # the table's config columns are read back from its config
        c.replace('"torch.optim.Adam"', '"schedulefree.AdamWScheduleFree"') for c in free["config"]
    ]
    constant = write_sweep(tmp_path / "constant", pd.concat([runs, free]), curves)
    lifted = runs.assign(
        final_test_accuracy=runs["final_test_accuracy"] + 0.01,
        final_val_accuracy=runs["final_val_accuracy"] + 0.12 * adam,
    )
    decayed = write_sweep(tmp_path / "decayed", lifted, curves)

    table = zoo_decay_reading.side_by_side(load_runs(constant), load_runs(decayed))
    assert sorted(table["optimizer"].unique()) == ["adam", "momentum", "sgd"]  # both hold them
    assert table["difference"].to_numpy() == pytest.approx(0.01)
    assert (table["decayed_lr"] == table["constant_lr"]).all()  # validation picks, not test
    upside_down = lifted.assign(final_test_accuracy=1 - lifted["final_test_accuracy"])
    inverted = zoo_decay_reading.side_by_side(load_runs(constant), upside_down)
    assert inverted["decayed_lr"].tolist() == table["decayed_lr"].tolist()

    text = zoo_decay_reading.main(decayed, constant)
    assert text == (decayed / "reading.md").read_text()
    assert (
        text.count("Rank correlation of the two verdicts (mean test accuracy): Spearman 1.00") == 2
    )
    assert "over the 2 that diverged under neither: Spearman 1.00" in text  # a seed diverged
    assert text.count("Decayed reference (the course's best on validation): Adam ") == 2
    assert "after Bonferroni over 2" in text
    named = zoo_decay_reading.display_names(report.load_sweep_runs(constant))["schedulefree_adamw"]
    assert text.count(f"Schedule-Free at a constant rate: {named} ") == 2
    assert text.count("after Holm: ") == 2 and text.count("How sure is #1: ") == 2
    assert text.count("-3.00 points") == 2  # adam - 0.02 against adam + 0.01
    assert f"![Constant against decayed, per net]({zoo_decay_reading.FIGURE})" in text
    assert (decayed / zoo_decay_reading.FIGURE).stat().st_size > 0
    figure = zoo_decay_reading.schedule_figure(table, {"net1": 0.9})
    for ax, net in zip(figure.axes, ["net1", "net2"], strict=True):
        rows = table[table["net"] == net].sort_values("decayed")
        squares = next(line for line in ax.get_lines() if line.get_marker() == "s")
        assert squares.get_xdata() == pytest.approx(100 * rows["decayed"].to_numpy())
        assert [t.get_text() for t in ax.get_yticklabels()] == rows["optimizer"].tolist()
    assert [
        line.get_xdata()[0] for line in figure.axes[0].lines if line.get_linestyle() == "--"
    ] == [90]

    def reading(*folders: Path) -> subprocess.CompletedProcess:
        script = REPO / "experiments" / "zoo_decay_reading.py"
        return subprocess.run(
            [sys.executable, str(script), *map(str, folders)], capture_output=True, text=True
        )

    renamed = write_sweep(
        tmp_path / "renamed", runs.assign(optimizer="zoo_" + runs["optimizer"]), curves
    )
    for folders, message in [
        ((tmp_path / "missing", constant), "is not a folder"),
        ((renamed, constant), "no net and optimizer in common"),
    ]:
        refused = reading(*folders)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert message in refused.stderr


def test_the_verdicts_rank_correlation_is_given_again_without_a_diverged_optimizer():
    """A divergence ranks an optimizer last under one schedule; the reading gives the
    correlation with it and, apart, over the optimizers that trained under both."""
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_decay_reading

    rows = pd.DataFrame(
        {
            "constant": [0.90, 0.91, 0.92, 0.93],
            "decayed": [0.91, 0.92, 0.93, 0.10],  # the constant best diverged when decayed
            "low": [0.0, 0.0, 0.0, np.nan],
        }
    )
    text = zoo_decay_reading.rank_agreement(rows)
    assert text.startswith(
        "Rank correlation of the two verdicts (mean test accuracy): Spearman -0.20"
    )
    assert text.endswith("; over the 3 that diverged under neither: Spearman 1.00, Kendall 1.00.")
    assert zoo_decay_reading.rank_agreement(rows.iloc[:3]).count("Spearman") == 1


def run_script(name: str, *args: Path) -> subprocess.CompletedProcess:
    script = REPO / "experiments" / f"{name}.py"
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)], capture_output=True, text=True
    )


@pytest.mark.slow
def test_the_ranges_reading_counts_the_picks_that_moved(smoke_sweep, tmp_path):
    """Phase 1 searched two ways: adam's smaller rate lifted on validation moves its pick on
    both nets (and only its); an optimizer whose trials all end alike is marked."""
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_ranges

    runs, curves = load_runs(smoke_sweep), load_curves(smoke_sweep)
    runs = runs[runs["batch_size"] == 128]
    slow_adam = (runs["optimizer"] == "adam") & (runs["lr"] == 0.001)
    moved = runs.assign(final_val_accuracy=runs["final_val_accuracy"] + 0.2 * slow_adam)
    moved.loc[moved["optimizer"] == "momentum", "final_val_accuracy"] = 0.5
    new = write_sweep(tmp_path / "new", moved, curves)
    old = write_sweep(tmp_path / "old", runs, curves)
    picks = zoo_ranges.picks(load_runs(new))
    assert picks.xs("adam", level="optimizer")["lr"].tolist() == [0.001, 0.001]
    assert picks["alike"].groupby(level="optimizer").all().to_dict() == {
        "adam": False,
        "momentum": True,
        "sgd": False,
    }
    text = zoo_ranges.main(new, old)
    assert text == (new / "ranges.md").read_text()
    table = text.split("## The picks that moved")[1]
    assert table.count("| adam |") == 2 and "| sgd |" not in table
    for net in ("net1", "net2"):
        counts = next(line for line in text.splitlines() if line.startswith(f"| {net} |"))
        moved_count, alike = int(counts.split("|")[3]), int(counts.split("|")[6])
        assert moved_count >= 1 and alike == moved_count - 1  # adam, and momentum if it moved
    refused = run_script("zoo_ranges", tmp_path / "missing", old)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "is not a folder" in refused.stderr


@pytest.mark.slow
def test_the_verdicts_changes_list_what_moved_and_the_changed_defaults(smoke_sweep, tmp_path):
    """sgd's net1 seeds lifted to 99 % turn its verdict against momentum (net1's reference)
    from not told apart to better at 95 % (not after Bonferroni: two seeds); adam, renamed
    adopt in both studies, is listed as a changed default whatever its verdict."""
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_changes

    runs, curves = load_runs(smoke_sweep), load_curves(smoke_sweep)
    runs = runs.assign(optimizer=runs["optimizer"].replace({"adam": "adopt"}))
    lifted = runs.copy()
    lifted.loc[
        (lifted["optimizer"] == "sgd") & (lifted["model"] == "net1"), "final_test_accuracy"
    ] = 0.99
    old = write_sweep(tmp_path / "old", runs, curves)
    new = write_sweep(tmp_path / "new", lifted, curves)
    before = zoo_changes.verdicts(load_runs(old)).loc["net1"]
    assert before.loc["sgd", "verdict"] == "not told apart"
    text = zoo_changes.main(new, old)
    assert text == (new / "changes.md").read_text()
    net1 = text.split("## net1")[1].split("## net2")[0]
    assert "Reference, earlier: momentum" in net1 and "now: momentum" in net1
    assert "| sgd |" in net1 and "| not told apart → better | not told apart |" in net1
    assert "| adopt (defaults) |" in net1 and "| adopt (defaults) |" in text.split("## net2")[1]
    assert "| momentum |" not in text  # the reference, unchanged: not listed
    for folders, message in [
        ((tmp_path / "missing", old), "is not a folder"),
        (
            (write_sweep(tmp_path / "none", runs[runs["optimizer"] == "adopt"], curves), old),
            "none of the course",
        ),
    ]:
        refused = run_script("zoo_changes", *folders)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert message in refused.stderr


@pytest.mark.slow
def test_the_decayed_studys_members_are_chosen_on_validation(smoke_sweep, tmp_path):
    """The zoo's best per net that join the decayed study are ranked by validation accuracy,
    whatever the test set says: with validation scores that invert the test ranking, the pick
    is the worst by test. A sweep without a validation split is refused in one line."""
    sys.path.insert(0, str(REPO / "experiments"))
    import zoo_decay_members

    runs = load_runs(smoke_sweep)
    inverted = runs.assign(final_val_accuracy=1 - runs["final_test_accuracy"])
    best = zoo_decay_members.best_by_validation(inverted, [], 1)
    picked = analysis.best_at_reference_batch(inverted)[1]
    for net, row in best.set_index("net").iterrows():
        clean = picked[(picked["net"] == net) & (picked["n_diverged"] == 0)]
        assert row["optimizer"] == clean.loc[clean["final_val_accuracy_mean"].idxmax(), "optimizer"]
        assert row["final_test_accuracy_mean"] == clean["final_test_accuracy_mean"].min()
    kept = zoo_decay_members.best_by_validation(inverted, ["sgd", "momentum"], 3)
    assert set(kept["optimizer"]) == {"adam"}  # the preset's names are not picked again
    # an optimizer with no rate (it sets its own step size) ranks first by validation, but a
    # decayed schedule has nothing of it to scale: it is left out
    rateless = inverted.assign(
        lr=inverted["lr"].where(inverted["optimizer"] != best.iloc[0]["optimizer"])
    )
    assert best.iloc[0]["optimizer"] not in set(
        zoo_decay_members.best_by_validation(rateless, [], 3)["optimizer"]
    )
    curves = load_curves(smoke_sweep)

    def members_of(folder: Path) -> subprocess.CompletedProcess:
        script = REPO / "experiments" / "zoo_decay_members.py"
        return subprocess.run(
            [sys.executable, str(script), str(folder)], capture_output=True, text=True
        )

    renamed = inverted.assign(optimizer="zoo_" + inverted["optimizer"])  # none of the preset's
    written = members_of(write_sweep(tmp_path / "renamed", renamed, curves))
    assert written.returncode == 0, written.stderr
    text = (tmp_path / "renamed" / "decay_members.md").read_text()
    assert "## net1" in text and "## net2" in text
    net1 = [line for line in text.splitlines() if line.startswith("harness-train")][:3]
    phases = ["zoo_decay_tune", "zoo_decay_shortlist", "zoo_decay"]
    for line, phase in zip(net1, phases, strict=True):  # one list, three phases, net by net
        assert line.startswith(f"harness-train -m experiment={phase} model=net1 'tune.optimizers=")
        assert line.endswith("sweep.append=true") and line.split()[4] == net1[0].split()[4]
    assert '="sgd,' in net1[0] and ",zoo_" in net1[0]
    only_preset = members_of(write_sweep(tmp_path / "inverted", inverted, curves))
    assert only_preset.returncode == 2 and "no optimizer beyond" in only_preset.stderr
    unsplit = write_sweep(tmp_path / "unsplit", runs.assign(final_val_accuracy=np.nan), curves)
    refused = members_of(unsplit)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "no validation accuracy" in refused.stderr


def test_each_nets_target_is_reached_by_its_reference_with_every_seed(tables):
    """The per-net target (validation) is the worst seed's final value of the net's reference:
    the reference reaches it on every net with every seed, and the time-to-target table says
    so; a fixed target above a net's reach would leave that net empty."""
    runs, curves = tables
    targets = analysis.reference_targets(runs, ["momentum"])
    assert set(targets) == {"net1", "net2"}
    ttt = analysis.time_to_target(runs, curves, targets)
    for net, target in targets.items():
        best = analysis.best_at_reference_batch(runs)[1]
        mine = best[(best["net"] == net) & (best["optimizer"] == "momentum")]
        chosen = analysis.rank_configs(mine).iloc[0]["config_id"]
        seeds = ttt[ttt["config_id"] == chosen]
        assert seeds["reached"].all(), net
        assert (seeds["target"] == target).all()
        final = runs.loc[runs["config_id"] == chosen, "final_val_accuracy"]
        assert target == final.min()


def test_time_to_target_bars_are_in_the_order_of_the_values_they_show(tables):
    runs, curves = tables
    targets = analysis.reference_targets(runs, ["momentum"])
    ts = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, targets))
    fig = report.time_to_target_figure(ts, targets)
    for ax in fig.get_axes():
        reached = [bar.get_width() for bar in ax.patches if bar.get_width() > 0]
        ys = [bar.get_y() for bar in ax.patches if bar.get_width() > 0]
        # bars listed top down: the fastest first
        order = np.argsort(ys)
        assert list(np.array(reached)[order]) == sorted(reached) or list(
            np.array(reached)[order]
        ) == sorted(reached, reverse=True)
        assert "target" in ax.get_title() or not ax.get_title()


def test_an_optimizer_keeps_its_look_across_the_figures_of_a_study():
    """Two figures of one study showing different settings in colour draw each optimizer in
    the same colour, line style and marker (a figure choosing its own colours gave MARS one
    colour in one figure and another in the next)."""
    study = style.Study.of(["mars", "lion", "adam", "soap", "came", "tiger"])
    frame = pd.DataFrame({"setting": ["mars", "lion", "adam", "soap", "came", "tiger"]}).assign(
        optimizer=lambda f: f["setting"]
    )
    first = style.setting_styles(frame, shown=["lion", "soap", "adam"], study=study)
    second = style.setting_styles(frame, shown=["soap", "came", "mars", "lion"], study=study)
    for optimizer in ("lion", "soap"):
        a, b = first[optimizer], second[optimizer]
        assert (a["color"], a["ls"], a["line_marker"]) == (b["color"], b["ls"], b["line_marker"])
    assert first["adam"]["color"] == style.OPTIMIZER_COLORS["adam"]
    # beyond the palette's few colours, the next line style or marker tells optimizers apart
    looks = [
        (study.look(o)["color"], study.look(o)["ls_index"], study.look(o)["line_marker"])
        for o in ("mars", "lion", "soap", "came", "tiger")
    ]
    assert len(set(looks)) == len(looks)
    assert len({colour for colour, _, _ in looks}) <= style.STUDY_HUES


def test_display_names_tell_apart_what_catalogue_names_blur():
    assert style.display_name("adam") == "Adam"
    a = style.display_name("schedulefreeradam", "pytorch_optimizer.ScheduleFreeRAdam")
    b = style.display_name("schedulefree_radam", "schedulefree.RAdamScheduleFree")
    assert a == "Schedule-Free RAdam (pytorch-optimizer)"
    assert b == "Schedule-Free RAdam (schedulefree)"
    names = {"adam": "Adam"}
    assert style.display_setting("adam: weight_decay=0.1", "adam", names) == (
        "Adam: weight_decay=0.1"
    )
    assert style.display_setting("adamax", "adam", names) == "adamax"  # a prefix is no match


def test_the_summary_captions_every_figure_under_a_short_title():
    text = report.summary.figures_markdown(
        {"time_to_target": "time_to_target.png", "course_net1": "course_net1.png"},
        {"batch_size": "a single batch size"},
        "Target: per net, the rule.",
    )
    assert "![iterations and seconds to the target accuracy](time_to_target.png)" in text
    assert "Target: per net, the rule." in text
    assert text.count("\n*") >= 2  # a caption in italics under each figure
    assert "* skipped: test accuracy and training time against the batch size" in text


def test_a_study_never_gives_two_optimizers_one_name():
    targets = {"adam_7": "torch.optim.Adam", "adam_8": "torch.optim.Adam"}
    study = style.Study.of(["adam", "adam_7", "adam_8"], targets)
    assert study.names == {
        "adam": "Adam",
        "adam_7": "Adam (torch) [adam_7]",
        "adam_8": "Adam (torch) [adam_8]",
    }
