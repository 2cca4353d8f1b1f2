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
# batch size, per net and setting, each at its best learning rate for that batch size; then the
# iterations and seconds to a target accuracy (on validation where the study has it). Points
# are the mean over seeds with min-max error bars. In the `batch_size` study a setting is an
# optimizer with a budget (`study.budget`: equal epochs or equal steps) and a rule that scales
# the learning rate with the batch (`study.lr_scaling`).
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/batch_size`); the target
# accuracy is `$HARNESS_TARGET` (default: 0.97).

# %%
# %matplotlib inline
from harness import analysis, report

sweep = report.sweep_from_env("batch_size")
runs, curves = report.load_sweep(sweep)
print(f"{sweep}: {len(runs)} runs; batch sizes {sorted(runs['batch_size'].unique())}")

# %%
report.show(report.batch_size_figure, runs)

# %% [markdown]
# ## Time to a target accuracy
#
# Each setting at its fastest learning rate for each batch size; a batch size at which no
# learning rate reached the target with every seed is left out of its line.

# %%
target = report.target_from_env(analysis.quality(runs))
ttt = analysis.summarize_time_to_target(analysis.time_to_target(runs, curves, target))
report.show(report.time_to_target_by_batch_figure, ttt, target)

# %% [markdown]
# ## The values drawn

# %%
analysis.batch_size_table(runs)[
    ["net", "setting", "batch_size", "lr", "n_seeds", "n_diverged"]
    + ["final_test_accuracy_mean", "final_test_accuracy_ci", "train_time_s_mean"]
]
