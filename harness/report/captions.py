"""The caption under each figure of a report: what it shows and how to read it.

A figure's title only names it (a title of four lines was a paragraph a reader skipped, and
wrong claims hid in it: "on log axes" where only y is log); the caption, under the figure in
summary.md, says what is drawn, which rule chose what is drawn and how to read it.
"""

from __future__ import annotations

from harness.report.figures import COURSE_PREFIX

_BEST_LR = (
    "Each setting (optimizer, and any other key that varies) at its best learning rate, chosen "
    "on validation (mean over seeds)."
)
_CONVERGENCE = (
    f"{_BEST_LR} Left: the whole run; right: its final stretch zoomed. Line: mean over seeds; "
    "band: min-max over seeds; y on a log scale (accuracies as error, 100 - accuracy). The "
    "legend prints each setting's final value of the plotted metric and lists the settings by "
    "it, best first; validation chose the learning rates. A cross: where a curve with a "
    "diverged seed ends. In a zoo, each net's "
    "best few and the course's best are drawn in colour, the others as thin grey lines."
)

CAPTIONS = {
    "convergence_train_loss": _CONVERGENCE,
    "convergence_test_accuracy": _CONVERGENCE,
    "convergence_test_rmse": _CONVERGENCE,
    "convergence_time": _CONVERGENCE.replace("whole run;", "whole run against training seconds;")
    + " Runs end at different times: the zoom runs from the last quarter of the typical run to "
    "the end of the slowest coloured one, and its title gives the span.",
    "lr_sensitivity": (
        "Each final metric against the learning rate (log x), one line per setting, mean over "
        "seeds with min-max error bars; the best learning rate of each setting (on validation) "
        "starred. A flat top: a setting that forgives a mistuned rate."
    ),
    "batch_size": (
        "Final test quality and training time against the batch size (log2 x), each setting at "
        "its best learning rate per batch size; mean over seeds, min-max error bars."
    ),
    "time_to_target_by_batch": (
        "Iterations and seconds until validation quality first reaches the target, against the "
        "batch size; sizes where no learning rate got there with every seed are left out."
    ),
    "effective_step": (
        "Final test quality against lr / (1 - momentum), one line per setting and momentum: "
        "lines that fall on one curve say only the effective step matters."
    ),
    "time_to_target": (
        "Bars: iterations (top) and training seconds, evaluations excluded (bottom), until "
        "validation quality first reaches the net's target, at each setting's fastest learning "
        "rate; mean over seeds, min-max error bars; fastest first; 'not reached': no learning "
        "rate got there with every seed. Resolution: the evaluation interval. {rule}"
    ),
    "performance_profile": (
        "Per optimizer, the share of problems (net, and any other key that varies) on which its "
        "cost (final training loss, iterations or seconds to the target) is within a factor tau "
        "of the best optimizer's (log2 tau; tau = 1: it is the best); a failure (never reaching "
        "the target) never counts. Legend: AlgoPerf's score, the area under the first panel's "
        "profile from tau 1 to 4 over 3 (1: best on every problem), best first. In a zoo, each "
        "panel's 4 best (by the area under its profile) and the course's best are coloured, the "
        "others thin grey steps. {rule}"
    ),
    "tuned_hyperparameters": (
        "The learning rate and momentum a self-tuning optimizer set itself along the run, per seed."
    ),
    "tuning_curves": (
        "Expected best validation quality after k trials of the tuning search, per setting "
        "(the test quality of that pick beside it)."
    ),
    "tuning_gain": "Each setting after one trial of tuning and after all of them.",
    "quality_against_step_time": (
        "Final test error against the time of one step alone, measured on this machine (both "
        "log scales), each setting at its learning rate chosen on validation, mean over seeds "
        "with 95 % CI bars; numbered points, their names in the legend; dashed: the settings "
        "no other beats in both step time and validation quality; a cross: a setting with a "
        "diverged seed (never on the front). Each panel's y axis ends at 1.5 times its 75th "
        "percentile of error: settings beyond (front or not) are triangles on the top edge, "
        "counted in its title. In a zoo only the best few of each net and the course's "
        "best are coloured, the others grey."
    ),
}
COURSE_CAPTION = (
    "The course's slide of one net: every optimizer at its best learning rate (on validation), "
    "training loss above and test error below, against iterations, y on a log scale; zoomed "
    "final stretch on the right; the legend lists the settings by the final value it prints, "
    "best first. Line: mean over seeds; band: min-max."
)
KEY_CAPTION = (
    "Final and best test quality and the time per step against the key the sweep varies, "
    "each setting at its best learning rate per value; mean over seeds, min-max error bars."
)


def caption(name: str, rule: str = "") -> str:
    """The caption of figure `name`; `rule`: the sentence that says how the target was set
    (time to target and the profiles)."""
    if name.startswith(COURSE_PREFIX):
        return COURSE_CAPTION
    return CAPTIONS.get(name, KEY_CAPTION).format(rule=rule).strip()
