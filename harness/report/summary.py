"""The sweep renderer: every figure the sweep supports and `summary.md` (what the sweep
holds, the tables, time to target, tuning curves, performance profiles, the figures made and
skipped)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness import analysis
from harness.markdown import markdown_table
from harness.report import drawing
from harness.report.captions import caption
from harness.report.common import Skipped, study_of, target_name, target_rule
from harness.report.figures import figure_title, time_to_target_summary
from harness.report.inputs import TuningStudy, checked_target, load_sweep, tuning_study
from harness.report.significance import significance_markdown
from harness.report.tables import (
    configs_table,
    final_metrics_table,
    profile_summary_table,
    reference_table,
    time_to_target_table,
)
from harness.results import config_keys
from harness.style import (
    COURSE_OPTIMIZERS,
    LEGIBLE_SETTINGS,
    LOSS_NAMES,
    METRIC_LABELS,
    PROFILE_LABELS,
    SPLIT_NAMES,
    natural_key,
    net_order,
    optimizer_order,
    setting_order,
)
from harness.tuning import tuning_curves

# More numeric values of a key than this are given as their range, not listed.
LISTED_VALUES = 20


@dataclass
class Report:
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # figure name -> why


def fixed_config(runs: pd.DataFrame, groups: Sequence[str] = ("train.", "data.")) -> dict:
    """The config keys of `groups` that every run shares, with their value (from `config`)."""
    if runs.empty:
        return {}
    first = json.loads(runs["config"].iloc[0])
    varying = set(config_keys(runs))
    return {k: v for k, v in first.items() if k.startswith(tuple(groups)) and k not in varying}


def tuning_markdown(tuning: TuningStudy) -> list[str]:
    """The summary's section on tuning curves: expected quality after k trials."""
    runs = tuning.runs
    table = tuning_curves.tuning_table(tuning.curves)
    if table.empty:
        return []
    nets, settings = net_order(runs.assign(net=analysis.net_labels(runs))), setting_order(table)
    table = table.sort_values(
        ["net", "setting"],
        key=lambda c: c.map((nets if c.name == "net" else settings).index),
        ignore_index=True,
    ).drop(columns="optimizer")
    return [
        "",
        "## Tuning curves",
        "",
        f"Expected final quality of the trial picked among k random trials of each setting "
        f"({', '.join(tuning.keys)} tuned; {analysis.selection_text(runs)}; "
        f"{tuning.trials_text(str(tuning.sweep))}), over every k-subset of its trials: "
        "'validation / test' (the test value is what a user with k trials would report; it "
        "chose nothing).",
        "",
        markdown_table(table, index=False),
    ]


def setting_names(frame: pd.DataFrame) -> dict[str, str]:
    """Each setting of `frame` by its optimizer's display name ('Schedule-Free RAdam
    (schedulefree): ...'), as the figures name it."""
    study = study_of(frame) if "config" in frame else None
    pairs = frame[["setting", "optimizer"]].drop_duplicates()
    if study is None:
        return dict(zip(pairs["setting"], pairs["setting"], strict=True))
    pairs = zip(pairs["setting"], pairs["optimizer"], strict=True)
    return {s: study.setting(s, o) for s, o in pairs}


def net_table_markdown(table: pd.DataFrame, names: dict[str, str] | None = None) -> str:
    """A net x setting table as Markdown, settings by their display `names` where given: a
    zoo's (more settings than LEGIBLE_SETTINGS) with the settings as rows, so that it is read
    down a page rather than across 130 columns."""
    table = table.rename(columns=names or {})
    if table.shape[1] > LEGIBLE_SETTINGS:
        table = table.T.rename_axis("setting")
    return markdown_table(table)


def quality_at_time_markdown(runs: pd.DataFrame, curves: pd.DataFrame) -> list[str]:
    """The section of the summary on quality after the same training time, and time per step,
    for the best configs at the reference batch size."""
    seconds, table = analysis.quality_at_time(runs, curves)
    _, best = analysis.best_at_reference_batch(runs)
    chosen = table[table["config_id"].isin(best["config_id"])]
    chosen = chosen.assign(  # a step in ms: 0.59, not 0.0006 s
        step_time_ms_mean=chosen["step_time_s_mean"] * 1e3,
        step_time_ms_ci=chosen["step_time_s_ci"] * 1e3,
    )
    metric = f"test_{analysis.quality(runs)}_at_time"
    chooser = f"{analysis.selection_split(curves)}_{analysis.quality(runs)}_at_time"
    budgets = ", ".join(f"{net} {seconds[net]:.3g} s" for net in net_order(chosen))
    names = setting_names(runs.assign(setting=analysis.setting_labels(runs)))
    return [
        "",
        f"## Test {analysis.quality(runs)} after the same training time",
        "",
        f"The same training time for every config of a net ({budgets}: the net's shortest run "
        "that completed; a run's time is its steps times its step timed alone, where it was), "
        "evaluations excluded: the last evaluation within it, at each setting's best "
        f"learning rate ({analysis.selection_text(runs)}); bold: the best by the same split at "
        "that time. Then the time per optimizer step (ms, the same way; bold: the fastest).",
        "",
        net_table_markdown(final_metrics_table(chosen, metric, by=chooser), names),
        "",
        net_table_markdown(final_metrics_table(chosen, "step_time_ms", by="step_time_ms"), names),
    ]


def against_the_course_markdown(runs: pd.DataFrame, best: pd.DataFrame) -> list[str]:
    """For a zoo (more optimizers than LEGIBLE_SETTINGS): per net, every setting ranked against
    the course's best (`analysis.against_reference`). Nothing for a sweep of few optimizers,
    however many settings it makes of them (table sizes, devices: other problems, not rivals),
    or none of the course's optimizers."""
    if best["optimizer"].nunique() <= LEGIBLE_SETTINGS:
        return []
    table = analysis.against_reference(runs, COURSE_OPTIMIZERS)
    if table.empty:
        return []
    names = setting_names(runs.assign(setting=analysis.setting_labels(runs)))
    parts = [
        "",
        "## Against the course's best",
        "",
        "Every setting at its learning rate chosen on validation, against the net's best of "
        "the course's optimizers (chosen the same way: the test set chooses nothing): its final "
        f"test {analysis.quality(runs)}, and the gain over that reference with its 95 % "
        "interval (Welch's t over seeds); better or worse where the interval leaves zero out. "
        "Step alone: one optimizer step of the run's model, timed alone on the machine that "
        "trained it.",
    ]
    for net in table["net"].unique():  # in the order of the best configs: by model
        rows = reference_table(table, net, names)
        parts += ["", f"### {net}", "", markdown_table(rows, index=False)]
    return parts


def summary_markdown(
    sweep: Path,
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    target: float | None,
    figures: dict[str, str] | None = None,
    skipped: dict[str, str] | None = None,
    tuning: TuningStudy | Skipped | None = None,
) -> str:
    """The Markdown summary: what the sweep holds, the final-metrics tables, every config,
    time to target (with a target), performance profiles, and the figures made and skipped."""
    summary = analysis.summarize(runs)
    batch, best = analysis.best_at_reference_batch(runs)
    q, split = analysis.quality(runs), analysis.selection_split(curves)
    n_div = int((runs["status"] == "diverged").sum())
    n_failed = int(analysis.ended_early(runs).sum()) - n_div
    seeds = summary["n_seeds"]
    study = study_of(runs)
    names = setting_names(runs.assign(setting=analysis.setting_labels(runs)))

    def values(column: str) -> str:
        items = runs[column].dropna().unique()
        numeric = pd.api.types.is_numeric_dtype(runs[column])
        items = sorted(items) if numeric else sorted(items, key=natural_key)
        if numeric and len(items) > LISTED_VALUES:  # a tuning study's random rates: the range
            return f"{len(items):,} values from {items[0]:g} to {items[-1]:g}"
        return ", ".join(f"{v:g}" if numeric else str(v) for v in items)

    seeds_text = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    varying = [c for c in analysis.CHOICE_COLUMNS if runs[c].nunique() > 1]
    # a choice that names no net or setting (the schedule) is a label key too: listed once
    varying += [k for k in analysis.label_keys(runs) if k not in varying]
    derived = [k for k in analysis.varying_keys(runs) if k not in varying]
    fixed = fixed_config(runs)

    parts = [
        f"# Sweep report: {sweep}",
        "",
        f"{len(runs)} runs ({n_div} diverged{f', {n_failed} failed' if n_failed else ''}) of "
        f"{len(summary)} configs, "
        f"{seeds_text} seed{'s' if seeds.max() > 1 else ''} each; "
        f"{', '.join(f'{n:,}' for n in sorted(runs['iterations'].unique()))} iterations.",
        "",
        f"* nets: {', '.join(net_order(summary))}",
        f"* optimizers: {', '.join(study.name(o) for o in optimizer_order(runs['optimizer']))}",
        f"* learning rates: {values('lr')}",
        f"* batch sizes: {values('batch_size')}",
        f"* schedules: {values('schedule')}",
        f"* keys that vary between configs: {', '.join(varying) or 'none'}",
        *([f"* keys set by those: {', '.join(derived)}"] if derived else []),
        f"* the same for every run: {', '.join(f'{k}={v}' for k, v in fixed.items())}",
        "",
        "Intervals are 95 % confidence intervals of the mean over seeds (Student's t); "
        f"accuracies in %, losses: {LOSS_NAMES.get(q, 'the problem loss')}.",
        "",
        f"## Final metrics at the best learning rate (batch {batch})",
        "",
        "Best learning rate per net and setting (each optimizer, and any other key that "
        f"varies): {analysis.selection_text(runs)}, mean over seeds (configs with a diverged "
        "seed last). Bold, in every table: the net's best setting by the same rule.",
    ]
    for metric in analysis.summary_metrics(runs):
        parts += [
            "",
            f"### {METRIC_LABELS[metric]}",
            "",
            net_table_markdown(final_metrics_table(best, metric), names),
        ]
    parts += against_the_course_markdown(runs, best)
    parts += significance_markdown(runs, study_of(runs))
    parts += [
        "",
        "## Every configuration",
        "",
        f"★: the best learning rate of its net and setting (at batch {batch}), "
        f"{analysis.selection_text(runs)}.",
        "",
        markdown_table(
            configs_table(summary, best).assign(
                setting=lambda t: t["setting"].map(lambda s: names.get(s, s))
            ),
            index=False,
        ),
    ]
    if target is not None:
        target_summary = time_to_target_summary(runs, curves, target, q)
        parts += [
            "",
            f"## Time to {target_name(target, q, split)}",
            "",
            target_rule(target, q, split),
            "",
            f"Iterations and training seconds (evaluations excluded) until {SPLIT_NAMES[split]} "
            f"{q} first reaches the target, at each setting's fastest learning rate, mean over "
            "seeds (the split that chooses the fastest rate is the one measured); a "
            "learning rate counts only when every seed reaches the target. Resolution: the "
            "evaluation interval.",
            "",
        ]
        if target_summary["n_reached"].sum() if len(target_summary) else 0:
            parts.append(net_table_markdown(time_to_target_table(target_summary), names))
        else:
            parts.append(f"No run reached {target_name(target, q, split)}.")
    parts += quality_at_time_markdown(runs, curves)
    if isinstance(tuning, TuningStudy):
        parts += tuning_markdown(tuning)
    costs = analysis.profile_tables(runs, curves, target)
    parts += [
        "",
        "## Performance profiles",
        "",
        "Share of problems (net and any other key that varies) on which an optimizer, at its "
        "best learning rate for the problem, is within a factor tau of the best optimizer "
        "(tau = 1: it is the best). Score: AlgoPerf's, the area under the profile from tau 1 "
        f"to {analysis.SCORE_TAU:g} over {analysis.SCORE_TAU - 1:g} (1: the best on every "
        "problem); rows by score, best first.",
    ]
    names = study_of(runs).names
    for key, matrix in costs.items():
        label = PROFILE_LABELS.get(key, key)
        if target is not None:
            label = label.replace("target", target_name(target, q, split))
        parts += ["", f"### {label}", ""]
        if len(matrix) and np.isfinite(matrix.to_numpy()).any():
            unsolved = int((~np.isfinite(matrix.to_numpy())).all(axis=1).sum())
            parts.append(markdown_table(profile_summary_table(matrix, names=names)))
            parts.append("")
            parts.append(
                f"{len(matrix)} problems"
                + (f", {unsolved} solved by no optimizer." if unsolved else ".")
            )
        else:
            parts.append("No optimizer solved any problem.")
    text = "\n".join(parts) + "\n"
    rule = "" if target is None else target_rule(target, q, split)
    return text if figures is None else text + figures_markdown(figures, skipped or {}, rule)


def figures_markdown(figures: dict[str, str], skipped: dict[str, str], rule: str = "") -> str:
    """The summary's last section: each figure (by its file) under a short title with its
    caption below it (`captions.caption`; `rule`: how the target was set), then each skipped
    one, with why."""
    parts = ["", "## Figures"]
    for name, path in figures.items():
        title = figure_title(name)
        parts += ["", f"### {title[0].upper()}{title[1:]}", "", f"![{title}]({path})", ""]
        parts.append(f"*{caption(name, rule)}*")
    if skipped:
        parts.append("")
    parts += [f"* skipped: {figure_title(name)}: {why}" for name, why in skipped.items()]
    return "\n".join(parts) + "\n"


def write_report(
    sweep: str | Path,
    out_dir: str | Path | None = None,
    target: float | None = None,
    formats: Sequence[str] = ("png",),
    workers: int | None = 0,
) -> Report:
    """Write every figure the sweep supports (as `formats`) and summary.md into `out_dir`
    (default: <sweep>/report). `target`: of time to target (default: `default_target`).
    `workers`: processes that draw the figures (default 0: this one; None: as many as
    `drawing.workers_for` the machine, what `harness-report` does); the files are the same
    either way. Workers start a fresh Python that imports the calling script again: a script
    that asks for them calls write_report under `if __name__ == "__main__":`."""
    with analysis.shared_results():  # the tables the figures and the summary share, once
        return _write_report(Path(sweep), out_dir, target, formats, workers)


def _write_report(sweep: Path, out_dir, target, formats, workers) -> Report:
    workers = drawing.workers_for() if workers is None else workers
    if workers > 1:
        drawing.start_server()  # its imports overlap the loading below
    runs, curves = load_sweep(sweep)
    # a given target is checked before anything is written; without one, each net gets its
    # own, set on validation from the reference (`analysis.reference_targets`)
    if target is None:
        target = analysis.reference_targets(runs, COURSE_OPTIMIZERS) or None
    else:
        target = checked_target(target, analysis.quality(runs))
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    tuning = tuning_study(sweep, runs)
    with drawing.drawing(runs, curves, target, tuning, out, formats, workers) as drawn_figures:
        text = summary_markdown(sweep, runs, curves, target, tuning=tuning)  # while they draw
        files = drawn_figures()
    figures = {}
    for name, made in files.items():
        if isinstance(made, str):
            report.skipped[name] = made
        else:
            report.written += made
            figures[name] = made[0].name
    q, split = analysis.quality(runs), analysis.selection_split(curves)
    rule = "" if target is None else target_rule(target, q, split)
    text += figures_markdown(figures, report.skipped, rule)
    (out / "summary.md").write_text(text)
    report.written.append(out / "summary.md")
    return report
