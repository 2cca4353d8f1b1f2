"""Does the zoo's verdict survive a richer search? Every hyper-parameter the optimizer's authors
would tune (experiment=zoo_search_tune, zoo_search_shortlist, zoo_search) beside the rate alone
(the constant-rate zoo: zoo_tune, zoo).

    python experiments/zoo_search_reading.py [results/zoo_search] [results/zoo]

Writes <search>/reading.md from whatever the phases hold so far (a phase not yet run, or
partly run, is said so and its sections wait for it):

* **status:** per phase and net, the runs finished;
* **the tuning cost** (phase 1, 2,000 iterations): per net, the expected best validation
  accuracy after k random trials (Dodge et al. 2019, harness.tuning.tuning_curves), the mean over
  the optimizers both searches hold, rate alone (results/zoo_tune) against the richer search;
* **what the richer search chose:** per net and optimizer, its pick on validation against its
  library's defaults, and what it gained over the rate-alone pick (phase 1's, until phase 3);
* **the verdict** (phase 3): the reference (the best of the course's nine under the same
  search, on validation) against every other optimizer, at 95 % and after Bonferroni; the rank
  correlation with the rate-alone verdict; the gap of the course's adaptive optimizers to the
  best of momentum SGD (Choi et al. 2019) under each search.

Every pick is the validation set's; the test set only reports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from scipy import stats

from harness import analysis, report, style
from harness.errors import ConfigError, run_reading
from harness.markdown import markdown_table
from harness.optimizers.catalogue import config_of
from harness.results import RUN_FILE, RUNS_TABLE, SWEEP_FILE, load_curves
from harness.tuning.tuning_curves import tuning_curves

ROOT = Path(__file__).resolve().parents[1]
KS = (1, 2, 4, 8, 10, 12)
# the keys the richer search may tune (harness.tuning.spaces, and the preset's own entries)
TUNED = [
    "optimizer.lr",
    "optimizer.momentum",
    "optimizer.betas",
    "optimizer.beta1",
    "optimizer.beta2",
    "optimizer.eps",
    "optimizer.weight_decay",
    "optimizer.alpha",
    "optimizer.rho",
]
ADAPTIVE = ("adagrad", "adadelta", "rmsprop", "adam", "adamax", "nadam")
MOMENTUM = ("momentum", "nesterov")


def _runs(folder: Path) -> pd.DataFrame:
    """A phase's runs, or an empty table where the phase has not run (no sweep.json: the study's
    folder holds its write-up before its runs)."""
    if (
        not (folder / SWEEP_FILE).is_file()
        or not any(folder.glob(f"*/{RUN_FILE}"))
        and not (folder / RUNS_TABLE).is_file()
    ):
        return pd.DataFrame()
    return report.load_sweep_runs(folder)


def status(folders: dict[str, Path]) -> list[str]:
    rows = []
    for phase, folder in folders.items():
        runs = _runs(folder)
        for net in ("net1", "net2", "net3"):
            of = runs[runs["model"] == net] if not runs.empty else runs
            rows.append(
                {
                    "phase": phase,
                    "net": net,
                    "runs finished": len(of),
                    "optimizers": of["optimizer"].nunique() if len(of) else 0,
                    "diverged": int((of["status"] == "diverged").sum()) if len(of) else 0,
                }
            )
    return ["## Status", "", markdown_table(pd.DataFrame(rows), index=False), ""]


def expected_best(folder: Path, runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per net, optimizer and k: the expected best validation accuracy of k random trials."""
    curves = load_curves(folder, runs, metrics=["val_accuracy", "test_accuracy"])
    found = tuning_curves(runs, curves, tune=[k for k in keys if k in runs] or ["lr"])
    return found[["net", "optimizer", "k", "n_trials", "expected_val"]]


def tuning_cost(search: pd.DataFrame, rate: pd.DataFrame) -> list[str]:
    lines = ["## The tuning cost (phase 1, 2,000 iterations)", ""]
    if search.empty:
        return [*lines, "Phase 1 holds no runs yet.", ""]
    both = search.merge(rate, on=["net", "optimizer", "k"], suffixes=("_search", "_rate"))
    rows = []
    for (net, k), of in both.groupby(["net", "k"]):
        if k not in KS:
            continue
        rows.append(
            {
                "net": net,
                "k": k,
                "optimizers": len(of),
                "rate alone (%)": round(100 * of["expected_val_rate"].mean(), 2),
                "richer search (%)": round(100 * of["expected_val_search"].mean(), 2),
            }
        )
    lines += [
        "Expected best validation accuracy after k random trials (Dodge et al. 2019), the mean "
        "over the optimizers both searches hold with at least k trials; each search's trials "
        "include its rounds beyond an edge of the rate.",
        "",
        markdown_table(pd.DataFrame(rows), index=False) if rows else "(no k in common yet)",
        "",
    ]
    return lines


def _default(optimizer: str) -> dict:
    path = ROOT / "conf" / "optimizer" / f"{optimizer}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else (config_of(optimizer) or {})


def choices(search: pd.DataFrame, rate: pd.DataFrame) -> list[str]:
    """Per net and optimizer: the richer search's pick against the library's defaults, and its
    validation accuracy against the rate-alone pick's."""
    lines = ["## What the richer search chose", ""]
    if search.empty:
        return [*lines, "No runs yet.", ""]
    best_search = analysis.best_configs(analysis.summarize(search), tune=TUNED)
    best_rate = analysis.best_configs(analysis.summarize(rate), tune=TUNED)
    by = analysis.selection_metric(search)
    rate_val = best_rate.set_index(["net", "optimizer"])[f"{by}_mean"]
    configs = search.drop_duplicates("config_id").set_index("config_id")["config"]
    rows = []
    for row in best_search.itertuples():
        config, defaults = json.loads(configs[row.config_id]), _default(row.optimizer)
        moved = []
        for key in TUNED[1:]:  # the rate's range is its own (`tune.centre`): reported apart
            name = key.removeprefix("optimizer.")
            if key in config and not _same(config[key], _listed(defaults.get(name))):
                moved.append(f"{name}={config[key]} ({_listed(defaults.get(name))})")
        rate_pick = rate_val.get((row.net, row.optimizer))
        rows.append(
            {
                "net": row.net,
                "optimizer": row.optimizer,
                "validation (%)": round(100 * getattr(row, f"{by}_mean"), 2),
                "rate alone (%)": round(100 * rate_pick, 2) if rate_pick is not None else None,
                "lr": config.get("optimizer.lr"),
                "other keys (library default)": ", ".join(moved) or "all at the defaults",
            }
        )
    table = pd.DataFrame(rows).sort_values(["net", "validation (%)"], ascending=[True, False])
    return [
        *lines,
        "The pick on validation of each net x optimizer (phase 1 until phase 3 has run); "
        "'rate alone': the rate-alone zoo's phase-1 pick at the same length.",
        "",
        markdown_table(table, index=False),
        "",
    ]


def _same(value, default) -> bool:
    """Whether a picked value is its default (0 and 0.0 alike)."""
    try:
        return float(value) == float(default)
    except (TypeError, ValueError):
        return str(value) == str(default)


def _listed(value):
    """A default as a stored config writes it ('[0.9, 0.999]' for a list)."""
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return value


def verdict(search: pd.DataFrame, rate: pd.DataFrame) -> list[str]:
    lines = ["## The verdict (phase 3)", ""]
    if search.empty:
        return [*lines, "Phase 3 has not run yet.", ""]
    rows = []
    versus = analysis.against_reference(search, style.COURSE_OPTIMIZERS)
    rate_picks = analysis.best_at_reference_batch(rate)[1] if not rate.empty else pd.DataFrame()
    test = analysis.final_quality(search)
    for net, of in versus.groupby("net"):
        m = int((of["verdict"] != "reference").sum())
        strict = analysis.against_reference(
            search[search["model"] == net], style.COURSE_OPTIMIZERS, 1 - 0.05 / max(m, 1)
        )
        mine = of.set_index("optimizer")[f"{test}_mean"]
        theirs = rate_picks[rate_picks["net"] == net].set_index("optimizer")[f"{test}_mean"]
        shared = mine.index.intersection(theirs.index)
        rho = stats.spearmanr(mine[shared], theirs[shared]).statistic if len(shared) > 2 else None
        gap = {
            name: (mean[list(ADAPTIVE)].max() - mean[list(MOMENTUM)].max()) * 100
            for name, mean in (("richer", mine), ("rate alone", theirs))
            if set(ADAPTIVE) | set(MOMENTUM) <= set(mean.index)
        }
        rows.append(
            {
                "net": net,
                "better at 95 %": int((of["verdict"] == "better").sum()),
                "better after Bonferroni": int((strict["verdict"] == "better").sum()),
                "Spearman with rate alone": None if rho is None else round(rho, 2),
                "best adaptive - best momentum (points, richer / rate alone)": " / ".join(
                    f"{gap[k]:+.2f}" if k in gap else "-" for k in ("richer", "rate alone")
                ),
            }
        )
    return [*lines, markdown_table(pd.DataFrame(rows), index=False), ""]


def main(search_sweep: Path, zoo: Path) -> str:
    root = search_sweep.parent
    phases = {
        "1": root / f"{search_sweep.name}_tune",
        "2": root / f"{search_sweep.name}_shortlist",
        "3": search_sweep,
    }
    rate_tune = zoo.parent / f"{zoo.name}_tune"
    if not rate_tune.is_dir():
        raise ConfigError(f"{rate_tune} is not a folder: the rate-alone search to compare with")
    lines = [
        "# The zoo under a richer search: the reading in numbers",
        "",
        "Written by `python experiments/zoo_search_reading.py` from the tables as they stand.",
        "",
        *status(phases),
    ]
    tune = _runs(phases["1"])
    if not tune.empty:
        rate = _runs(rate_tune)
        rate = rate[rate["optimizer"].isin(set(tune["optimizer"]))]
        search_k = expected_best(phases["1"], tune, TUNED)
        rate_k = expected_best(rate_tune, rate, ["optimizer.lr"])
        lines += tuning_cost(search_k, rate_k)
        lines += choices(tune, rate)
    else:
        lines += ["Phase 1 holds no runs yet.", ""]
    lines += verdict(_runs(phases["3"]), _runs(zoo))
    text = "\n".join(lines)
    (
        search_sweep.mkdir(parents=True, exist_ok=True),
        (search_sweep / "reading.md").write_text(text),
    )
    return text


if __name__ == "__main__":
    run_reading(
        main,
        __doc__.splitlines()[0],
        {"search": ROOT / "results" / "zoo_search", "zoo": ROOT / "results" / "zoo"},
    )
