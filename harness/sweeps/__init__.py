"""Sweeps: a multirun's jobs from planning to their written results.

- `sweep`: the Hydra callback that guards, indexes (resume) and consolidates a sweep folder,
  and its progress line
- `launcher`: which engine trains each job, in which process (tasks, worker processes)
- `planning`: what a sweep's first-step checks, step times and probes measured, kept in its
  folder for its resumes and its workers
- `gpu_workers`: how many worker processes share one GPU
The Hydra plugins that call them are in hydra_plugins/ (Hydra finds plugins there).
"""
