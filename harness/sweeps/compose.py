"""The configs of a sweep's jobs, composed once per set of config-group choices.

Hydra composes every job of a sweep from scratch (its defaults list, every YAML file read
again): ~80 ms a job here, and the basic sweeper composes each job twice (to validate the batch,
then in the launcher). Hydra builds a job's config in two steps (ConfigLoaderImpl): the configs
its config-group overrides choose (`model=net1 optimizer=adam`: shared by many jobs), then its
value overrides applied to them (`optimizer.lr=0.1 seed=3`). `SweepComposer` does the first step
once per set of group overrides, with Hydra, and the second for each job, with Hydra's own
function, on a working copy of that template. tests/test_launcher.py checks that its configs are
Hydra's.
"""

# No `from __future__ import annotations`: Hydra's plugin scan loads this module outside
# sys.modules, where dataclasses cannot resolve string annotations.

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from omegaconf import DictConfig, read_write


@dataclass
class _Template:
    config: DictConfig  # as Hydra composed it from the group overrides alone
    working: DictConfig | None = None  # a copy that jobs' value overrides are applied to
    keys: tuple[str, ...] | None = None  # the keys those overrides set in `working`


def _is_assignment(override: Override) -> bool:
    return override.type == OverrideType.CHANGE and not isinstance(override.value(), dict)


class SweepComposer:
    """Composes the jobs of the sweep `master` (Hydra's multirun config) as
    `loader.load_sweep_config` would."""

    def __init__(self, loader: ConfigLoader, master: DictConfig) -> None:
        self.loader, self.master = loader, master
        self.parser = OverridesParser.create()
        self.hydra_overrides = list(master.hydra.overrides.hydra)
        # The config repository as Hydra sets it up for these overrides (search path included):
        # it tells config-group overrides from value overrides, as Hydra does.
        _, self.repo = loader._parse_overrides_and_create_caching_repo(
            master.hydra.job.config_name, self.hydra_overrides
        )
        self.templates: dict[tuple[str, ...], _Template] = {}
        self.parsed: dict[str, Override] = {}

    def _is_group_override(self, override: Override) -> bool:
        # Hydra's own test (defaults_list.Overrides): a non-dict value for a config group.
        value = override.value()
        return not isinstance(value, dict) and self.repo.group_exists(override.key_or_group)

    def _parse(self, overrides: Sequence[str]) -> list[Override]:
        # Parsing an override costs ~1 ms (Hydra's ANTLR grammar): each distinct one is parsed
        # once, most recur in many jobs (the options of each sweep axis).
        missing = [o for o in overrides if o not in self.parsed]
        self.parsed.update(zip(missing, self.parser.parse_overrides(missing), strict=True))
        return [self.parsed[o] for o in overrides]

    def template(self, overrides: Sequence[str]) -> _Template:
        """The composition of the job's config-group overrides (done once per set of them)."""
        key = tuple(o.input_line for o in self._parse(overrides) if self._is_group_override(o))
        if key not in self.templates:
            self.templates[key] = _Template(self.loader.load_sweep_config(self.master, list(key)))
        return self.templates[key]

    def compose(self, overrides: Sequence[str]) -> DictConfig:
        """The config of the job with these sweep overrides. It is a working copy shared by the
        jobs with the same group overrides: valid until the next call."""
        template = self.template(overrides)
        parsed = self._parse(overrides)
        values = [o for o in parsed if not self._is_group_override(o)]
        # Jobs of a sweep set the same keys: applying a job's plain assignments over the previous
        # job's leaves what a fresh copy would hold. Anything else starts from a fresh copy.
        plain = all(_is_assignment(o) for o in values)
        keys = tuple(o.key_or_group for o in values) if plain else None
        if template.working is None or keys is None or keys != template.keys:
            template.working = copy.deepcopy(template.config)
        template.keys = keys
        config = template.working
        with read_write(config.hydra):
            ConfigLoaderImpl._apply_overrides_to_config(values, config)
            self._set_job_overrides(config, parsed)
        return config

    def _set_job_overrides(self, config: DictConfig, parsed: list[Override]) -> None:
        # What Hydra records of a job's overrides (ConfigLoaderImpl._load_configuration_impl).
        task = [o for o in parsed if not o.is_hydra_override()]
        hydra = [o.input_line for o in parsed if o.is_hydra_override()]
        config.hydra.overrides.hydra = [*self.hydra_overrides, *hydra]
        config.hydra.overrides.task = [o.input_line for o in task]
        dirname = config.hydra.job.config.override_dirname
        config.hydra.job.override_dirname = get_overrides_dirname(
            overrides=task,
            kv_sep=dirname.kv_sep,
            item_sep=dirname.item_sep,
            exclude_keys=dirname.exclude_keys,
        )


class ComposingConfigLoader:
    """Hydra's config loader, with `load_sweep_config` answered by a `SweepComposer`: installed
    by the stacked launcher for the basic sweeper's check of a batch, which composes every job
    once before the launcher does. It composes the job's config-group choices (what can fail
    in composing); the launcher then composes every job, and applies its value overrides,
    before it writes anything. What it returns is only for that check: the job's template."""

    def __init__(self, loader: ConfigLoader, composer: SweepComposer) -> None:
        self.loader, self.composer = loader, composer

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> Any:
        return self.composer.template(sweep_overrides).config

    def compose(self, overrides: list[str]) -> DictConfig:
        """A job's whole config (the composer's working copy: read it before the next call)."""
        return self.composer.compose(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)
