"""Sweeps: a multirun's life, compose → resume → check → plan → train → consolidate, read top to
bottom in `sweep`.

- `sweep`: the steps in order, which the Hydra launchers (hydra_plugins/) call
- `compose`: each job's config as Hydra composes it, once per set of config-group choices
- `resume`: the index of a folder's finished runs (finished.json), and each job's resume check
- the check step is `training.run.check`: its probes (`training.first_step`, `restore_probe`,
  `memory`, kept per sweep folder by `training.preflight`) serve a single run, a stack's
  grouping and its checkpoints too, so they live in harness.training, below the sweeps
- `plan`: which engine trains each job, grouped into tasks, in which process
- `execute`: the tasks trained, here or over worker processes; `gpu_workers`: how many share a
  GPU; `progress`: the progress line
- `consolidate`: the folder's finished runs into its tables; `callback`: the Hydra callback that
  guards and indexes the folder before, and consolidates it after
- `integrity`: a study's fsck (`harness-collect --check`)
- `jobs`: the jobs a sweep expands into (a grid, a tuning study's rounds), what identifies it
"""
