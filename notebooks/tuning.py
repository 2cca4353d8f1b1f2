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
# # Tuning curves: which optimizer is good with little tuning?
#
# A tuning study (`harness-train -m experiment=course_tune`) runs N trials per net and
# optimizer, drawn from the optimizer's search space. A user with a budget of k trials runs k of
# them and keeps the one with the best final **validation** accuracy. The tuning curve is the
# expected validation accuracy of that pick over every k-subset of the N trials, and the
# expected **test** accuracy of the same pick: what that user would report (the test set
# chooses nothing). A steep curve needs tuning; a flat one is good from the first trial.
#
# The sweep folder is `$HARNESS_SWEEP` (default: the committed `results/course_tune`); the keys
# it tuned come from its `tuning.json`. A study whose values came from an earlier one (a
# shortlist, an evaluation phase such as `results/course`) shows that one's trials
# (`report.tuning_study`); a sweep that tuned nothing, its own rates as trials.

# %%
# %matplotlib inline
from IPython.display import Markdown

from harness import analysis, report
from harness.tuning import selection, tuning_curves

sweep = report.sweep_from_env("course_tune")
study = report.tuning_study_or_rates(sweep, report.load_sweep(sweep)[0])
runs, tuned, curves = study.runs, study.keys, study.curves
print(f"{study.sweep}: {len(runs)} runs, {analysis.selection_text(runs)}; tuned: {' '.join(tuned)}")

# %%
report.show(report.tuning_curve_figure, curves)

# %% [markdown]
# ## What tuning gains, one row per setting
#
# The same picks after one trial and after the whole budget, the best on top: a short bar is
# cheap to tune. Where a study has more settings than curves can tell apart (the optimizer
# zoo), this is the figure to read.

# %%
report.show(report.tuning_gain_figure, curves)

# %% [markdown]
# ## Expected quality after k trials
#
# 'validation / test', in %: the pick's expected final validation accuracy, and its test
# accuracy.

# %%
Markdown(report.markdown_table(tuning_curves.tuning_table(curves), index=False))

# %% [markdown]
# ## What the whole budget chooses
#
# Per net and setting, the trial the validation set picks among all N: the settings the
# evaluation phase (`harness-train -m experiment=course`) trains with fresh seeds.

# %%
Markdown(report.markdown_table(selection.selection_table(str(study.sweep), tuned, []), index=False))
