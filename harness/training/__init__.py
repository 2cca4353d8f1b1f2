"""Training one run, or the members of one stack, from a composed config.

- `job`: a run to train, with what follows from its config (problem, device, run length, keys)
  resolved once; `datasets`: its data set, loaded once per process, and its run length
- `building`: the one optimizer-and-schedule builder; `schedules`: schedules torch lacks
- `preflight`: what is measured of an optimizer config before a sweep trains it (first step,
  step time alone, stacking, sharing and restore probes), once, kept in the sweep's folder
- `engine`: the one training loop (K members on shared mini-batches; a run alone is K = 1);
  `stepping`: closures, second-order backward, train/eval modes, update paths
- `setup`: what a run trains on and how long; `first_step`: an optimizer's first-step check and
  its step's time alone
- `run`: one run from a config: validate, build, train; `record`: its results written
- `checkpoint` / `restoring`: a training saved at intervals and gone on from, bit for bit;
  `restore_probe`: whether an optimizer's state_dict holds all it carries
- `memory`: what a probe may allocate
"""
