"""Training one run, or the members of one stack, from a composed config.

- `job`: a run to train, with its problem resolved once; `datasets`: its data set, loaded once
  per process, and its run length in steps
- `building`: anything from a config, the device it names, the one optimizer-and-schedule
  builder
- `engine`: the one training loop (K members on shared mini-batches; a run alone is K = 1);
  `stepping`: closures, second-order backward, train/eval modes
- `run`: one run from a config: validate, build, train, write its results
- `checkpoint` / `restoring`: a training saved at intervals and gone on from, bit for bit
- `memory`: what a probe may allocate
"""
