"""Evolutionary SGD (ESGD; Cui, Zhang, Tüske and Picheny, NeurIPS 2018) on the stacked engine.

A population of mu networks of one architecture alternates, for K generations, between

1. an **SGD phase** (`trainer`): each individual draws a plan from the pool (an optimizer, its
   hyper-parameters, a learning-rate schedule; `pool`) and takes K_s steps, on this generation's
   stretch of the schedule (schedules span the whole run, so late generations anneal; with
   `anneal` < 1, the rates plans are drawn with fall too). Every `backoff_every` steps its
   fitness is measured; an individual whose fitness got worse **backs off**: its weights,
   optimizer state and schedule are restored to the last check;
2. an **evolution phase** (`operators`): K_v times, lambda offspring are made by intermediate
   recombination of rho random parents plus Gaussian mutation, and mu survivors are chosen from
   parents + offspring by m-elitist selection (the m fittest, plus mu - m drawn at random from
   the rest).

Fitness is the cross-entropy on the validation split, `data.val_size` examples held out of the
*training* data (`data`); the test set is only evaluated for the tables. Back-off and elitism
together guarantee that the best fitness never rises from one generation to the next.

The whole population trains as one `StackedMLP` on one mini-batch per step, shared by every
individual (that is what makes stacking fast); individuals differ in initial weights,
optimizer, hyper-parameters and schedule. `methods` runs ESGD and the baselines of the paper's
Table 1 with the same machinery at equal compute; `tables` and `figures` make the results;
`app` is the Hydra entry point: ``python -m harness.esgd [overrides]`` (``experiment=esgd``).
"""
