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
# # Batch size
#
# Final test accuracy and training time (optimisation only, evaluations excluded) against the
# batch size, per net and setting, each at its best learning rate for that batch size. Points
# are the mean over seeds with min-max error bars.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/course`).

# %%
# %matplotlib inline
from harness import analysis, report

sweep = report.sweep_from_env()
runs, curves = report.load_sweep(sweep)
print(f"{sweep}: {len(runs)} runs; batch sizes {sorted(runs['batch_size'].unique())}")

# %%
report.show(report.batch_size_figure, runs)

# %% [markdown]
# ## The values drawn

# %%
analysis.batch_size_table(runs)[
    ["net", "setting", "batch_size", "lr", "n_seeds", "n_diverged"]
    + ["final_test_accuracy_mean", "final_test_accuracy_ci", "train_time_s_mean"]
]
