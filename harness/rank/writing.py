"""What a rank writes into results/rank/<name>/: ranks.csv (a row per net), README.md (the
ranks, the intervals, the verdicts, what each phase cost) and per net the course's figure with
the newcomer drawn over the field (`harness.report.course_figure`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness import analysis
from harness.markdown import markdown_table
from harness.rank.field import Ranked
from harness.report.convergence import course_figure, plotted
from harness.results import load_curves
from harness.style import save_figure

CSV = "ranks.csv"
README = "README.md"
# Each step's cost when it last trained something: a re-run that trains nothing keeps them.
COSTS = "costs.json"
NEWCOMER = {"color": "black", "lw": 2.4, "zorder": 20}


def _points(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return "n/a"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{value:+.2f}"
    return f"{value:+.2f} [{low:+.2f}, {high:+.2f}]"


def table(rows: pd.DataFrame) -> pd.DataFrame:
    """The rank table as README.md and the terminal show it."""
    return pd.DataFrame(
        {
            "net": rows["net"],
            "rank": [f"{r} of {n}" for r, n in zip(rows["rank"], rows["of"], strict=True)],
            "lr": rows["lr"].map(lambda v: "none" if pd.isna(v) else f"{v:.3g}"),
            "test accuracy (%, 95 % CI)": [
                f"{m:.2f} [{lo:.2f}, {hi:.2f}]" if math.isfinite(lo) else f"{m:.2f}"
                for m, lo, hi in zip(rows["mean"], rows["low"], rows["high"], strict=True)
            ],
            "vs reference (points)": [
                f"{ref}: {_points(g, lo, hi)}"
                for ref, g, lo, hi in zip(
                    rows["reference"],
                    rows["gain"],
                    rows["gain_low"],
                    rows["gain_high"],
                    strict=True,
                )
            ],
            "vs above": _neighbour(rows, "above"),
            "vs below": _neighbour(rows, "below"),
            "95 %": rows["verdict"],
            "Bonferroni": rows["bonferroni"].fillna("n/a"),
            "Holm": rows["holm"].fillna("n/a"),
        }
    )


def _neighbour(rows: pd.DataFrame, side: str) -> list[str]:
    return [
        f"{name}: {_points(g, lo, hi)}" if name else "(none)"
        for name, g, lo, hi in zip(
            rows[side],
            rows[f"vs_{side}"],
            rows[f"vs_{side}_low"],
            rows[f"vs_{side}_high"],
            strict=True,
        )
    ]


def figure(ranked: Ranked, paths: list[Path], net: str, name: str, out: Path) -> Path:
    """The course's figure of `net` over the field and the newcomer (training loss, test
    error; every setting at its rate chosen on validation, the field's best in colour), the
    newcomer's mean drawn again over everything in black; `out`/rank_<net>.png."""
    runs = ranked.runs[ranked.runs["model"] == net]
    test = f"test_{analysis.quality(runs)}"
    curves = load_curves(paths, runs, metrics=["train_loss", test])
    fig = course_figure(runs, curves, net)
    mine = runs[runs["config_id"] == ranked.newcomer[net]]
    configs = analysis.summarize(mine)
    axes = np.asarray(fig.axes[:4]).reshape(2, 2)
    for (full, zoom), metric in zip(axes, ("train_loss", test), strict=True):
        band = analysis.curve_bands(mine, curves, configs, metric)
        values = plotted(metric, band["mean"].to_numpy())
        for ax in (full, zoom):
            ax.plot(band["iteration"], values, **NEWCOMER, label=f"{name} (ranked)")
        _widen_to(zoom, band["iteration"].to_numpy(), values)
        full.legend(loc="upper right", fontsize=8, frameon=False, handlelength=1.8)
    path = out / f"rank_{net}.png"
    save_figure(fig, path)
    return path


def _widen_to(ax, x: np.ndarray, y: np.ndarray) -> None:
    """The zoomed panel's y range widened to the newcomer's line inside its x range, which the
    field's settings alone chose: the line drawn over the field is never cut off."""
    low, high = ax.get_xlim()
    inside = y[(x >= low) & (x <= high) & np.isfinite(y)]
    if not len(inside):
        return
    bottom, top = ax.get_ylim()
    if bottom <= inside.min() and inside.max() <= top:
        return
    lo, hi = min(bottom, inside.min()), max(top, inside.max())
    if ax.get_yscale() == "log" and lo > 0:
        ax.set_ylim(lo / 1.05, hi * 1.05)
    else:
        pad = 0.03 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)


FIELD_TEXT = {
    "constant": "the constant-rate zoo (`results/zoo`: 134 optimizers, 3 seeds)",
    "warmup_cosine": (
        "the decayed zoo (`results/zoo_decay`: warm-up then cosine to zero; the course's nine, "
        "the Schedule-Free family and each net's 15 best, 3 seeds)"
    ),
}


def _verdict_sentence(row: pd.Series) -> str:
    """One net's reading in words."""
    place = f"ranks {row['rank']} of {row['of']}"
    if row["verdict"] == "reference":
        return f"**{row['net']}**: {place}; it is the field's reference itself."
    if row["verdict"] == "diverged":
        return f"**{row['net']}**: {place}; a seed diverged, so no interval compares it."
    return (
        f"**{row['net']}**: {place}, {row['mean']:.2f} % test accuracy; against the reference "
        f"({row['reference']}) {_points(row['gain'], row['gain_low'], row['gain_high'])} points: "
        f"{row['verdict']} at 95 %, {row['bonferroni']} after Bonferroni and {row['holm']} "
        f"after Holm over the net's {row['family']} comparisons."
    )


def kept_costs(
    out: Path, costs: list[tuple[str, float, int, int]]
) -> list[tuple[str, float, int, int]]:
    """This invocation's `costs` (step, seconds, runs, trained), each phase that trained
    nothing here at its cost when it trained (kept in COSTS): the README says what ranking
    the optimizer cost, not what reading its finished runs again did."""
    path = out / COSTS
    kept = json.loads(path.read_text()) if path.exists() else {}
    shown = []
    for step, seconds, runs, trained in costs:
        before = kept.get(step)
        if runs and not trained and before:
            shown.append((f"{step} (trained before)", *before))
            continue
        if runs and trained:
            kept[step] = [seconds, runs, trained]
        shown.append((step, seconds, runs, trained))
    if kept:  # nothing trained (a field optimizer): nothing to keep
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(kept, indent=1))
        temporary.replace(path)
    return shown


def write_readme(
    out: Path,
    *,
    name: str,
    command: str,
    request,
    rows: pd.DataFrame,
    shown: pd.DataFrame,
    costs: list[tuple[str, float, int, int]],
    total: float,
    canaries,
    committed: dict[str, list[str]],
    figures: list[Path],
) -> None:
    """README.md of a ranked folder."""
    field = request.field
    lines = [f"# {name} against the field", "", f"```bash\n{command}\n```", ""]
    if request.smoke:
        lines += [
            "**Smoke run** (`rank.smoke=true`): trained on 1,000 images for 30 and 60 "
            "iterations per phase, ranked against the committed field, which trained on 50,000 "
            "for 2,000 and 20,000. Its numbers and rank compare with nothing: they show that the "
            "pipeline runs from the phases to this page.",
            "",
        ]
    lines += [
        f"Ranked against {FIELD_TEXT[field.schedule]} by the zoo's own protocol for this "
        f"optimizer alone (`conf/experiment/{field.presets[0]}.yaml`, "
        f"`{field.presets[1]}.yaml`, `{field.presets[2]}.yaml`): 10 random rates from its own "
        "range at 2,000 iterations, a pick at the edge searched again beyond it, its 3 best at "
        "20,000, the best of those on validation with seeds 1-3. Every setting is at its rate "
        "chosen on validation, ranked by its mean final test accuracy as the zoo's reading "
        "ranks (its gain over the reference; a setting with a diverged seed last). The "
        "reference is the best of the course's nine on validation; intervals are Welch's t "
        "over seeds at 95 % (points of test accuracy); Bonferroni and Holm count the net's "
        "comparisons, the newcomer's among them.",
        "",
    ]
    if committed:
        lines += [
            f"The field already holds this optimizer's configs on {', '.join(committed)}: "
            "its committed runs are read, nothing trained there.",
            "",
        ]
    lines += ["## Its rank per net", "", markdown_table(shown, index=False), ""]
    for _, row in rows.iterrows():
        lines += [_verdict_sentence(row), ""]
    lines += [
        "`ranks.csv` holds the same per net (mean, low, high: test accuracy in %, its 95 % "
        "interval over seeds; gain and vs_above, vs_below with their bounds in points).",
        "",
        "## What it cost",
        "",
        markdown_table(
            pd.DataFrame(
                {
                    "step": [c[0] for c in costs] + ["total"],
                    "wall time (s)": [f"{c[1]:.0f}" for c in costs] + [f"{total:.0f}"],
                    "runs": [str(c[2]) if c[2] else "" for c in costs] + [""],
                    "trained": [str(c[3]) if c[2] else "" for c in costs] + [""],
                }
            ),
            index=False,
        ),
        "",
        "Runs not trained were copied from the field's phase (`sweep.reuse`: the same "
        "config finished there) or had finished in this folder before.",
        "",
    ]
    if canaries is not None:
        state = (
            "came out as committed"
            if not canaries.drift
            else "differ from the committed runs (`rank.allow_drift=true` ranked anyway): "
            + "; ".join(canaries.differing)
        )
        lines += [
            "## Canaries",
            "",
            f"{canaries.runs} phase-1 runs of the field trained again here ({canaries.seconds:.0f} "
            f"s) {state}; the largest difference of a final metric: {canaries.largest:.2g}. "
            f"{canaries.versions[0].upper()}{canaries.versions[1:]}.",
            "",
        ]
    lines += ["## The course's figure, the newcomer in black", ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    (out / README).write_text("\n".join(lines) + "\n")
