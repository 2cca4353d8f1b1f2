"""Reading a study's tables: time and peak memory, this revision beside an earlier one.

    python bench/tables.py --before b7772a4                  # the committed studies
    python bench/tables.py --before b7772a4 --synthetic 2500,5000,10000,20000 --synthetic-before 500
    python bench/tables.py --engines                         # pyarrow, DuckDB, Polars on the zoo

Each measurement runs in a process of its own (so each peak resident memory is its own) with the
harness of this tree, and with --before REV also with the harness of revision REV (a temporary
git worktree), one after the other on the same tables:

* `load_curves`: `load_curves(study)`, every curve row with its run's identity;
* `final tables`: the runs table and the final-value summary and best configurations
  (`analysis.summarize`, `analysis.best_configs`): what needs no curve at all;
* `report`: `harness-report STUDY --formats png`;
* for the zoo also `reading` (experiments/zoo_reading.py) and `notebook` (notebooks/zoo.py,
  executed headless).

The studies are the committed course, zoo phase 1 (`zoo_tune`) and zoo phase 3 (`zoo`: the
tables of the constant-rate zoo with one range for every optimizer, results/zoo_wide*), copied
into a temporary results tree so that a report finds each study's tuning study as it would.
--synthetic N,... makes studies of N runs x 20,000 iterations (5,240 curve rows a run: six
metrics evaluated every 500 steps, the batch loss and rate logged every 8; 20,000 runs are 105
million rows, written as parts of 1,000 runs) and reports them the same way: the cost against
the number of runs. The earlier revision reads every row into memory with its run's identity
copied onto it (~2 kB a row), so --synthetic-before caps the sizes it is given.
--engines reads the zoo's test-accuracy curves with each engine installed, each in its own
process: what harness.storage chose pyarrow by.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from sweeps import REPO, worktree

# the committed studies, by the name a report reads them under
STUDIES = {
    "course": "course",
    "course_tune": "course_tune",
    "zoo_tune": "zoo_wide_tune",
    "zoo_shortlist": "zoo_wide_shortlist",
    "zoo": "zoo_wide",
}
MEASURED = ("course", "zoo_tune", "zoo")
TABLE_FILES = ("runs.parquet", "curves.parquet", "tuning.json", "multirun.yaml", "sweep.json")

# what each measurement imports (not timed: Python and the packages start alike in both trees),
# then what it does (timed)
TASKS = {
    "load_curves": (
        "from harness.results import load_curves, load_runs",
        """
        runs = load_runs(STUDY); curves = load_curves(STUDY, runs)
        extra = {"rows": len(curves)}
        """,
    ),
    "final tables": (
        "from harness import analysis\nfrom harness.results import load_runs",
        """
        summary = analysis.summarize(load_runs(STUDY))
        best = analysis.best_configs(summary)
        extra = {"configs": len(summary)}
        """,
    ),
    "report": (
        "from harness import report",
        """
        report.main([str(STUDY), "--out", str(OUT), "--formats", "png"])
        extra = {}
        """,
    ),
    "reading": (
        "import runpy\nfrom harness import report",
        """
        sys.argv = ["zoo_reading.py", str(STUDY)]
        runpy.run_path(str(CODE / "experiments" / "zoo_reading.py"), run_name="__main__")
        extra = {}
        """,
    ),
    "notebook": (
        "import os\nimport jupytext, nbclient",
        """
        os.environ["HARNESS_SWEEP"] = str(STUDY)
        notebook = jupytext.read(CODE / "notebooks" / "zoo.py")
        nbclient.NotebookClient(notebook, timeout=1800, kernel_name="python3").execute()
        extra = {}
        """,
    ),
}
ZOO_ONLY = ("reading", "notebook")
MEASURE = """
import json, os, resource, sys, threading, time
from pathlib import Path
STUDY, OUT, CODE = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def tree_kb():  # resident memory of this process and every process under it, together
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{{pid}}/status") as status:
                total += next(int(l.split()[1]) for l in status if l.startswith("VmRSS"))
            for task in os.listdir(f"/proc/{{pid}}/task"):
                with open(f"/proc/{{pid}}/task/{{task}}/children") as children:
                    todo += [int(c) for c in children.read().split()]
        except (OSError, StopIteration):  # a process that ended meanwhile
            pass
    return total

tree_peak = [0]
def watch():
    while True:
        tree_peak[0] = max(tree_peak[0], tree_kb())
        time.sleep(0.05)

{setup}
threading.Thread(target=watch, daemon=True).start()
tic = time.perf_counter()
{task}
seconds = time.perf_counter() - tic
who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
peak = max(tree_peak[0], *(resource.getrusage(w).ru_maxrss for w in who))
print(json.dumps({{"seconds": seconds, "peak_gb": peak / 1e6, **extra}}))
"""


def measure(task: str, study: Path, code: Path) -> dict:
    """`task` on `study` in a process of its own, with the harness of source tree `code`:
    seconds, peak resident memory (GB: the process and its workers together, sampled every
    50 ms, or the largest one alone where that is more), and what the task
    counted; `failed` with the last line of its error otherwise."""
    with tempfile.TemporaryDirectory() as out:
        setup, timed = TASKS[task]
        script = MEASURE.format(setup=setup, task=textwrap.dedent(timed).strip())
        env = {**os.environ, "PYTHONPATH": str(code), "MPLBACKEND": "Agg"}
        done = subprocess.run(
            [sys.executable, "-c", script, str(study), out, str(code)],
            capture_output=True, text=True, env=env, cwd=study.parent.parent,
        )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"failed": last[:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def results_tree(tmp: Path) -> Path:
    """The committed studies' tables under `tmp`/results, by the names a report reads them by."""
    for name, folder in STUDIES.items():
        source, target = REPO / "results" / folder, tmp / "results" / name
        target.mkdir(parents=True)
        for file in TABLE_FILES:
            if (source / file).exists():
                shutil.copy2(source / file, target / file)
        for file in [*target.glob("*.yaml"), *target.glob("*.json")]:  # studies by their copies
            text = file.read_text()
            for other, committed in STUDIES.items():
                text = re.sub(rf"\bresults/{committed}\b", f"results/{other}", text)
            file.write_text(text)
        if (source / "parts").is_dir():
            shutil.copytree(source / "parts", target / "parts")
    return tmp / "results"


def synthetic_study(folder: Path, runs: int, seed: int = 0) -> Path:
    """A study of `runs` runs x 20,000 iterations (2 nets x optimizers x 20 rates x 5 seeds):
    its runs table from a committed course run's row of each net, curves of a loss falling to a
    floor that depends on the rate, written as parts of 1,000 runs."""
    from harness.storage import append

    course = pd.read_parquet(REPO / "results" / "course" / "runs.parquet")
    # each net's runs from a committed run of that net: its config (its identity) names the net
    templates = [course[course["model"] == f"net{net + 1}"].iloc[0] for net in range(2)]
    rng = np.random.default_rng(seed)
    evals = np.arange(0, 20_001, 500)
    steps = np.arange(0, 20_000, 8)
    rows, batch = [], 1000
    names = sorted(
        pd.read_parquet(REPO / "results" / "zoo_wide" / "runs.parquet")["optimizer"].unique()
    )
    for index in range(runs):
        net, rest = divmod(index, runs // 2)
        optimizer, rest = divmod(rest, 100)
        rate, seed_ = divmod(rest, 5)
        lr = 10 ** (-4 + 4 * (rate % 20) / 19)
        template = templates[net]
        run_identity = {
            **json.loads(template["config"]),
            "optimizer.lr": lr,
            "optimizer._target_": names[optimizer % len(names)],
        }
        floor = 0.02 + 0.1 * abs(np.log10(lr) + 2) / 2 + 0.01 * rng.random()
        row = template.copy()
        row.update(
            {
                "model": f"net{net + 1}",
                "optimizer": names[optimizer % len(names)],
                "lr": lr,
                "seed": seed_,
                "config": json.dumps(run_identity, sort_keys=True),
                "config_id": f"{net}-{optimizer}-{rate}",
                "config_hash": f"{index:016x}",
                "final_test_accuracy": 1 - floor,
                "final_val_accuracy": 1 - floor - 0.001 * rng.random(),
                "best_test_accuracy": 1 - floor,
                "best_val_accuracy": 1 - floor,
                "final_train_loss": floor,
                "run_dir": f"run{index:06d}",
            }
        )
        rows.append(row)
        if len(rows) == batch or index == runs - 1:
            frame = pd.DataFrame(rows)
            append(folder, frame, _synthetic_curves(frame, evals, steps, rng))
            rows = []
    return folder


def _synthetic_curves(runs: pd.DataFrame, evals, steps, rng) -> pd.DataFrame:
    """Curve rows of `runs`: six evaluated metrics every 500 steps, batch loss and rate every 8."""
    frames = []
    for run_dir, floor in zip(runs["run_dir"], runs["final_train_loss"], strict=True):
        loss = floor + np.exp(-evals / 3000)
        metrics = {
            "train_loss": loss, "val_loss": loss * 1.05, "test_loss": loss * 1.04,
            "train_accuracy": 1 - loss / 2, "val_accuracy": 1 - loss / 1.9,
            "test_accuracy": 1 - loss / 1.95,
        }  # fmt: skip
        for metric, values in metrics.items():
            frames.append(_rows(run_dir, evals, metric, values))
        noisy = floor + np.exp(-steps / 3000) + 0.05 * rng.random(len(steps))
        frames.append(_rows(run_dir, steps, "batch_loss", noisy))
        frames.append(_rows(run_dir, steps, "lr", np.full(len(steps), 0.01)))
    return pd.concat(frames, ignore_index=True)


def _rows(run_dir: str, iterations, metric: str, values) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_dir": run_dir, "iteration": iterations, "epoch": iterations / 390.0,
            "time_s": iterations * 1e-3, "metric": metric, "value": values,
        }
    )  # fmt: skip


def row(study: str, task: str, arm: str, result: dict) -> str:
    if "failed" in result:
        return f"| {study} | {task} | {arm} | failed: {result['failed']} | |"
    return f"| {study} | {task} | {arm} | {result['seconds']:.1f} | {result['peak_gb']:.2f} |"


def engines(study: Path) -> None:
    """The zoo's test-accuracy curves read by each engine installed, to pandas."""
    reads = {
        "pyarrow dataset": """
            from harness.storage import read_curves
            t = read_curves(STUDY, ["test_accuracy"]).to_pandas()
        """,
        "duckdb": """
            import duckdb
            files = f"read_parquet('{STUDY}/curves.parquet')"
            t = duckdb.sql(f"SELECT * FROM {files} WHERE metric = 'test_accuracy'").df()
        """,
        "polars": """
            import polars as pl
            lazy = pl.scan_parquet(STUDY / "curves.parquet")
            t = lazy.filter(pl.col("metric") == "test_accuracy").collect().to_pandas()
        """,
        "pandas (pyarrow, whole file)": """
            import pandas as pd
            t = pd.read_parquet(STUDY / "curves.parquet")
            t = t[t.metric == "test_accuracy"]
        """,
    }
    print("\n| engine | s | peak GB | rows |\n|---|---:|---:|---:|")
    for name, code in reads.items():
        setup, _, timed = textwrap.dedent(code).strip().partition("\n")
        TASKS[name] = (setup, timed + "\nextra = {'rows': len(t)}")
        result = measure(name, study, REPO)
        if "failed" in result:
            print(f"| {name} | not run: {result['failed']} | | |")
        else:
            seconds, peak, rows = result["seconds"], result["peak_gb"], result["rows"]
            print(f"| {name} | {seconds:.2f} | {peak:.2f} | {rows:,} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", help="also measure the harness of this git revision")
    parser.add_argument("--studies", default=",".join(MEASURED), help="committed studies")
    parser.add_argument("--tasks", default=",".join(TASKS), help="which measurements")
    parser.add_argument("--synthetic", default="", help="synthetic studies of these many runs")
    parser.add_argument(
        "--synthetic-before", type=int, default=1000,
        help="largest synthetic study the earlier revision is given (default 1,000 runs)",
    )  # fmt: skip
    parser.add_argument("--engines", action="store_true", help="compare the reading engines")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        worktree(args.before) if args.before else contextlib.nullcontext() as before,
    ):
        results = results_tree(Path(tmp))
        if args.engines:
            engines(results / "zoo")
            return
        tasks = [t for t in args.tasks.split(",") if t in TASKS]
        print(f"# Reading tables: {os.cpu_count()} cores; seconds and peak resident GB")
        print("\n| study | task | harness | s | peak GB |\n|---|---|---|---:|---:|")
        studies = [(s, results / s) for s in args.studies.split(",") if s]
        for n in [int(n) for n in args.synthetic.split(",") if n]:
            studies.append((f"synthetic {n:,} runs", synthetic_study(results / f"synthetic{n}", n)))
        for name, study in studies:
            for task in tasks:
                if task in ZOO_ONLY and name != "zoo":
                    continue
                arms = [("this tree", REPO)]
                small = (
                    not name.startswith("synthetic")
                    or int(name.split()[1].replace(",", "")) <= args.synthetic_before
                )
                if before is not None and small:
                    arms.insert(0, (f"at {args.before}", before))
                for arm, code in arms:
                    print(row(name, task, arm, measure(task, study, code)), flush=True)


if __name__ == "__main__":
    main()
