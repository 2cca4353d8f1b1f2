"""Results on disk and as pandas tables: a run's folder and record (`records`), the runs table
(`runs`: one row per finished run, and the consolidation of a sweep's runs into its tables) and
the curves table (`curves`: every run's per-step metrics). The names below are the package's
API; `harness.storage` holds the Parquet layout of a sweep's consolidated tables.
"""

from harness.results.curves import CURVE_ID_COLUMNS, concat_curves, load_curves
from harness.results.records import (
    CHECKPOINTS_FOLDER,
    METRICS_FILE,
    PLANNING_FILE,
    RUN_FILE,
    STEP_METRICS,
    SWEEP_FILE,
    RunRecord,
    atomic_write_bytes,
    copy_finished,
    find_run_dirs,
    find_sweep_dirs,
    objective,
    planned_by_last_invocation,
    read_finished,
    read_run,
    write_run,
)
from harness.results.runs import (
    collect,
    config_keys,
    load_runs,
    own_step_time,
    run_row,
    steps_taken,
    with_config_columns,
)
from harness.storage import CURVES_TABLE, METRIC_COLUMNS, RUNS_TABLE, write_table

__all__ = [
    "CHECKPOINTS_FOLDER",
    "CURVES_TABLE",
    "CURVE_ID_COLUMNS",
    "METRICS_FILE",
    "METRIC_COLUMNS",
    "PLANNING_FILE",
    "RUNS_TABLE",
    "RUN_FILE",
    "STEP_METRICS",
    "SWEEP_FILE",
    "RunRecord",
    "atomic_write_bytes",
    "collect",
    "concat_curves",
    "config_keys",
    "copy_finished",
    "find_run_dirs",
    "find_sweep_dirs",
    "load_curves",
    "load_runs",
    "objective",
    "own_step_time",
    "planned_by_last_invocation",
    "read_finished",
    "read_run",
    "run_row",
    "steps_taken",
    "with_config_columns",
    "write_run",
    "write_table",
]
