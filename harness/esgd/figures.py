"""Figures and the Markdown summary of an ESGD study, drawn from the tables of `tables`."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator
from omegaconf import DictConfig

from harness.analysis import t_interval
from harness.esgd import tables as t
from harness.esgd.record import changed_settings
from harness.style import STYLE, display_name, optimizer_color, optimizer_order, save_figure

METHOD_COLORS = {
    "single": "#4d4d4d",
    "population": "#1f77b4",
    "esgd_no_evolution": "#ff7f0e",
    "esgd": "#d62728",
}
COMPUTE_LABEL = "compute (thousands of mini-batch steps × models)"


def _figure(n_cols: int) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=(4.4 * n_cols, 3.9), layout="constrained")
    return fig, fig.subplots(1, n_cols, squeeze=False)[0]


# A band's fill where bands overlap: faint, since three see-through fills of red, orange and
# blue blend into one brown; its edges, drawn as dotted lines in the method's colour, tell the
# bands apart where they cross.
OVERLAP_ALPHA = 0.08


def _band(ax, x, low, high, color: str) -> None:
    ax.fill_between(x, low, high, color=color, alpha=OVERLAP_ALPHA, linewidth=0)
    for edge in (low, high):
        ax.plot(x, edge, color=color, lw=0.9, ls=":")


def _plain_log_y(ax) -> None:
    """A log-scale y axis labelled 0.1, 0.2, 0.5, 1, ... as plain numbers."""
    ax.set_yscale("log")
    label = FuncFormatter(lambda v, _: f"{v:g}" if _mantissa(v) in (1, 2, 5) else "")
    ax.yaxis.set_major_formatter(label)
    ax.yaxis.set_minor_formatter(label)


def _mantissa(value: float) -> float:
    return round(value / 10 ** math.floor(math.log10(value)), 6) if value > 0 else 0.0


def fitness_figure(curves: pd.DataFrame, top_k: int) -> Figure:
    """Against compute: the best individual's fitness (line: mean over seeds) with the range of
    the top k (band: seed means of its ends), over the whole run and over its second half; and
    the best individual's test error over the second half (band: min-max over seeds)."""
    late = curves["generation"] >= curves["generation"].max() / 2
    with matplotlib.rc_context(STYLE):
        fig, (whole, zoom, error) = _figure(3)
        for method in t.methods_in(curves):
            color, label = METHOD_COLORS[method], t.LABELS[method]
            for ax, part in ((whole, curves), (zoom, curves[late])):
                c = part[part["method"] == method].groupby("generation")
                x = c["model_steps"].first() / 1000
                ax.plot(x, c["fitness"].mean(), color=color, label=label, marker=".")
                if method != "single":
                    _band(ax, x, c["topk_low"].mean(), c["topk_high"].mean(), color)
            errors = c["test_error"]
            error.plot(x, 100 * errors.mean(), color=color, marker=".")
            _band(error, x, 100 * errors.min(), 100 * errors.max(), color)
        n_seeds = curves["seed"].nunique()
        whole.set(xlabel=COMPUTE_LABEL, ylabel="fitness: held-out loss (nats; log scale)")
        whole.set_title(f"best individual; band: top {top_k}; {n_seeds} seed(s)")
        _plain_log_y(whole)
        zoom.set(xlabel=COMPUTE_LABEL, ylabel="fitness: held-out loss (nats)")
        zoom.set_title("the same, second half of the run")
        error.set(xlabel=COMPUTE_LABEL, ylabel="test error of the best individual (%)")
        error.set_title("test error; band: min-max over seeds")
        whole.set_xlim(left=0)
        handles, labels = whole.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=4, frameon=False)
    return fig


def optimizer_figure(table6: pd.DataFrame, share: pd.DataFrame) -> Figure:
    """ESGD per generation: the optimizer of the best individual after the SGD phase (counted
    over seeds), its learning rate, and the share of offspring among the selected."""
    esgd = table6[table6["method"] == "esgd"]
    with matplotlib.rc_context(STYLE):
        fig, (count_ax, lr_ax, share_ax) = _figure(3)
        counts = esgd.groupby(["generation", "optimizer"]).size().unstack(fill_value=0)
        bottom = np.zeros(len(counts))
        for name in optimizer_order(counts.columns):
            color = optimizer_color(name)
            count_ax.bar(
                counts.index, counts[name], bottom=bottom, color=color, label=display_name(name)
            )
            bottom += counts[name].to_numpy()
            rows = esgd[esgd["optimizer"] == name]
            lr_ax.scatter(rows["generation"], rows["lr"], color=color, s=18, alpha=0.8)
        count_ax.set(xlabel="generation", ylabel="seeds", title="optimizer of the best individual")
        lr_ax.set(xlabel="generation", ylabel="learning rate (log scale)")
        lr_ax.set_title("its learning rate (one point per seed)")
        _plain_log_y(lr_ax)
        count_ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        count_ax.set_axisbelow(True)
        by_generation = share.groupby("generation")
        for column, label, style in (
            ("offspring_share", "among the selected", "-"),
            ("elite_offspring_share", "among the m elite", "--"),
        ):
            v = 100 * by_generation[column].agg(["mean", "min", "max"])
            color = METHOD_COLORS["esgd"]
            share_ax.plot(v.index, v["mean"], color=color, linestyle=style, marker=".", label=label)
            _band(share_ax, v.index, v["min"], v["max"], color)
        share_ax.set(xlabel="generation", ylabel="new offspring (%)", ylim=(0, 100))
        share_ax.set_title("share of offspring; band: min-max over seeds")
        share_ax.legend(loc="upper right", frameon=False)
        for ax in (count_ax, lr_ax, share_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = count_ax.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), frameon=False)
    return fig


def variants_figure(studies: dict[str, dict[str, pd.DataFrame]]) -> Figure:
    """Studies side by side: ESGD's best fitness minus the population baseline's, per seed
    (points) with the mean ± 95 % CI; the share of new offspring among the m elite per
    generation; and the offspring's fitness at birth over their parents' (median per
    generation; 1: as good as their parents on average)."""
    with matplotlib.rc_context(STYLE):
        fig, (diff_ax, elite_ax, birth_ax) = _figure(3)
        colors = matplotlib.colormaps["tab10"].colors
        for k, (label, tables) in enumerate(studies.items()):
            color = colors[k % len(colors)]
            wide = tables[t.TABLE1].pivot(index="seed", columns="method")["fitness"]
            diff = (wide["esgd"] - wide["population"]).dropna()
            mean, half, _ = t_interval(diff.to_numpy())
            jitter = np.linspace(-0.15, 0.15, len(diff))
            diff_ax.scatter(k + jitter, diff, color=color, s=14, alpha=0.6)
            diff_ax.errorbar(k + 0.3, mean, yerr=half, color=color, marker="o", capsize=3)
            share = tables[t.OFFSPRING_SHARE].groupby("generation")["elite_offspring_share"]
            elite_ax.plot(share.mean().index, 100 * share.mean(), color=color, marker=".")
            ratio = t.birth(tables[t.INDIVIDUALS]).groupby("generation")["ratio"].median()
            birth_ax.plot(ratio.index, ratio, color=color, marker=".", label=label)
        diff_ax.axhline(0, color="black", linewidth=0.8)
        diff_ax.set_xticks(range(len(studies)), [str(k + 1) for k in range(len(studies))])
        diff_ax.set(xlabel="study (legend below)", ylabel="ESGD − population: best fitness")
        diff_ax.set_title("paired by seed; bar: mean ± 95 % CI")
        elite_ax.set(xlabel="generation", ylabel="new offspring among the m elite (%)")
        elite_ax.set(ylim=(0, 100), title="Figure 2 analogue: mean over seeds")
        birth_ax.axhline(1, color="black", linewidth=0.8)
        birth_ax.set(xlabel="generation", ylabel="child's fitness / its parents' mean")
        birth_ax.set_title("offspring at birth (median)")
        _plain_log_y(birth_ax)
        for ax in (elite_ax, birth_ax):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = birth_ax.get_legend_handles_labels()
        labels = [f"{k + 1}: {label}" for k, label in enumerate(labels)]
        fig.legend(handles, labels, loc="outside lower center", ncols=2, frameon=False)
    return fig


def make_figures(tables: dict[str, pd.DataFrame]) -> dict[str, Figure]:
    top_k = int(tables[t.TABLE1]["topk"].max())
    figures = {"fitness": fitness_figure(tables[t.CURVES], top_k)}
    if len(tables[t.OFFSPRING_SHARE]):  # ESGD ran
        figures["optimizers"] = optimizer_figure(tables[t.TABLE6], tables[t.OFFSPRING_SHARE])
    return figures


def write_figure(figure: Figure, stem: Path) -> list[Path]:
    """`figure` as `stem`.png and `stem`.svg."""
    paths = [stem.with_suffix(suffix) for suffix in (".png", ".svg")]
    for path in paths:
        save_figure(figure, path)
    return paths


def write_figures(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    return [
        p for name, fig in make_figures(tables).items() for p in write_figure(fig, out_dir / name)
    ]


def _wall_time(record: dict) -> str:
    """The wall time, and per method the median over seeds, with the device they ran on."""
    per_seed = pd.DataFrame(record["seconds"]).T
    methods = ", ".join(f"{m} {per_seed[m].median():.0f} s" for m in per_seed)
    devices = sorted(set(record.get("devices", {}).values())) or ["not recorded"]
    return (
        f"Wall time {record['wall_time_s'] / 60:.1f} min on {' and '.join(devices)} "
        f"(median per seed: {methods})."
    )


def _held_out(cfg: DictConfig) -> int:
    """How many examples fitness was measured on: the validation split, data.val_size
    (studies recorded before it existed held out esgd.fitness_size of their own)."""
    return cfg.esgd.get("fitness_size") or cfg.data.get("val_size")


def _variant(e: DictConfig) -> str:
    """The settings where a study differs from the committed ones (none: "")."""
    return "".join(f", {c}" for c in changed_settings(e))


def summary_markdown(tables: dict[str, pd.DataFrame], cfg: DictConfig, record: dict) -> str:
    """summary.md of a study: its settings, compute and wall time (`record`: esgd.json), and
    its tables."""
    e = cfg.esgd
    seeds = sorted(tables[t.TABLE1]["seed"].unique())
    compute = e.population * e.generations * e.sgd_steps
    lines = [
        f"# ESGD on {cfg.model.hidden} ({', '.join(cfg.model.activations)}) MLP",
        "",
        f"mu={e.population}, lambda={e.offspring}, m={e.elite} ({e.elite / e.population:.0%} of "
        f"mu), K={e.generations}, "
        f"K_s={e.sgd_steps} (back-off check every {e.backoff_every}), K_v={e.evolution_steps}, "
        f"rho={e.parents}, sigma={e.mutation_std}{_variant(e)}; pool: {', '.join(e.pool)}; "
        "schedules: "
        f"{', '.join(e.schedules)}; batch {cfg.train.batch_size}; fitness on "
        f"{_held_out(cfg)} held-out training examples; seeds {', '.join(map(str, seeds))}.",
        f"Every method: {compute:,} mini-batch steps × models. {_wall_time(record)}",
        "",
        "## Table 1: best individual and top-k range after the last generation",
        "",
        t.table1_markdown(tables[t.TABLE1], e.top_k),
        "",
        "![fitness](fitness.png)",
        "",
    ]
    if "esgd" not in set(tables[t.TABLE1]["method"]):
        return "\n".join(lines)
    lines += [
        "ESGD against each method, paired by seed (mean ± 95 % CI):",
        "",
        t.comparison_markdown(tables[t.TABLE1]),
        "",
        f"## Table 6: the best individual after each SGD phase (ESGD, seed {seeds[0]})",
        "",
        "Its optimizer as the paper writes it (lr: its plan's rate), and the rate its first "
        "step in the generation used (the schedule's position included).",
        "",
        t.table6_markdown(tables[t.TABLE6], seeds[0]),
        "",
        "Over seeds: the best individual's optimizer class (% of seeds) and its rates (median).",
        "",
        t.table6_summary_markdown(tables[t.TABLE6]),
        "",
        "## Figure 2: new offspring among the selected and among the m elite, per generation",
        "",
        "ESGD; mean over seeds [min, max].",
        "",
        t.offspring_share_markdown(tables[t.OFFSPRING_SHARE]),
        "",
        "![optimizers](optimizers.png)",
        "",
    ]
    return "\n".join(lines)
