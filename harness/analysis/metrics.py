"""Which metric reports runs and which split chooses between them (validation when the runs
have one: the test set only reports)."""

from __future__ import annotations

import re

import pandas as pd

# Per-run metrics summarised over seeds by default, for a problem whose quality metric is
# accuracy (the course's); `summary_metrics` gives them for any problem.
SUMMARY_METRICS = ("final_test_accuracy", "final_train_loss", "best_test_accuracy")


def quality(frame: pd.DataFrame) -> str:
    """The quality metric of the runs in `frame`, as their problem names it (accuracy, rmse);
    runs recorded before problems named it are classification runs: accuracy."""
    if "quality" not in frame or frame["quality"].isna().all():
        return "accuracy"
    names = frame["quality"].dropna().unique()
    if len(names) > 1:
        raise ValueError(f"runs of problems with different quality metrics: {', '.join(names)}")
    return str(names[0])


def direction(frame: pd.DataFrame) -> bool:
    """Whether the quality metric of the runs in `frame` is better higher, as their problem
    recorded it (the runs table's `higher_is_better` column, which summaries and curves carry)."""
    if "higher_is_better" not in frame:
        raise ValueError("a table without the runs' higher_is_better column (see load_runs)")
    values = frame["higher_is_better"].dropna().unique()
    if len(values) != 1:
        raise ValueError(f"runs whose quality metrics point different ways: {list(values)}")
    return bool(values[0])


def higher_is_better(frame: pd.DataFrame, metric: str) -> bool:
    """Whether a higher value of `metric` is better for the runs of `frame`: for their quality
    metric (a column or curve metric that names it: val_accuracy, final_test_rmse_mean), the
    direction their problem recorded (`direction`); for anything else (losses, times, steps)
    lower is better."""
    names_quality = re.search(rf"(^|_){re.escape(quality(frame))}(_|$)", metric) is not None
    return direction(frame) if names_quality else False


def final_quality(frame: pd.DataFrame) -> str:
    """The column that reports configs: final_test_<quality>."""
    return f"final_test_{quality(frame)}"


def has_validation(frame: pd.DataFrame) -> bool:
    """Whether the runs of `frame` (a runs table, a summary or curves) were evaluated on a
    validation split held out of their training data."""
    if "metric" in frame:
        return bool((frame["metric"] == f"val_{quality(frame)}").any())
    column = _validation_column(frame)
    return column is not None and bool(frame[column].notna().any())


def _validation_column(frame: pd.DataFrame) -> str | None:
    """The final validation quality's column of a runs table or a summary, if it has one."""
    q = quality(frame)
    return next((c for c in (f"final_val_{q}", f"final_val_{q}_mean") if c in frame), None)


def selection_split(frame: pd.DataFrame) -> str:
    """The split every choice is made on: "val" when the runs have a validation split, else
    "test" (runs recorded without one: their choices see the test set, and say so)."""
    return "val" if has_validation(frame) else "test"


def selection_metric(frame: pd.DataFrame) -> str:
    """The column that picks configs (a rate, a best config, a star): final_val_<quality>, or
    final_test_<quality> for runs without a validation split."""
    return f"final_{selection_split(frame)}_{quality(frame)}"


def without_validation(frame: pd.DataFrame) -> int:
    """How many configs of a runs table or summary have no validation value while others have
    (a folder that mixes runs with and without a validation split): the rule ranks them by
    their final training loss alone (`rank_configs`)."""
    column = _validation_column(frame)
    if column is None or "config_id" not in frame or frame[column].isna().all():
        return 0
    return int(frame[column].isna().groupby(frame["config_id"]).all().sum())


def selection_text(frame: pd.DataFrame) -> str:
    """How choices were made, for headers and titles: 'chosen by final validation accuracy',
    and what the rule fell back to where runs had no validation split."""
    split = selection_split(frame)
    name = {"val": "validation", "test": "test"}[split]
    text = f"chosen by final {name} {quality(frame)}"
    if split == "test":
        return f"{text} (no validation split: the test set chose)"
    missing = without_validation(frame)
    if missing:
        text += (
            f" ({missing} config{'s' if missing > 1 else ''} without a validation split: "
            "chosen by final training loss)"
        )
    return text


def summary_metrics(frame: pd.DataFrame) -> tuple[str, ...]:
    """The per-run metrics summarised over seeds: final test quality, final training loss, best
    test quality, and the selection metric (final validation quality) when the runs have one."""
    q = quality(frame)
    metrics = (f"final_test_{q}", "final_train_loss", f"best_test_{q}")
    selection = selection_metric(frame)
    return metrics if selection in metrics else (*metrics, selection)
