"""Sweeps: a multirun's jobs from planning to their written results.

- `jobs`: the jobs a sweep expands into (a grid as Hydra's basic sweeper, a tuning study's
  rounds), how many it plans, what identifies it
- `sweep`: the Hydra callback that guards, indexes and consolidates a sweep folder
- `finished`: the index of a folder's finished runs, and the resume check of every job
- `progress`: the progress line (runs done, time elapsed and left)
- `launcher`: which engine trains each job, in which process (tasks, worker processes)
- `gpu_workers`: how many worker processes share one GPU
The Hydra plugins that call them are in hydra_plugins/ (Hydra finds plugins there).
"""
