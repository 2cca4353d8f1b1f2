"""The summary's tables as text: final metrics (mean ± 95 % CI, best in bold), every config,
time to target, performance profiles, each setting against the course's best; `harness.analysis`
computes them, these format them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness import analysis
from harness.style import (
    METRIC_LABELS,
    is_percent,
    lr_text,
    net_order,
    optimizer_order,
    scale,
    setting_order,
)


def _fmt(mean: float, ci: float, k: float, digits: int) -> str:
    if not np.isfinite(mean):
        return "n/a"
    text = f"{mean * k:.{digits}f}"
    if np.isfinite(ci):
        text += f" ± {ci * k:.{digits}f}"
    return text


def _metric_digits(metric: str) -> int:
    return 2 if is_percent(metric) or metric.endswith("_ms") else 4


def final_metrics_table(
    best: pd.DataFrame, metric: str | None = None, by: str | None = None
) -> pd.DataFrame:
    """Net x setting: mean ± 95 % CI over seeds of `metric` at the best learning rate (given
    in brackets), accuracies in %; the best setting of each net in bold (Markdown **), by `by`,
    by default the selection metric (final validation quality): a verdict, never read off the
    test set (every summary holds it)."""
    metric = metric or analysis.final_quality(best)
    chooser = by or analysis.selection_metric(best)
    k, digits = scale(metric), _metric_digits(metric)
    # A numeric key the sweep varies (momentum, table size) makes rows, not columns.
    swept = [key for key in analysis.swept_keys(best) if key != analysis.BATCH_KEY]
    best = best.assign(
        row=analysis.joined_labels(best["net"], best, swept),
        setting=analysis.setting_labels(best, (analysis.LR_KEY, *swept)),
    )
    rows = {}
    nets = net_order(best)
    firsts = best.drop_duplicates("row").set_index("row")  # each row's net and swept values
    ordered = sorted(
        best["row"].unique(),
        key=lambda r: (
            nets.index(firsts.at[r, "net"]),
            tuple(firsts.loc[r, swept]) if swept else (),
        ),
    )
    higher = analysis.higher_is_better(best, chooser)
    # the columns read, per row and setting (a zoo's table: 402 cells of 250-column rows)
    read = [f"{metric}_mean", f"{metric}_ci", "lr", "n_diverged", "n_seeds", f"{chooser}_mean"]
    for net in ordered:
        of_row = best[best["row"] == net]
        panel = of_row.set_index("setting")[list(dict.fromkeys(read))]
        ok = panel[panel["n_diverged"] == 0][f"{chooser}_mean"]
        winner = (ok.idxmax() if higher else ok.idxmin()) if len(ok) else None
        cells = panel.to_dict("index")
        row = {}
        for setting in setting_order(of_row):
            r = cells[setting]
            value = _fmt(r[f"{metric}_mean"], r[f"{metric}_ci"], k, digits)
            text = f"{value} (lr {lr_text(r['lr'])})"
            if r["n_diverged"]:
                text += f", {r['n_diverged']}/{r['n_seeds']} diverged"
            row[setting] = f"**{text}**" if setting == winner else text
        rows[net] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "net"
    return table[setting_order(best)].fillna("")


def configs_table(summary: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """Every config: mean ± 95 % CI over seeds of the summary metrics; ★ marks the best
    learning rate of each net and setting (the configs of `best`)."""
    chosen = set(best["config_id"])
    metrics = analysis.summary_metrics(summary)
    read = ["config_id", "net", "setting", "lr", "batch_size", "n_seeds", "n_diverged"]
    read += [f"{m}_{s}" for m in metrics for s in ("mean", "ci")]
    rows = []
    for r in summary[read].to_dict("records"):
        row = {
            "": "★" if r["config_id"] in chosen else "",
            "net": r["net"],
            "setting": r["setting"],
            "lr": lr_text(r["lr"]),
            "batch": int(r["batch_size"]),
            "seeds": int(r["n_seeds"]),
            "diverged": int(r["n_diverged"]),
        }
        for metric in metrics:
            label = METRIC_LABELS[metric]
            row[label] = _fmt(
                r[f"{metric}_mean"], r[f"{metric}_ci"], scale(metric), _metric_digits(metric)
            )
        rows.append(row)
    return pd.DataFrame(rows)


def time_to_target_table(target_summary: pd.DataFrame) -> pd.DataFrame:
    """Net x setting: iterations and training seconds to the target at the fastest learning
    rate (mean over seeds), or 'not reached'."""
    by_iter = analysis.fastest_configs(target_summary, "iterations_to_target")
    by_time = analysis.fastest_configs(target_summary, "seconds_to_target")
    read = ["lr", "n_reached", "n_seeds", "iterations_to_target_cost", "iterations_to_target_mean"]
    by_time = by_time.set_index(["net", "setting"])[["lr", "seconds_to_target_mean"]]
    times = by_time.to_dict("index")
    rows = {}
    for net in net_order(by_iter):
        rows[net] = {}
        of_net = by_iter[by_iter["net"] == net]
        panel = of_net.set_index("setting")[read].to_dict("index")
        for setting in setting_order(of_net):
            r, t = panel[setting], times[(net, setting)]
            if not np.isfinite(r["iterations_to_target_cost"]):
                text = f"not reached ({r['n_reached']}/{r['n_seeds']} seeds at best)"
            else:
                text = (
                    f"{r['iterations_to_target_mean']:,.0f} it (lr {lr_text(r['lr'])}), "
                    f"{t['seconds_to_target_mean']:.2f} s (lr {lr_text(t['lr'])})"
                )
            rows[net][setting] = text
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "net"
    return table[setting_order(by_iter)].fillna("") if len(table) else table


def profile_summary_table(
    matrix: pd.DataFrame, taus=(1.0, 1.25, 1.5, 2.0, 4.0), names: dict[str, str] | None = None
) -> pd.DataFrame:
    """Optimizer x tau: the share of problems (in %) on which the optimizer is within a factor
    tau of the best, for one cost matrix (see profile_tables), and AlgoPerf's score (the area
    under the profile up to tau 4, `analysis.profile_score`), which orders the rows (best
    first); optimizers by their display `names` where given."""
    profile = analysis.performance_profile(matrix, taus)
    table = (profile.T * 100).round(0).astype(int).astype(str) + " %"
    table.columns = [f"tau {tau:g}" for tau in taus]
    # AlgoPerf's score orders the rows: the area under the profile up to tau 4
    score = analysis.profile_score(matrix)
    table[f"score (area to tau {analysis.SCORE_TAU:g})"] = score.map(lambda v: f"{v:.3f}")
    table = table.loc[sorted(table.index, key=lambda o: (-score[o], optimizer_order([o])))]
    table.index = [(names or {}).get(o, o) for o in table.index]
    table.index.name = "optimizer"
    return table


def reference_table(
    table: pd.DataFrame, net: str, names: dict[str, str] | None = None
) -> pd.DataFrame:
    """One net's rows of `analysis.against_reference`, ranked by their gain: the final test
    quality (mean ± 95 % CI over seeds), the gain over the reference with its 95 % interval
    (Welch), the verdict, and the step time alone; settings by their display names `names`
    (setting: name; default: as the table has them)."""
    rows = table[table["net"] == net]
    names = names or {}
    reference = rows["reference"].iloc[0]
    test = next(c.removesuffix("_mean") for c in rows if c.startswith("final_test_"))
    k, digits = scale(test), _metric_digits(test)
    unit = "points, " if is_percent(test) else ""
    means, cis = rows[f"{test}_mean"], rows[f"{test}_ci"]
    gains = zip(rows["gain"], rows["gain_low"], rows["gain_high"], strict=True)
    return pd.DataFrame(
        {
            "rank": range(1, len(rows) + 1),
            "setting": [names.get(s, s) for s in rows["setting"]],
            "lr": [lr_text(lr) for lr in rows["lr"]],
            METRIC_LABELS.get(test, test): [
                _fmt(m, c, k, digits) for m, c in zip(means, cis, strict=True)
            ],
            f"gain over {names.get(reference, reference)} ({unit}95 % CI)": [
                "n/a"  # a diverged seed: no outcome to compare
                if not np.isfinite(g)
                else f"{g * k:+.{digits}f}"
                + (f" [{lo * k:+.{digits}f}, {hi * k:+.{digits}f}]" if np.isfinite(lo) else "")
                for g, lo, hi in gains
            ],
            "verdict": rows["verdict"].to_numpy(),
            "step alone (ms)": [
                f"{t * 1000:.2f}" if np.isfinite(t) else "n/a" for t in rows["step_time_alone_s"]
            ],
        }
    )
