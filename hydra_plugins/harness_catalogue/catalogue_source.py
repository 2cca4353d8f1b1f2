"""`optimizer=<name>` for every optimizer of harness.optimizers.catalogue, without a file per
optimizer, and `optimizer=<module>.<Class>` for any other optimizer class Python can import
(a user's own: harness.optimizers.own).

A search-path plugin appends the source `catalogue://harness` after the config folder, so a
curated file of conf/optimizer/ always wins; the source answers only for the `optimizer` group,
and imports the optimizer packages (harness.optimizers.catalogue, ~2 s) only when Hydra asks it for
a name the folder does not hold, or for the list of every option.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

GROUP = "optimizer"


class CatalogueSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="harness-catalogue", path="catalogue://harness")


def _name(config_path: str) -> str | None:
    """`lion` for 'optimizer/lion' (or 'optimizer/lion.yaml'); None outside the group."""
    group, _, name = config_path.strip("/").partition("/")
    return name.removesuffix(".yaml") if group == GROUP and name and "/" not in name else None


def _is_import_path(name: str) -> bool:
    """Whether an option is a class's import path (`myopt.HalfSGD`): names of files and of the
    catalogue have no dots."""
    return "." in name


class CatalogueConfigSource(ConfigSource):
    @staticmethod
    def scheme() -> str:
        return "catalogue"

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") == GROUP

    def is_config(self, config_path: str) -> bool:
        name = _name(config_path)
        if name is None:
            return False
        if _is_import_path(name):  # loading it says in one line what is wrong with it, if anything
            return True
        from harness.optimizers.catalogue import catalogue

        return name in catalogue()

    def load_config(self, config_path: str) -> ConfigResult:
        from harness.optimizers.catalogue import config_of
        from harness.optimizers.own import config_of_target

        name = _name(config_path)
        if name is not None and _is_import_path(name):
            config = config_of_target(name)
        else:
            config = config_of(name) if name is not None else None
        if config is None:
            raise ConfigLoadError(f"optimizer catalogue: no optimizer named {config_path}")
        return ConfigResult(
            config=OmegaConf.create(config),
            path=f"{self.scheme()}://{self.path}",
            provider=self.provider,
            header={"package": None},
        )

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        if not self.is_group(config_path) or results_filter == ObjectType.GROUP:
            return []
        from harness.optimizers.catalogue import catalogue

        return sorted(catalogue())
