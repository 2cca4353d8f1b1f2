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
# # Summary
#
# Final metrics per net and setting (each optimizer, and any other config key the sweep
# varies) at the best learning rate, time to a target accuracy (on validation), and performance
# profiles
# across problems. The same tables as `harness-report`'s `summary.md`.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/course`); the target
# accuracy is `$HARNESS_TARGET` (default: 0.97).

# %%
# %matplotlib inline
from IPython.display import Markdown, display

from harness import analysis, report

sweep = report.sweep_from_env()
runs, curves = report.load_sweep(sweep)
quality = analysis.quality(runs)  # accuracy (MNIST) or rmse (ratings)
target = report.target_from_env(quality)  # None: no time to target
final, train_loss, best_quality, *_ = analysis.summary_metrics(runs)
summary = analysis.summarize(runs)
batch_size, best = analysis.best_at_reference_batch(runs)
print(f"{sweep}: {len(runs)} runs, {len(summary)} configs; test {quality}, target {target}")

# %% [markdown]
# ## The course's figure: every optimizer on one plot, per net
#
# Training loss above, test error (100 − accuracy) below on log axes, the final stretch
# zoomed, the settings ranked by their final mean (the tables below give the numbers).

# %%
for net in report.nets_of(runs):
    display(report.show(report.course_figure, runs, curves, net))

# %% [markdown]
# ## Final metrics at the best learning rate
#
# Mean ± 95 % confidence interval over seeds (t distribution), accuracies in %; bold: the best
# optimizer of each net.

# %%
Markdown(report.markdown_table(report.final_metrics_table(best, final)))

# %%
Markdown(report.markdown_table(report.final_metrics_table(best, train_loss)))

# %%
Markdown(report.markdown_table(report.final_metrics_table(best, best_quality)))

# %% [markdown]
# ## Along every key the sweep varies
#
# Final and best test quality and the time per step against each numeric config key the sweep
# varies beyond its choice names (momentum, weight decay, embedding table size, ...); each
# setting at its best learning rate per value.

# %%
for key in analysis.swept_keys(runs):
    if key != analysis.BATCH_KEY:  # the batch_size notebook draws it
        display(report.show(report.key_figure, runs, key))

# %% [markdown]
# ## Quality after the same training time

# %%
Markdown("\n".join(report.quality_at_time_markdown(runs, curves)))

# %% [markdown]
# ## Time to target
#
# Iterations and training seconds until validation quality (test quality for a study without
# a validation split) first reaches the target, at each setting's fastest learning rate (every
# seed must reach it).

# %%
if target is None:
    print(f"No target for {quality}: set HARNESS_TARGET.")
else:
    ttt = analysis.time_to_target(runs, curves, target)
    target_summary = analysis.summarize_time_to_target(ttt)
    display(report.show(report.time_to_target_figure, target_summary, target))
    display(Markdown(report.markdown_table(report.time_to_target_table(target_summary))))

# %% [markdown]
# ## Performance profiles
#
# Problems are the combinations of net and batch size; on each, an optimizer is at its best
# learning rate. The profile of an optimizer is the share of problems on which its cost is
# within a factor tau of the best optimizer's.

# %%
costs = analysis.profile_tables(runs, curves, target)
report.show(report.performance_profile_figure, costs, target, quality)

# %%
for name, matrix in costs.items():
    if len(matrix):
        display(Markdown(f"**{report.PROFILE_LABELS[name]}**"))
        display(Markdown(report.markdown_table(report.profile_summary_table(matrix))))

# %% [markdown]
# ## Every configuration

# %%
Markdown(report.markdown_table(report.configs_table(summary, best), index=False))
