"""Registers the harness's OmegaConf resolvers (harness.config.resolvers and
harness.tuning.resolvers, which importing harness registers) whenever Hydra starts: Hydra imports
every module of `hydra_plugins` before it composes a config, so the primary config's
`${folder_excluded_keys:}` resolves in any composition (harness-train, `hydra.compose` in a test
or a notebook), whether or not `harness` was imported first."""

import harness  # noqa: F401
