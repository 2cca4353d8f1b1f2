"""Training one run, or the members of one stack, from a composed config.

- `job`: a run to train, with what follows from its config (problem, device, run length, keys)
  resolved once, and its data set, loaded once per process
- `building`: the one optimizer-and-schedule builder; `schedules`: schedules torch lacks
- `engine`: the one training loop (K members on shared mini-batches; a run alone is K = 1);
  `stepping`: closures, second-order backward, train/eval modes, update paths
- `setup`: what a run trains on and how long
- `run`: one run from a config: check, build, train (its record: harness.results.recording)
- the checks before training, which a sweep makes once for all its jobs (harness.sweeps.sweep):
  `first_step` (an optimizer's first step, and its step's time alone), `restore_probe`
  (whether its state_dict holds all it carries), `memory` (what a probe may allocate), kept per
  sweep folder by `preflight`
- `checkpoint` / `restoring`: a training saved at intervals and gone on from, bit for bit
"""
