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
# # The optimizer zoo: which optimizer, tuned on held-out data, trains the course nets best?
#
# Every optimizer of the catalogue that trains on net1-net3 (`harness-optimizers`), tuned in
# three phases: 10 random rates at 2,000 iterations (`experiment=zoo_tune`), the 3 best of
# those again at the course's 20,000 (`experiment=zoo_shortlist`), then the rate chosen on the
# 10,000 held-out images with 3 fresh seeds (`experiment=zoo`). The test set chooses nothing:
# it reports.
#
# The evaluation study is `$HARNESS_SWEEP` (default: the committed `results/zoo`); its tuning
# study, the one its rates trace back to (`report.tuning_study`: `results/zoo_tune`).

# %%
# %matplotlib inline
from collections import Counter

import pandas as pd
from IPython.display import Markdown, display

from harness import analysis, report, style

sweep = report.sweep_from_env("zoo")
runs, curves = report.load_sweep(sweep)
tuning = report.tuning_study_or_rates(sweep, runs)
versus = analysis.against_reference(runs, style.COURSE_OPTIMIZERS)
print(f"{sweep}: {len(runs)} runs, {runs['optimizer'].nunique()} optimizers; {tuning.sweep}")

# %% [markdown]
# ## Who beats the course's best?
#
# Per net, every optimizer at its rate chosen on validation against the best of the course's
# nine (chosen the same way): its final test accuracy and the gain over that reference, with
# its 95 % interval (Welch's t over the seeds). Better or worse only where the interval leaves
# zero out.

# %%
for net in versus["net"].unique():
    verdicts = Counter(versus.loc[versus["net"] == net, "verdict"])
    display(Markdown(f"### {net}: " + ", ".join(f"{n} {v}" for v, n in verdicts.most_common())))
    display(Markdown(report.markdown_table(report.reference_table(versus, net), index=False)))

# %% [markdown]
# ## The course's figure, per net
#
# Training loss and test error against iterations; in colour the best of each net on
# validation and the course's best, the others grey.

# %%
for net in report.nets_of(runs):
    display(report.show(report.course_figure, runs, curves, net))

# %% [markdown]
# ## Quality against the cost of a step
#
# An optimizer's own step costs 100x more in some than in others: each setting's final test
# error against one step of its model timed alone. The dashed line joins the settings no other
# beats in both step time and validation error (the test error they are drawn at only reports).

# %%
report.show(report.quality_against_step_time_figure, runs)

# %% [markdown]
# ## Which are cheap to tune?
#
# From the tuning study: each setting's validation error of the trial picked after one trial
# and after all ten (expected over the orders of the trials). A short bar is cheap to tune.

# %%
report.show(report.tuning_gain_figure, *report.tuning_curves_of(tuning))

# %% [markdown]
# ## Which fail, and why
#
# The catalogue's optimizers that are refused before training (in one line each), and the
# evaluation's runs that diverged.

# %%
catalogue = pd.read_csv(report.REPO / "results" / "zoo" / "catalogue.csv")
refused = catalogue[catalogue["outcome"] == "refused"]
display(Markdown(report.markdown_table(refused.drop(columns="step_time_alone_s"), index=False)))
diverged = runs[runs["status"] == "diverged"]
print(f"{len(diverged)} of {len(runs)} evaluation runs diverged")
if len(diverged):
    columns = ["model", "optimizer", "lr", "seed", "diverged_at"]
    display(Markdown(report.markdown_table(diverged[columns], index=False)))
