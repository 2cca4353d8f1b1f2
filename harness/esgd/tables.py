"""The tables of an ESGD study, all computed from the rows of `methods` (one per method x seed x
generation x individual): the curves of the figures, and the analogues of the paper's Table 1
(best individual and top-k range per method), Table 6 (the best individual's optimizer per
generation) and Figure 2 (share of offspring among the selected)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import t_interval
from harness.markdown import markdown_table
from harness.results import write_table

INDIVIDUALS, TABLE1, TABLE6, OFFSPRING_SHARE, CURVES = (
    "individuals",
    "table1",
    "table6",
    "offspring_share",
    "curves",
)
LABELS = {
    "single": "single baseline",
    "population": "population baseline",
    "esgd_no_evolution": "ESGD w/o evolution",
    "esgd": "ESGD",
}
# What the rows record of each optimizer as it stepped (`trainer.Trainer.used`; studies
# recorded before it have no such columns)
USED = ("optimizer_class", "step_lr", "step_momentum", "nesterov")


def methods_in(frame: pd.DataFrame) -> list[str]:
    return [m for m in LABELS if m in set(frame["method"])]


def survivors(individuals: pd.DataFrame) -> pd.DataFrame:
    """The population at the end of each generation, fittest first, with `place` (1 = best)."""
    kept = individuals[individuals["selected"]].sort_values(
        ["method", "seed", "generation", "fitness", "uid"], na_position="last"
    )
    place = kept.groupby(["method", "seed", "generation"]).cumcount() + 1
    return kept.assign(place=place)


def curves(individuals: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """Per method, seed and generation: compute so far, the best individual's fitness, test
    loss and test error, and the fitness range of the top k."""
    kept = survivors(individuals)
    keys = ["method", "seed", "generation"]
    best = kept[kept["place"] == 1].set_index(keys)
    top = kept[kept["place"] <= top_k].groupby(keys)["fitness"]
    return (
        best[["model_steps", "fitness", "test_loss", "test_error"]]
        .assign(topk_low=top.min(), topk_high=top.max())
        .reset_index()
    )


def table1(individuals: pd.DataFrame, top_k: int) -> pd.DataFrame:
    """After the last generation, per method and seed: the best individual (by fitness) and the
    range over the top k (of fitness and test error; k is 1 for the single baseline)."""
    kept = survivors(individuals)
    last = kept[kept["generation"] == kept["generation"].max()]
    top = last[last["place"] <= top_k]
    agg = top.groupby(["method", "seed"]).agg(
        topk=("uid", "size"),
        topk_fitness_low=("fitness", "min"),
        topk_fitness_high=("fitness", "max"),
        topk_error_low=("test_error", "min"),
        topk_error_high=("test_error", "max"),
    )
    best = last[last["place"] == 1].set_index(["method", "seed"])
    columns = ["model_steps", "fitness", "test_loss", "test_error"]
    return best[columns].join(agg).reset_index()


def table6(individuals: pd.DataFrame) -> pd.DataFrame:
    """Per method that draws plans every generation, seed and generation: the plan of the
    individual with the best fitness after the SGD phase (its rate, annealed where the study
    anneals, and what its optimizer used at the generation's first step), and whether the
    generation's best survivor is an offspring."""
    trained = individuals[(individuals["optimizer"] != "") & ~individuals["offspring"]]
    trained = trained[trained["method"].isin(["esgd", "esgd_no_evolution"])]
    keys = ["method", "seed", "generation"]
    best = trained.sort_values([*keys, "fitness", "uid"]).groupby(keys).head(1).set_index(keys)
    kept = survivors(individuals)
    best_survivor = kept[kept["place"] == 1].set_index(keys)["offspring"]
    plan = ["optimizer", "hyperparameters", "lr", "momentum", "schedule", *USED]
    table = best.reindex(columns=[*plan, "fitness", "test_error"])
    return table.join(best_survivor.rename("best_is_offspring"), how="left").reset_index()


def family(table: pd.DataFrame) -> pd.Series:
    """Each row's optimizer class in lower case ("adam", "sgd": the names of the paper's Table
    6); in rows recorded before the class was, the pool entry."""
    recorded = table["optimizer_class"].astype("string").str.lower().fillna("")
    return recorded.where(recorded != "", table["optimizer"])


def table6_summary(table: pd.DataFrame) -> pd.DataFrame:
    """`table6` over seeds, per method and generation: per optimizer class (`family`), the
    share of the best individuals on it (%) and, among those, the median of their rate (the
    plan's) and of the rate their first step used (the schedule's position included)."""
    frame = table.assign(family=family(table))
    keys = ["method", "generation"]
    seeds = frame.groupby(keys).size()
    columns = {"seeds": seeds}
    for name in sorted(frame["family"].unique()):
        mine = frame[frame["family"] == name].groupby(keys)
        columns[f"{name} (%)"] = 100 * mine.size().reindex(seeds.index, fill_value=0) / seeds
        columns[f"{name}: median lr"] = mine["lr"].median()
        columns[f"{name}: median first-step lr"] = mine["step_lr"].median()
    return pd.DataFrame(columns).reset_index()


def offspring_share(individuals: pd.DataFrame, elite: int) -> pd.DataFrame:
    """Per seed and generation of ESGD: the share of new offspring among the selected, and
    among the `elite` fittest candidates (those selected on merit, not drawn at random)."""
    esgd = individuals[(individuals["method"] == "esgd") & (individuals["generation"] > 0)]
    keys = ["seed", "generation"]
    selected = esgd[esgd["selected"]].groupby(keys)["offspring"].mean()
    fittest = esgd[esgd["rank"] <= elite].groupby(keys)["offspring"].mean()
    return pd.DataFrame(
        {"offspring_share": selected, "elite_offspring_share": fittest}
    ).reset_index()


def birth(individuals: pd.DataFrame) -> pd.DataFrame:
    """ESGD's offspring at birth, one row each (seed, generation, uid): its fitness over the
    mean of its parents' fitness after their SGD phase (`ratio`; < 1: better than its parents
    on average), and whether it beats its best parent."""
    esgd = individuals[(individuals["method"] == "esgd") & (individuals["generation"] > 0)]
    fitness = esgd.set_index(["seed", "generation", "uid"])["fitness"]
    children = esgd[esgd["offspring"]]
    rows = []
    for child in children.itertuples():
        parents = [
            fitness[(child.seed, child.generation, int(u))] for u in child.parents.split("+")
        ]
        rows.append(
            {
                "seed": child.seed,
                "generation": child.generation,
                "uid": child.uid,
                "ratio": child.fitness / np.mean(parents),
                "beats_best_parent": child.fitness < min(parents),
            }
        )
    return pd.DataFrame(rows, columns=["seed", "generation", "uid", "ratio", "beats_best_parent"])


def variants(studies: dict[str, dict[str, pd.DataFrame]]) -> pd.DataFrame:
    """One row per study (its tables by name, under a label): ESGD's and the population
    baseline's best fitness and test error, their difference paired by seed, and the offspring:
    their shares among the selected and the m elite, their fitness at birth over their parents'
    (median), how often they beat their better parent."""
    rows = []
    for label, tables in studies.items():
        wide = tables[TABLE1].pivot(index="seed", columns="method")
        diff = wide.xs("esgd", axis=1, level=1) - wide.xs("population", axis=1, level=1)
        share, born = tables[OFFSPRING_SHARE], birth(tables[INDIVIDUALS])
        rows.append(
            {
                "study": label,
                "seeds": int(diff["fitness"].notna().sum()),
                "population: fitness": _mean_ci(wide["fitness"]["population"]),
                "ESGD: fitness": _mean_ci(wide["fitness"]["esgd"]),
                "Δ fitness": _mean_ci(diff["fitness"]),
                "Δ test error (points)": _mean_ci(diff["test_error"], 100, 2),
                "seeds ESGD lower": int((diff["fitness"] < 0).sum()),
                "offspring among selected (%)": f"{100 * share['offspring_share'].mean():.1f}",
                "offspring among m elite (%)": f"{100 * share['elite_offspring_share'].mean():.1f}",
                "child / parents' fitness (median)": f"{born['ratio'].median():.2f}",
                "child beats better parent (%)": f"{100 * born['beats_best_parent'].mean():.1f}",
            }
        )
    return pd.DataFrame(rows)


# --- Markdown ----------------------------------------------------------------------------------


def _mean_ci(values, scale: float = 1.0, digits: int = 4) -> str:
    mean, half, n = t_interval(np.asarray(values, dtype=float) * scale)
    return f"{mean:.{digits}f}" + ("" if n < 2 else f" ± {half:.{digits}f}")


def table1_markdown(table: pd.DataFrame, top_k: int) -> str:
    """Table 1: means over seeds (± 95 % CI, t distribution, from 2 seeds); top-k ranges are
    the seed means of their ends; errors in %."""
    rows = []
    for method in methods_in(table):
        t = table[table["method"] == method]
        fit_range = f"[{t['topk_fitness_low'].mean():.4f}, {t['topk_fitness_high'].mean():.4f}]"
        err_range = (
            f"[{100 * t['topk_error_low'].mean():.2f}, {100 * t['topk_error_high'].mean():.2f}]"
        )
        rows.append(
            {
                "method": LABELS[method],
                "seeds": len(t),
                "best: fitness (held-out loss)": _mean_ci(t["fitness"]),
                "best: test loss": _mean_ci(t["test_loss"]),
                "best: test error (%)": _mean_ci(t["test_error"], 100, 2),
                f"top {top_k}: fitness": fit_range if t["topk"].max() > 1 else "–",
                f"top {top_k}: test error (%)": err_range if t["topk"].max() > 1 else "–",
            }
        )
    return markdown_table(pd.DataFrame(rows), index=False)


def comparison_markdown(table: pd.DataFrame, method: str = "esgd") -> str:
    """`method` minus each baseline, paired by seed (negative: `method` is better)."""
    wide = table.pivot(index="seed", columns="method")
    rows = []
    for other in methods_in(table):
        if other == method or method not in set(table["method"]):
            continue
        diff = wide.xs(method, axis=1, level=1) - wide.xs(other, axis=1, level=1)
        rows.append(
            {
                "comparison": f"{LABELS[method]} − {LABELS[other]}",
                "seeds": int(diff["fitness"].notna().sum()),
                "Δ best fitness": _mean_ci(diff["fitness"]),
                "Δ best test error (points of %)": _mean_ci(diff["test_error"], 100, 2),
                "seeds where ESGD's fitness is lower": int((diff["fitness"] < 0).sum()),
            }
        )
    return markdown_table(pd.DataFrame(rows), index=False)


def _paper_number(value: float) -> str:
    """2.68e-4, as the paper's Table 6 writes a rate."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def as_paper(row) -> str:
    """A row's optimizer as the paper's Table 6 writes it: "adam, lr=2.68e-4", "sgd,
    nesterov=F, lr=3.61e-4, momentum=0"; rows recorded before optimizers were: the plan."""
    if not isinstance(row.optimizer_class, str) or not row.optimizer_class:
        return row.hyperparameters
    parts = [row.optimizer_class.lower()]
    if isinstance(row.nesterov, bool | np.bool_):
        parts.append(f"nesterov={'T' if row.nesterov else 'F'}")
    if not math.isnan(row.lr):
        parts.append(f"lr={_paper_number(row.lr)}")
    if not math.isnan(row.step_momentum):
        parts.append(f"momentum={row.step_momentum:.3g}")
    return ", ".join(parts)


def table6_markdown(table: pd.DataFrame, seed: int) -> str:
    """ESGD's `table6` for one seed: the optimizer as the paper writes it, its schedule and the
    rate of its first step in the generation."""
    t = table[(table["method"] == "esgd") & (table["seed"] == seed)]
    frame = pd.DataFrame(
        {
            "generation": t["generation"],
            "optimizer": [as_paper(row) for row in t.itertuples()],
            "schedule": t["schedule"],
            "first-step lr": t["step_lr"].map(_number),
            "fitness": t["fitness"].map("{:.4f}".format),
            "test error (%)": (100 * t["test_error"]).map("{:.2f}".format),
            "best survivor is an offspring": t["best_is_offspring"],
        }
    )
    if t["step_lr"].isna().all():  # a study recorded before the rows had it
        frame = frame.drop(columns="first-step lr")
    return markdown_table(frame, index=False)


def _number(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g}"


def table6_summary_markdown(table: pd.DataFrame) -> str:
    """`table6_summary`: shares in %, rates to 3 significant digits (columns without any, as
    the first-step rates of a study recorded before the rows had them, left out)."""
    summary = table6_summary(table).dropna(axis=1, how="all")
    shares = [c for c in summary.columns if c.endswith(" (%)")]
    rates = [c for c in summary.columns if "median" in c]
    summary = summary.assign(
        method=summary["method"].map(LABELS),
        **{c: summary[c].map("{:.0f}".format) for c in shares},
        **{c: summary[c].map(_number) for c in rates},
    )
    return markdown_table(summary, index=False)


def offspring_share_markdown(share: pd.DataFrame) -> str:
    """Per generation, in % over seeds: mean [min, max]."""
    columns = {
        "offspring_share": "offspring among the selected (%)",
        "elite_offspring_share": "offspring among the m elite (%)",
    }
    by_generation = share.groupby("generation")
    frame = pd.DataFrame(
        {
            label: by_generation[column].agg(
                lambda v: f"{100 * v.mean():.1f} [{100 * v.min():.0f}, {100 * v.max():.0f}]"
            )
            for column, label in columns.items()
        }
    )
    return markdown_table(frame)


def variants_markdown(studies: dict[str, dict[str, pd.DataFrame]]) -> str:
    """`variants` as Markdown: ESGD − population baseline paired by seed (mean ± 95 % CI);
    shares are means over seeds and generations."""
    return markdown_table(variants(studies), index=False)


def write_tables(
    individuals: pd.DataFrame, top_k: int, elite: int, out_dir: Path
) -> dict[str, pd.DataFrame]:
    """Every table as Parquet in `out_dir`; returns them by name."""
    tables = {
        INDIVIDUALS: individuals,
        CURVES: curves(individuals, top_k),
        TABLE1: table1(individuals, top_k),
        TABLE6: table6(individuals),
        OFFSPRING_SHARE: offspring_share(individuals, elite),
    }
    for name, frame in tables.items():
        write_table(frame, out_dir / f"{name}.parquet")
    return tables


def read_tables(folder: str | Path) -> dict[str, pd.DataFrame]:
    """The tables of a study folder (results/esgd/<net>), by name."""
    names = (INDIVIDUALS, CURVES, TABLE1, TABLE6, OFFSPRING_SHARE)
    return {name: pd.read_parquet(Path(folder) / f"{name}.parquet") for name in names}
