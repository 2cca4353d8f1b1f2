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

One module per concern: `metrics` (which metric reports, which split chooses), `labels` (a
run's identity: config keys, nets and settings), `summaries` (statistics over seeds and the
selection rule), `targets` (time to a target quality), `axes` (tables along a config key),
`profiles` (performance profiles), `reference` (each setting against a reference's best),
`memo` (tables computed once per report: `shared_results`).
This package re-exports their public names.
"""

from __future__ import annotations

from harness.analysis.axes import (
    along,
    axis_table,
    batch_size_table,
    effective_steps,
    fastest_along,
    swept_keys,
)
from harness.analysis.labels import (
    BATCH_KEY,
    CHOICE_COLUMNS,
    HIDDEN_KEY,
    LABEL_COLUMNS,
    LR_KEY,
    MOMENTUM_KEY,
    NET_KEYS,
    SHORT_COLUMNS,
    config_groups,
    config_key,
    fixed_settings,
    is_numeric_key,
    joined_labels,
    key_values,
    label_keys,
    net_labels,
    setting_labels,
    varying_keys,
    with_net,
)
from harness.analysis.memo import remembered, shared_results
from harness.analysis.metrics import (
    SUMMARY_METRICS,
    direction,
    final_quality,
    has_validation,
    higher_is_better,
    quality,
    selection_metric,
    selection_split,
    selection_text,
    summary_metrics,
    without_validation,
)
from harness.analysis.profiles import (
    SCORE_TAU,
    performance_profile,
    profile_costs,
    profile_score,
    profile_tables,
)
from harness.analysis.reference import against_reference, welch_interval
from harness.analysis.summaries import (
    COURSE_BATCH_SIZE,
    best_at_reference_batch,
    best_configs,
    curve_bands,
    ended_early,
    lr_table,
    rank_configs,
    reference_batch_size,
    runs_of,
    summarize,
    t_interval,
)
from harness.analysis.time_to_target import (
    TARGET_MEASURES,
    TARGET_RULE,
    fastest_configs,
    quality_at_time,
    reference_targets,
    summarize_time_to_target,
    target_of,
    time_to_target,
)

__all__ = [
    "remembered",
    "shared_results",
    "BATCH_KEY",
    "CHOICE_COLUMNS",
    "COURSE_BATCH_SIZE",
    "HIDDEN_KEY",
    "direction",
    "LABEL_COLUMNS",
    "LR_KEY",
    "MOMENTUM_KEY",
    "NET_KEYS",
    "SHORT_COLUMNS",
    "SUMMARY_METRICS",
    "TARGET_MEASURES",
    "TARGET_RULE",
    "SCORE_TAU",
    "profile_score",
    "reference_targets",
    "target_of",
    "against_reference",
    "along",
    "axis_table",
    "batch_size_table",
    "best_at_reference_batch",
    "best_configs",
    "config_groups",
    "config_key",
    "curve_bands",
    "effective_steps",
    "ended_early",
    "fastest_along",
    "fastest_configs",
    "final_quality",
    "fixed_settings",
    "has_validation",
    "higher_is_better",
    "is_numeric_key",
    "joined_labels",
    "key_values",
    "label_keys",
    "lr_table",
    "net_labels",
    "performance_profile",
    "profile_costs",
    "profile_tables",
    "quality",
    "quality_at_time",
    "rank_configs",
    "reference_batch_size",
    "runs_of",
    "selection_metric",
    "selection_split",
    "selection_text",
    "setting_labels",
    "summarize",
    "summarize_time_to_target",
    "summary_metrics",
    "swept_keys",
    "t_interval",
    "time_to_target",
    "varying_keys",
    "welch_interval",
    "without_validation",
    "with_net",
]
