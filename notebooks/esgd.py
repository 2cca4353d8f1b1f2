# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # ESGD: evolutionary SGD against its baselines
#
# Evolutionary SGD (Cui et al., NeurIPS 2018) trains a population of networks: each generation,
# every individual draws an optimizer, hyper-parameters and a schedule from a pool for an SGD
# phase (backing off when its fitness gets worse), then offspring are made by recombination and
# mutation and m-elitist selection keeps the population's size. Fitness is the loss on a
# held-out split of the training data. Every method gets the same compute: mini-batch steps ×
# models (evaluations not counted). See `harness/esgd/`.
#
# The study folder is `$HARNESS_ESGD` (default: the committed `results/esgd/net2`), written by
# `harness-train experiment=esgd`.

# %%
# %matplotlib inline
import json
import os
from pathlib import Path

from IPython.display import Markdown

from harness.esgd import figures, tables
from harness.report import REPO

folder = Path(os.environ.get("HARNESS_ESGD") or REPO / "results" / "esgd" / "net2")
study = tables.read_tables(folder)
record = json.loads((folder / "esgd.json").read_text())
e = record["config"]["esgd"]
print(
    f"{folder}: mu={e['population']}, lambda={e['offspring']}, m={e['elite']}, "
    f"K={e['generations']}, K_s={e['sgd_steps']}, K_v={e['evolution_steps']}, "
    f"anneal={e.get('anneal', 1.0)}, "
    f"seeds: {sorted(map(int, study['table1']['seed'].unique()))}; "
    f"{record['compute_per_method']:,} steps x models per method; "
    f"wall time {record['wall_time_s'] / 60:.1f} min"
)

# %% [markdown]
# ## Fitness against compute
#
# Left: held-out loss of the best individual (mean over seeds) and, as a band, the range over
# the top k. Right: the best individual's test error (band: min-max over seeds). A generation of
# a baseline is a checkpoint after the same compute as an ESGD generation.

# %%
figures.fitness_figure(study["curves"], e["top_k"])

# %% [markdown]
# ## Table 1: best individual and top-k range after the last generation
#
# Means over seeds ± 95 % confidence interval (t distribution); then each method against ESGD,
# paired by seed.

# %%
Markdown(tables.table1_markdown(study["table1"], e["top_k"]))

# %%
Markdown(tables.comparison_markdown(study["table1"]))

# %% [markdown]
# ## Table 6: the optimizer of the best individual, per generation
#
# The individual with the best fitness after each SGD phase (first seed), its optimizer as the
# paper's Table 6 writes it (lr: its plan's rate, annealed where the study anneals), the rate
# its first step used (the schedule's position included), and whether the best survivor of that
# generation is a new offspring. Then over seeds: the best individual's optimizer class and its
# median rates per generation. The figure counts the best individual's optimizer over seeds,
# shows its learning rate, and the share of offspring among the selected (Figure 2 of the
# paper).

# %%
Markdown(tables.table6_markdown(study["table6"], int(study["table1"]["seed"].min())))

# %%
Markdown(tables.table6_summary_markdown(study["table6"]))

# %%
figures.optimizer_figure(study["table6"], study["offspring_share"])

# %% [markdown]
# ## Figure 2: offspring among the selected
#
# New offspring among the mu selected (the m elite plus mu - m drawn at random from the rest),
# and among the m elite alone: offspring that won their place on fitness.

# %%
Markdown(tables.offspring_share_markdown(study["offspring_share"]))

# %% [markdown]
# ## Every individual
#
# One row per method × seed × generation × individual: its plan for the generation, back-offs,
# fitness before and after, test metrics, whether it is a new offspring and whether it survived.

# %%
individuals = study["individuals"]
individuals[individuals["method"] == "esgd"].head(40)
