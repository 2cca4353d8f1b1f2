"""`${tuned:optimizer.lr}`, the resolver of evaluation presets: the value a tuning study chose for
this job. Registered when harness is imported, beside the configs' other resolvers
(harness.config.resolvers)."""

from __future__ import annotations

from omegaconf import OmegaConf


def tuned(key: str, *, _root_):
    """The value of `key` the tuning study of this job's preset chose for it
    (harness.tuning.selection, imported only when an evaluation preset uses it)."""
    from harness.tuning.selection import resolve_tuned

    return resolve_tuned(key, _root_=_root_)


OmegaConf.register_new_resolver("tuned", tuned, replace=True)
