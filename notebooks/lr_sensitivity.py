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
# # Learning-rate sensitivity
#
# Final training loss, validation accuracy and test accuracy against the learning rate (log
# scale), per net and optimizer, at the reference batch size. Points are the mean over seeds with
# min-max error bars; a star marks the best learning rate (highest mean final *validation*
# accuracy: the test set only reports), a cross at the panel's edge a learning rate at which a
# seed diverged.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/course`).

# %%
# %matplotlib inline
from IPython.display import Markdown

from harness import analysis, report

sweep = report.sweep_from_env()
runs, curves = report.load_sweep(sweep)
batch_size = analysis.reference_batch_size(runs)
# Every config at that batch size, and the best learning rate of each net and setting.
per_lr, best = analysis.lr_table(runs, batch_size)
print(f"{sweep}: {len(runs)} runs; learning rates at batch {batch_size}:")
per_lr.groupby(["net", "setting"])["lr"].unique()

# %%
report.show(report.lr_sensitivity_figure, runs, batch_size)

# %% [markdown]
# ## The best learning rate per net and setting
#
# Mean ± 95 % confidence interval over seeds (t distribution).

# %%
Markdown(report.markdown_table(report.final_metrics_table(best, "final_test_accuracy")))

# %%
Markdown(report.markdown_table(report.final_metrics_table(best, "final_train_loss")))
