"""Summaries of a sweep's results: pure pandas, no plotting.

Every function takes the tables of `harness.results` (`load_runs`: one row per run,
`load_curves`: long-format curves) or the output of another function here, and returns a new
DataFrame. The figures of `harness.report` draw exactly these tables, and so do the notebooks.

A *config* is everything in a run's resolved config that changes its result, except the seed:
runs are seeds of one config exactly when they share `config_id`, and every statistic over
seeds is per config. Nothing here groups by a hand-picked list of columns: where a table groups
configs (the best learning rate of each optimizer, the fastest config to a target), the groups
are configs with the *tuned* keys left out, so any other key that varies (activations, weight
decay, betas, schedule settings, data sizes, ...) keeps its configs apart.

Labels: a *net* is the model with its hidden layers where they differ between runs of one
model choice (the course's net1-3 need none); a *setting* is the optimizer with every other key
that tells configs apart beyond their choice names (activations, weight decay, ...), the
learning rate left out (it is shown on its own). The keys that do not vary are stated once,
by `fixed_settings`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from harness.results import ID_COLUMNS, config_keys

# Short columns that name a config (kept beside the dotted config-key columns).
LABEL_COLUMNS = [c for c in ID_COLUMNS if c != "seed"]
# Config groups whose option name is a column: a key of the group that is the same for every
# run of one option (optimizer.betas for adam) is told by the name and not repeated in labels.
CHOICE_COLUMNS = ("model", "optimizer", "schedule")
LR_KEY, MOMENTUM_KEY, BATCH_KEY, HIDDEN_KEY = (
    "optimizer.lr",
    "optimizer.momentum",
    "train.batch_size",
    "model.hidden",
)
# The keys that make a net (a panel of the figures): its shape.
NET_KEYS = (HIDDEN_KEY,)
# Short column of a config key, where there is one: also its name in labels.
SHORT_COLUMNS = {
    LR_KEY: "lr",
    MOMENTUM_KEY: "momentum",
    BATCH_KEY: "batch_size",
    HIDDEN_KEY: "hidden",
}
# Per-run metrics summarised over seeds by default, for a problem whose quality metric is
# accuracy (the course's); `summary_metrics` gives them for any problem.
SUMMARY_METRICS = ("final_test_accuracy", "final_train_loss", "best_test_accuracy")
# Which way is better for a metric (True: higher); metrics not listed: lower is better.
HIGHER_IS_BETTER = {
    "final_test_accuracy": True,
    "best_test_accuracy": True,
    "test_accuracy": True,
    "train_accuracy": True,
}
# The course's mini-batch: the reference batch size of figures over iterations when present.
COURSE_BATCH_SIZE = 128


def higher_is_better(metric: str) -> bool:
    return HIGHER_IS_BETTER.get(metric, "accuracy" in metric)


def quality(frame: pd.DataFrame) -> str:
    """The quality metric of the runs in `frame`, as their problem names it (accuracy, rmse);
    runs recorded before problems named it are classification runs: accuracy."""
    if "quality" not in frame or frame["quality"].isna().all():
        return "accuracy"
    names = frame["quality"].dropna().unique()
    if len(names) > 1:
        raise ValueError(f"runs of problems with different quality metrics: {', '.join(names)}")
    return str(names[0])


def final_quality(frame: pd.DataFrame) -> str:
    """The column that reports configs: final_test_<quality>."""
    return f"final_test_{quality(frame)}"


def has_validation(frame: pd.DataFrame) -> bool:
    """Whether the runs of `frame` (a runs table, a summary or curves) were evaluated on a
    validation split held out of their training data."""
    q = quality(frame)
    if "metric" in frame:
        return bool((frame["metric"] == f"val_{q}").any())
    column = next((c for c in (f"final_val_{q}", f"final_val_{q}_mean") if c in frame), None)
    return column is not None and bool(frame[column].notna().any())


def selection_split(frame: pd.DataFrame) -> str:
    """The split every choice is made on: "val" when the runs have a validation split, else
    "test" (runs recorded without one: their choices see the test set, and say so)."""
    return "val" if has_validation(frame) else "test"


def selection_metric(frame: pd.DataFrame) -> str:
    """The column that picks configs (a rate, a best config, a star): final_val_<quality>, or
    final_test_<quality> for runs without a validation split."""
    return f"final_{selection_split(frame)}_{quality(frame)}"


def selection_text(frame: pd.DataFrame) -> str:
    """How choices were made, for headers and titles: 'chosen by final validation accuracy'."""
    split = selection_split(frame)
    name = {"val": "validation", "test": "test"}[split]
    text = f"chosen by final {name} {quality(frame)}"
    return text if split == "val" else f"{text} (no validation split: the test set chose)"


def summary_metrics(frame: pd.DataFrame) -> tuple[str, ...]:
    """The per-run metrics summarised over seeds: final test quality, final training loss, best
    test quality, and the selection metric (final validation quality) when the runs have one."""
    q = quality(frame)
    metrics = (f"final_test_{q}", "final_train_loss", f"best_test_{q}")
    selection = selection_metric(frame)
    return metrics if selection in metrics else (*metrics, selection)


# --- identity: keys, groups and labels --------------------------------------------------------


def _matches(key: str, names: Iterable[str]) -> bool:
    """Whether dotted `key` is one of `names` (a name ending in '.' stands for a whole group)."""
    return any(key == n or (n.endswith(".") and key.startswith(n)) for n in names)


def _as_text(column: pd.Series) -> pd.Series:
    # NaN (a key some runs lack) becomes 'nan': a value of its own, never a dropped group.
    return column.astype(object).map(_value_text)


def _value_text(value) -> str:
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:g}"
    return str(value)


def config_key(frame: pd.DataFrame, without: Sequence[str] = ()) -> pd.Series:
    """One text key per row: its config with the keys `without` left out (dotted names; 'x.'
    leaves out the group x). Rows with equal keys differ only in those keys (and the seed)."""
    keys = [k for k in config_keys(frame) if not _matches(k, without)]
    if not keys:
        return pd.Series("", index=frame.index, dtype=object)
    text = pd.concat([_as_text(frame[k]).radd(f"{k}=") for k in keys], axis=1)
    return text.agg("|".join, axis=1)


def label_keys(frame: pd.DataFrame, without: Sequence[str] = ()) -> list[str]:
    """The config keys that tell the rows of `frame` apart beyond their choice names (see
    `varying_keys`), less those whose value follows from the others."""
    found = varying_keys(frame, without)
    # What else sets a key's value: the choice names, the net, and the keys left out here (the
    # axis a figure runs along), but not the learning rate, which follows from the others.
    given = [
        c
        for c in frame.columns
        if c in (*CHOICE_COLUMNS, *NET_KEYS) or (c != LR_KEY and "." in c and _matches(c, without))
    ]
    return _without_derived(frame, found, given)


def varying_keys(frame: pd.DataFrame, without: Sequence[str] = ()) -> list[str]:
    """The config keys (not `without`) that differ between rows of one model / optimizer /
    schedule option (or between any rows, for keys outside those groups)."""
    found = []
    for key in config_keys(frame):
        if _matches(key, without):
            continue
        group = key.split(".", 1)[0]
        values = _as_text(frame[key])
        if group in CHOICE_COLUMNS and group in frame:
            differs = values.groupby(_as_text(frame[group])).nunique().max() > 1
        else:
            differs = values.nunique() > 1
        if differs:
            found.append(key)
    return found


def _without_derived(frame: pd.DataFrame, keys: list[str], given: Sequence[str]) -> list[str]:
    """`keys` less those whose value follows from the others and the `given` columns: a rate
    looked up for a table optimizer, the epochs a budget implies, an evaluation interval looked
    up per batch size. They are attributes of the keys that set them, not settings or axes of
    their own. Numeric keys go first, so that of two keys that move in lockstep the named
    choice stays."""
    given = [c for c in given if c not in keys]
    kept = list(keys)
    for key in sorted(keys, key=lambda k: not is_numeric_key(frame, k)):
        others = [*given, *(k for k in kept if k != key)]
        if not others:
            break
        text = pd.DataFrame({k: _as_text(frame[k]) for k in (*others, key)}).drop_duplicates()
        if not text.duplicated(subset=others).any():  # one value of `key` per combination
            kept.remove(key)
    return kept


def _describe(frame: pd.DataFrame, keys: Sequence[str], strip: str) -> pd.Series:
    """'key=value, key=value' per row, `strip` removed from the front of key names."""
    if not keys:
        return pd.Series("", index=frame.index, dtype=object)
    parts = [
        _as_text(frame[k]).radd(f"{SHORT_COLUMNS.get(k, k.removeprefix(strip))}=") for k in keys
    ]
    return pd.concat(parts, axis=1).agg(", ".join, axis=1)


def _joined(name: pd.Series, details: pd.Series, separator: str) -> pd.Series:
    return name.where(details == "", name + separator + details)


def joined_labels(name: pd.Series, frame: pd.DataFrame, keys: Sequence[str]) -> pd.Series:
    """`name` with the values of `keys` in `frame`: 'net2, momentum=0.9'."""
    return _joined(name.astype(str), _describe(frame, keys, "optimizer."), ", ")


def net_labels(frame: pd.DataFrame) -> pd.Series:
    """A net's name: the model, with its hidden layers when they differ between runs of that
    model ('mlp: hidden=[100, 100]'). Other model keys (activations, initialisation) are part
    of the setting: curves of one shape of net are compared in one panel."""
    keys = [k for k in label_keys(frame) if k in NET_KEYS]
    return _joined(frame["model"].astype(str), _describe(frame, keys, "model."), ": ")


def setting_labels(frame: pd.DataFrame, without: Sequence[str] = (LR_KEY,)) -> pd.Series:
    """A setting's name: the optimizer with every other key that tells configs apart (not the
    net's keys, nor `without`): 'adam: weight_decay=0.1, model.activations=[relu]'."""
    keys = label_keys(frame, without=(*NET_KEYS, *without))
    optimizer_keys = [k for k in keys if k.startswith("optimizer.")]
    other = [k for k in keys if not k.startswith("optimizer.")]
    details = _describe(frame, [*optimizer_keys, *other], "optimizer.")
    return _joined(frame["optimizer"].astype(str), details, ": ")


def with_net(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `net` and `setting` columns (see net_labels, setting_labels)."""
    if not len(frame):
        return frame.assign(net=[], setting=[])
    return frame.assign(net=net_labels(frame), setting=setting_labels(frame))


def fixed_settings(frame: pd.DataFrame) -> dict[str, object]:
    """The short settings that every row of `frame` shares (schedule, batch size, iterations,
    ...): what titles and headers state once instead of repeating it per line."""
    fixed = {}
    for column in ("schedule", "batch_size", "iterations", "momentum"):
        if column in frame and frame[column].nunique(dropna=False) == 1:
            value = frame[column].iloc[0]
            if not (isinstance(value, float) and math.isnan(value)):
                fixed[column] = value
    return fixed


def t_interval(values: Iterable[float], confidence: float = 0.95) -> tuple[float, float, int]:
    """Mean and half-width of the `confidence` interval of the mean (Student's t), and n.

    The half-width is NaN for fewer than two values (one seed says nothing about spread)."""
    x = np.asarray(list(values), dtype=float)
    x = x[~np.isnan(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(x.mean())
    if n < 2 or not np.isfinite(x).all():
        return mean, math.nan, n
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return mean, float(half), n


def _aggregate(frame: pd.DataFrame, metrics: Sequence[str], confidence: float) -> pd.DataFrame:
    """Per config (`config_id`): its first row's identifying columns, the number of seeds, and
    per metric the mean, CI half-width, min, max and count over its runs."""
    labels = [c for c in [*LABEL_COLUMNS, *config_keys(frame)] if c in frame]
    rows = []
    for config_id, group in frame.groupby("config_id", sort=False):
        row = {"config_id": config_id, **group.iloc[0][labels].to_dict()}
        row["n_seeds"] = group["seed"].nunique()
        for metric in metrics:
            values = group[metric].astype(float)
            mean, half, n = t_interval(values, confidence)
            row |= {
                f"{metric}_mean": mean,
                f"{metric}_ci": half,
                f"{metric}_min": values.min(),
                f"{metric}_max": values.max(),
                f"{metric}_n": n,
            }
        rows.append(row)
    table = pd.DataFrame(rows)
    return with_net(table).sort_values([*LABEL_COLUMNS, "setting"], ignore_index=True)


def _stat_cols(metrics: Sequence[str], stats_: Sequence[str] = ("mean", "ci", "min", "max")):
    return [f"{m}_{s}" for m in metrics for s in stats_]


def _summary_columns(frame: pd.DataFrame, counts: Sequence[str], stat_cols: Sequence[str]):
    return [
        *LABEL_COLUMNS,
        "net",
        "setting",
        *config_keys(frame),
        "config_id",
        "n_seeds",
        *counts,
        *stat_cols,
    ]


def summarize(
    runs: pd.DataFrame,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per config: the number of seeds and of diverged runs, and per metric its mean
    over seeds, the half-width of the `confidence` interval of that mean (t distribution;
    `<metric>_ci`, NaN with one seed), min and max over seeds.

    A diverged run counts with its last evaluated metrics; `n_diverged` says how many there are.
    """
    if runs.empty:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "net", "setting", "config_id", "n_seeds"])
    metrics = metrics or summary_metrics(runs)
    table = _aggregate(runs, metrics, confidence)
    diverged = runs["status"].eq("diverged").groupby(runs["config_id"]).sum()
    table["n_diverged"] = table["config_id"].map(diverged).astype(int)
    table["quality"] = quality(runs)
    return table[[*_summary_columns(table, ["n_diverged"], _stat_cols(metrics)), "quality"]]


def rank_configs(
    summary: pd.DataFrame, by: str | None = None, tune: Sequence[str] = (LR_KEY,)
) -> pd.DataFrame:
    """`summary` in the order the selection rule prefers its configs, with `_group`, the config
    with the `tune` keys left out: within a group, configs without a diverged seed first, then
    by the mean of `by` (default: the selection metric, final validation quality), then the
    lower mean final train loss, then the smaller learning rate. The first of each group is
    its best config (`best_configs`); the order is what tuning curves pick from."""
    by = by or selection_metric(summary)
    ranked = summary.assign(
        _diverged=summary["n_diverged"] > 0,
        _score=(summary[f"{by}_mean"] * (-1 if higher_is_better(by) else 1)).fillna(math.inf),
        _group=config_key(summary, without=tune),
    )
    order = ["_diverged", "_score"]
    if "final_train_loss_mean" in ranked:
        order.append("final_train_loss_mean")
    ranked = ranked.sort_values([*order, "lr"], kind="stable")
    return ranked.drop(columns=["_diverged", "_score"])


def best_configs(
    summary: pd.DataFrame,
    by: str | None = None,
    tune: Sequence[str] = (LR_KEY,),
) -> pd.DataFrame:
    """The best config (by the mean of `by` over seeds; default: the selection metric, final
    validation quality) among those that differ only in the `tune` keys: by default the best
    learning rate of every other config (each optimizer, net, and any other key that varies).
    Configs with a diverged seed rank below every config without one; ties go to the lower mean
    final train loss, then the smaller learning rate (`rank_configs`)."""
    if summary.empty:
        return summary.copy()
    best = rank_configs(summary, by, tune).groupby("_group", sort=False).head(1)
    best = best.drop(columns=["_group"])
    return best.sort_values([*LABEL_COLUMNS, "setting"], ignore_index=True)


def reference_batch_size(runs: pd.DataFrame) -> int:
    """The batch size of figures over iterations: the course's 128 when the sweep has it, else
    the batch size with the most runs (the smallest among equals)."""
    sizes = runs["batch_size"].value_counts()
    if COURSE_BATCH_SIZE in sizes.index:
        return COURSE_BATCH_SIZE
    return int(sizes[sizes == sizes.max()].index.min())


def best_at_reference_batch(
    runs: pd.DataFrame, by: str | None = None, batch_size: int | None = None
) -> tuple[int, pd.DataFrame]:
    """(batch size, best configs): the best learning rate of every other config at the reference
    batch size (or `batch_size`), as the convergence figures, the final-metrics tables and the
    notebooks show them."""
    batch_size = batch_size or reference_batch_size(runs)
    return batch_size, lr_table(runs, batch_size, by)[1]


def runs_of(runs: pd.DataFrame, configs: pd.DataFrame) -> pd.DataFrame:
    """The runs (all seeds) of the configs listed in `configs`."""
    return runs[runs["config_id"].isin(configs["config_id"])]


def curve_bands(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    configs: pd.DataFrame,
    metric: str,
    x: str = "iteration",
) -> pd.DataFrame:
    """Per config of `configs` and per iteration, the mean, min and max over seeds of `metric`
    (and the mean of `x`, for x = epoch or time_s). Only iterations that every seed of the
    config reached are kept: a diverged seed ends its config's curve where it stopped.

    Columns: the config's columns (those of `configs`, without statistics), x, mean, min, max,
    n_seeds, n_diverged, diverged_at (the iteration where the first seed diverged, NaN if none
    did).
    """
    labels = [c for c in [*LABEL_COLUMNS, "net", "setting", *config_keys(configs)] if c in configs]
    columns = [*labels, "config_id", x, "mean", "min", "max", "n_seeds", "n_diverged"]
    chosen = runs_of(runs, configs)
    if chosen.empty:
        return pd.DataFrame(columns=[*columns, "diverged_at"])
    selected = curves[(curves["metric"] == metric) & curves["run_dir"].isin(chosen["run_dir"])]
    frames = []
    for config_id, group in chosen.groupby("config_id", sort=False):
        points = selected[selected["config_id"] == config_id]
        per_iter = points.groupby("iteration").agg(
            x_mean=(x, "mean"),
            mean=("value", "mean"),
            min=("value", "min"),
            max=("value", "max"),
            count=("run_dir", "nunique"),
        )
        per_iter = per_iter[per_iter["count"] == len(group)].reset_index()
        diverged = group.loc[group["status"] == "diverged", "diverged_at"]
        config = configs.loc[configs["config_id"] == config_id, labels].iloc[0]
        frames.append(
            pd.DataFrame(
                {
                    **config.to_dict(),
                    "config_id": config_id,
                    x: per_iter["x_mean"] if x != "iteration" else per_iter["iteration"],
                    "mean": per_iter["mean"],
                    "min": per_iter["min"],
                    "max": per_iter["max"],
                    "n_seeds": len(group),
                    "n_diverged": len(diverged),
                    "diverged_at": diverged.min() if len(diverged) else math.nan,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[[*columns, "diverged_at"]]


def time_to_target(
    curves: pd.DataFrame, target: float = 0.97, metric: str | None = None
) -> pd.DataFrame:
    """Per run: the first evaluation at which `metric` (default: the validation quality, or the
    test quality for runs without a validation split) reaches `target` (>= for accuracies, <=
    for losses): its iteration, epoch and optimisation seconds (`time_s`, evaluations
    excluded); NaN and reached=False when the run never gets there. The fastest configs are
    picked on this table, so it is measured on the split that chooses.

    Resolution is the sweep's evaluation interval (train.eval_every)."""
    metric = metric or f"{selection_split(curves)}_{quality(curves)}"
    columns = [*ID_COLUMNS, *config_keys(curves), "config_id", "status", "run_dir"]
    columns += ["quality"] if "quality" in curves else []
    points = curves[curves["metric"] == metric]
    per_run = curves.drop_duplicates("run_dir")[columns].reset_index(drop=True)
    reached = points["value"] >= target if higher_is_better(metric) else points["value"] <= target
    first = (
        points[reached]
        .sort_values("iteration")
        .groupby("run_dir", sort=False)
        .first()[["iteration", "epoch", "time_s"]]
        .rename(
            columns={
                "iteration": "iterations_to_target",
                "epoch": "epochs_to_target",
                "time_s": "seconds_to_target",
            }
        )
    )
    table = per_run.merge(first, left_on="run_dir", right_index=True, how="left")
    table["reached"] = table["iterations_to_target"].notna()
    table["target"] = target
    table["metric"] = metric
    return table.sort_values([*ID_COLUMNS, "run_dir"], ignore_index=True)


TARGET_MEASURES = ("iterations_to_target", "epochs_to_target", "seconds_to_target")


def summarize_time_to_target(ttt: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per config: how many seeds reached the target, and per measure (iterations, epochs,
    seconds to target) the mean and CI half-width over the seeds that reached it, and
    `<measure>_cost`: that mean when every seed reached the target, else infinity (the cost
    used by performance profiles: a config that sometimes fails is not a solution)."""
    if ttt.empty:
        return pd.DataFrame(columns=[*LABEL_COLUMNS, "net", "setting", "n_seeds", "n_reached"])
    table = _aggregate(ttt, TARGET_MEASURES, confidence)
    reached = ttt["reached"].groupby(ttt["config_id"]).sum()
    table["n_reached"] = table["config_id"].map(reached).astype(int)
    all_reached = table["n_reached"] == table["n_seeds"]
    for measure in TARGET_MEASURES:
        table[f"{measure}_cost"] = table[f"{measure}_mean"].where(all_reached, math.inf)
    stat_cols = _stat_cols(TARGET_MEASURES, ("mean", "ci", "min", "max", "cost"))
    table["quality"] = quality(ttt)
    # the metric the target was measured on (tables made before runs had a validation split
    # may not say: then it was the test quality)
    table["metric"] = ttt["metric"].iloc[0] if "metric" in ttt else f"test_{quality(ttt)}"
    return table[[*_summary_columns(table, ["n_reached"], stat_cols), "quality", "metric"]]


def fastest_configs(target_summary: pd.DataFrame, measure: str) -> pd.DataFrame:
    """Per config with the learning rate left out (each optimizer, net and other setting), the
    learning rate that reaches the target fastest in `measure` (iterations_to_target,
    seconds_to_target, ...) with every seed; a setting that never does keeps its learning rate
    with the most seeds reaching it, and an infinite cost."""
    if target_summary.empty:
        return target_summary.copy()
    ranked = target_summary.assign(
        _cost=target_summary[f"{measure}_cost"], _group=config_key(target_summary, (LR_KEY,))
    ).sort_values(["_cost", "n_reached", "lr"], ascending=[True, False, True], kind="stable")
    best = ranked.groupby("_group", sort=False).head(1)
    return best.drop(columns=["_cost", "_group"]).sort_values(
        ["net", "optimizer", "setting"], ignore_index=True
    )


# --- tables the figures draw -------------------------------------------------------------------


def lr_table(
    runs: pd.DataFrame, batch_size: int, by: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """At `batch_size`: the summary of every config (one point per learning rate of each
    setting), and the best learning rate of each setting (by `by`). Returns (per_lr, best)."""
    summary = summarize(runs[runs["batch_size"] == batch_size])
    return summary, best_configs(summary, by=by)


def key_values(frame: pd.DataFrame, key: str) -> pd.Series:
    """The values of config key `key` in `frame` (its dotted column, or its short column when the
    key is the same for every loaded run)."""
    return frame[key] if key in frame else frame[SHORT_COLUMNS[key]]


def swept_keys(runs: pd.DataFrame) -> list[str]:
    """The numeric config keys a sweep varies beyond its choice names, other than the learning
    rate and the net's shape: the axes worth a figure of their own (momentum, weight decay,
    batch size, ...)."""
    return [k for k in label_keys(runs, without=(LR_KEY, *NET_KEYS)) if is_numeric_key(runs, k)]


def is_numeric_key(frame: pd.DataFrame, key: str) -> bool:
    """Whether config key `key` takes numbers (not flags) in `frame`: an axis, not a name."""
    dtype = frame[key].dropna().infer_objects().dtype
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def along(table: pd.DataFrame, key: str) -> pd.DataFrame:
    """`table` (one row per config) with `x`, the value of `key`, and `line`, the setting
    without `key` and the learning rate: the configs one line of a figure along `key` joins."""
    return table.assign(x=key_values(table, key), line=setting_labels(table, (LR_KEY, key)))


def axis_table(
    runs: pd.DataFrame,
    key: str,
    by: str | None = None,
    metrics: Sequence[str] = (),
) -> pd.DataFrame:
    """Per net, setting and value of the config key `key` (batch size, momentum, ...): the
    summary row of the best learning rate there (by `by`), `along` that key, with the summary
    metrics, the training time and the time per step summarised."""
    metrics = (*summary_metrics(runs), "train_time_s", "step_time_s", *metrics)
    return along(best_configs(summarize(runs, metrics=metrics), by=by), key)


def batch_size_table(runs: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Per net, setting and batch size: the summary row of the best learning rate there (with
    the training time summarised too)."""
    return axis_table(runs, BATCH_KEY, by)


def fastest_along(
    target_summary: pd.DataFrame, key: str, measures: Sequence[str] = TARGET_MEASURES
) -> pd.DataFrame:
    """Per net, setting and value of `key`: each measure to target (iterations, seconds, ...)
    at its own fastest learning rate, `along` that key; a measure's mean is infinite where no
    learning rate got every seed to the target."""
    columns = []
    for measure in measures:
        fastest = along(fastest_configs(target_summary, measure), key)
        reached = np.isfinite(fastest[f"{measure}_cost"].astype(float))
        fastest[f"{measure}_mean"] = fastest[f"{measure}_mean"].where(reached, math.inf)
        stats_ = [f"{measure}_{s}" for s in ("mean", "min", "max")]
        columns.append(fastest.set_index(["net", "line", "x"])[stats_])
    base = along(fastest_configs(target_summary, measures[0]), key)
    base = base.drop(columns=[c for c in base if c.startswith(tuple(measures))])
    return base.join(pd.concat(columns, axis=1), on=["net", "line", "x"])


def effective_steps(runs: pd.DataFrame) -> pd.DataFrame:
    """Every config of a momentum sweep with its effective step size lr / (1 - momentum), the
    step a constant gradient settles to with heavy-ball or Nesterov momentum; `line`: the
    setting without learning rate and momentum (classical or Nesterov, ...)."""
    summary = summarize(runs[runs["momentum"].notna()])
    return summary.assign(
        effective_step=summary["lr"] / (1 - summary["momentum"]),
        line=setting_labels(summary, (LR_KEY, MOMENTUM_KEY)),
    )


def profile_costs(table: pd.DataFrame, cost: str, solver: str = "optimizer") -> pd.DataFrame:
    """The cost matrix of a performance profile: one row per problem, one column per solver
    (default: the optimizer). A problem is a config with the optimizer's keys left out (the
    net, the batch size and whatever else varies); each solver is tuned per problem (the minimum
    of `cost` over its own settings: learning rate, momentum, ...). Lower is better; inf:
    failed; a solver not run on a problem counts as failed. For a metric where higher is
    better, pass a cost column that turns it around (for example the error rate 1 - accuracy).

    The index names each problem: the net, then the other keys that vary between problems."""
    problem_keys = label_keys(table, without=("optimizer.", *NET_KEYS))
    problems = _joined(net_labels(table), _describe(table, problem_keys, ""), ", ")
    costs = table.assign(_cost=table[cost].astype(float).fillna(math.inf), problem=problems)
    matrix = costs.pivot_table(
        index="problem", columns=solver, values="_cost", aggfunc="min", dropna=False
    )
    matrix = matrix.dropna(how="all").fillna(math.inf)
    matrix.columns.name = solver
    return matrix


def profile_tables(
    runs: pd.DataFrame, curves: pd.DataFrame, target: float | None
) -> dict[str, pd.DataFrame]:
    """Cost matrices (problems x optimizers) of the performance profiles: iterations and
    seconds to `target` test quality (without a target: none), and final training loss; each
    optimizer at its best setting per problem. A config with a seed that diverged or did not
    reach the target counts as failed."""
    summary = summarize(runs)
    loss = summary.assign(
        final_train_loss_cost=summary["final_train_loss_mean"].where(
            summary["n_diverged"] == 0, math.inf
        )
    )
    tables = {"final_train_loss": profile_costs(loss, "final_train_loss_cost")}
    if target is None:
        return tables
    ttt = summarize_time_to_target(time_to_target(curves, target))
    return {
        "iterations_to_target": profile_costs(ttt, "iterations_to_target_cost"),
        "seconds_to_target": profile_costs(ttt, "seconds_to_target_cost"),
        **tables,
    }


def quality_at_time(
    runs: pd.DataFrame, curves: pd.DataFrame, seconds: float | None = None
) -> tuple[float, pd.DataFrame]:
    """(seconds, table): per config, the test quality (and the validation quality, which ranks
    them, when the runs have it) at the last evaluation within `seconds` of training
    (evaluations excluded; default: the shortest training time of any run, so that every config
    has a value), mean over seeds, and the time per step: what each setting reaches in the same
    time rather than in the same number of steps."""
    seconds = float(runs["train_time_s"].min()) if seconds is None else seconds
    columns = {}
    for split in dict.fromkeys((selection_split(curves), "test")):  # val (it ranks), then test
        metric = f"{split}_{quality(runs)}"
        points = curves[(curves["metric"] == metric) & (curves["time_s"] <= seconds)]
        last = points.sort_values("iteration").groupby("run_dir")["value"].last()
        columns[f"{metric}_at_time"] = runs["run_dir"].map(last)
    per_run = runs.assign(**columns)
    return seconds, summarize(per_run, metrics=(*columns, "step_time_s"))


def performance_profile(costs: pd.DataFrame, taus: Sequence[float] | None = None) -> pd.DataFrame:
    """Dolan & Moré performance profiles of a cost matrix (problems x solvers, lower is better,
    inf = failed): for each tau, the share of problems on which a solver's cost is within a
    factor tau of the best solver's. Index: tau (default: 1 and every ratio that occurs, so
    the profile's steps are exact); columns: the solvers.

    A problem no solver solved stays in the denominator: no profile then reaches 1."""
    values = costs.to_numpy(dtype=float)
    best = values.min(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isfinite(values) & (best > 0), values / best, math.inf)
        ratios = np.where(np.isfinite(values) & (best == 0) & (values == 0), 1.0, ratios)
    if taus is None:
        finite = ratios[np.isfinite(ratios)]
        taus = np.unique(np.concatenate([[1.0], finite]))
    taus = np.asarray(taus, dtype=float)
    shares = (ratios[None, :, :] <= taus[:, None, None]).mean(axis=1)
    profile = pd.DataFrame(shares, index=pd.Index(taus, name="tau"), columns=costs.columns)
    return profile
