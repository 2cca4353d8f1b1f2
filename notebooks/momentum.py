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
# # Momentum, and any other numeric key a sweep varies
#
# Final and best test accuracy and the time per step against each numeric config key the sweep
# varies (momentum, weight decay, ...), each setting (Nesterov or classical, ...) at its best
# learning rate for each value; then momentum and learning rate together: the final accuracy
# against the effective step lr / (1 − μ), one line per momentum. Points are the mean over seeds
# with min-max error bars.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/momentum`).

# %%
# %matplotlib inline
from IPython.display import display

from harness import analysis, report

sweep = report.sweep_from_env("momentum")
runs, curves = report.load_sweep(sweep)
keys = [k for k in analysis.swept_keys(runs) if k != analysis.BATCH_KEY]
print(f"{sweep}: {len(runs)} runs; numeric keys it varies: {', '.join(keys) or 'none'}")

# %%
for key in keys:
    figure = report.show(report.key_figure, runs, key)
    if figure is not None:
        display(figure)

# %% [markdown]
# ## The effective step
#
# Lines of different momentum that fall on one curve say that only lr / (1 − μ) matters.

# %%
report.show(report.effective_step_figure, runs)

# %% [markdown]
# ## The values drawn
#
# Each setting and value at its best learning rate: mean ± 95 % confidence interval over seeds.

# %%
final, _, best, *_ = analysis.summary_metrics(runs)
columns = [f"{m}_{s}" for m in (final, best) for s in ("mean", "ci")] + ["step_time_s_mean"]
for key in keys:
    table = analysis.axis_table(runs, key)
    display(table[["net", "line", key, "lr", "n_seeds", "n_diverged", *columns]])
