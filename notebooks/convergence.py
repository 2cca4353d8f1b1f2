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
# # Convergence
#
# Training loss and test quality (accuracy, or the RMSE of ratings) against iterations and
# against training time, a row per net and one curve per setting (each optimizer, and any
# other config key the sweep varies) at its best learning rate (best mean final validation
# quality: the test set only reports), as in the course figure. The line is the mean over
# seeds, the band their min-max; a cross marks a curve that ends because a seed diverged.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/course`).

# %%
# %matplotlib inline
from IPython.display import display

from harness import analysis, report

sweep = report.sweep_from_env()
runs, curves = report.load_sweep(sweep)
quality = analysis.quality(runs)  # accuracy (MNIST) or rmse (ratings)
print(f"{sweep}: {len(runs)} runs, {runs['status'].eq('diverged').sum()} diverged")

# %% [markdown]
# ## The course's figure: every optimizer on one plot, per net
#
# Training loss above, test quality below (accuracy drawn as error, 100 − accuracy, on a log
# axis: where the runs end up stays apart), the last quarter of the run zoomed on the right,
# and the settings ranked by their final mean. Read the ranking off the legend; the band says
# whether two neighbours are apart (bands that overlap are seeds apart, not optimizers).

# %%
for net in report.nets_of(runs):
    display(report.show(report.course_figure, runs, curves, net))

# %% [markdown]
# ## Training loss, every net

# %%
report.show(report.convergence_figure, runs, curves, "train_loss")

# %% [markdown]
# ## Test quality

# %%
report.show(report.convergence_figure, runs, curves, f"test_{quality}")

# %% [markdown]
# ## Test quality against training time
#
# The same curves against optimisation seconds (evaluations excluded): what each setting reaches
# in the same time.

# %%
report.show(report.convergence_figure, runs, curves, f"test_{quality}", x="time_s")

# %% [markdown]
# ## Learning rate and momentum chosen by self-tuning optimizers
#
# YellowFin sets its own learning rate α and momentum μ at every step; they are recorded as the
# curves `lr` and `momentum`. Skipped when no optimizer of the sweep tunes itself.

# %%
report.show(report.tuned_hyperparameters_figure, runs, curves)

# %% [markdown]
# ## The configurations drawn
#
# Per net and setting, the best learning rate at the reference batch size; mean and 95 %
# confidence interval (t distribution) over seeds.

# %%
batch_size, best = analysis.best_at_reference_batch(runs)
best[
    ["net", "setting", "lr", "batch_size", "n_seeds", "n_diverged"]
    + [f"final_test_{quality}_{s}" for s in ("mean", "ci")]
    + [f"final_train_loss_{s}" for s in ("mean", "ci")]
]
