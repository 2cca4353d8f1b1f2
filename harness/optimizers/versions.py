"""The versions of what a run's optimizer comes from, recorded in its run.json
(`optimizer_versions`): the optimizer libraries whose classes the zoo ranks, and a user's own
class, so that a verdict names the implementation it rests on (a library's release, or a
changed file of one's own). torch and the harness's own optimizers are `versions`' torch and
optimizer-harness."""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from importlib import metadata
from typing import Any

import torch

from harness.config.class_paths import target_object

# The catalogue's libraries (harness.optimizers.catalogue): recorded always.
LIBRARIES = ("pytorch-optimizer", "schedulefree")
# Recorded where installed.
OPTIONAL_LIBRARIES = ("heavyball",)
# Top-level packages whose version the libraries above, or run.json's `versions`, give.
VERSIONED_PACKAGES = ("torch", "pytorch_optimizer", "schedulefree", "heavyball", "harness")


@functools.cache  # the installed packages do not change during a sweep
def library_versions() -> dict[str, str]:
    """{distribution: version} of the optimizer libraries ("not installed" for one of
    LIBRARIES that is not; one of OPTIONAL_LIBRARIES only where installed)."""
    found = {}
    for name in (*LIBRARIES, *OPTIONAL_LIBRARIES):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name in LIBRARIES:
                found[name] = "not installed"
    return found


@functools.cache  # once per class and process: the code that trains is the code imported
def class_version(cls: type) -> str:
    """The version of a class outside the libraries: its module's `__version__` (or its
    top-level package's), else `sha256:<hex>` of the file that defines it, else "unknown"."""
    module_name = cls.__module__
    for name in (module_name, module_name.split(".")[0]):
        version = getattr(sys.modules.get(name), "__version__", None)
        if version is not None:
            return str(version)
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:  # a built-in class
        path = None
    if path is None:
        return "unknown"
    with open(path, "rb") as source:
        return f"sha256:{hashlib.sha256(source.read()).hexdigest()}"


def _targets(config: Any) -> list[str]:
    if isinstance(config, dict):
        found = [config["_target_"]] if isinstance(config.get("_target_"), str) else []
        return found + [t for v in config.values() for t in _targets(v)]
    if isinstance(config, list):
        return [t for v in config for t in _targets(v)]
    return []


def optimizer_versions(config: dict[str, Any]) -> dict[str, str]:
    """`library_versions()`, then {`_target_`: `class_version`} of each optimizer class the
    resolved run config `config` names outside VERSIONED_PACKAGES (a user's own)."""
    found = dict(library_versions())
    for target in _targets(config):
        try:
            cls = target_object(target)
        except Exception:  # a config read where its classes are not installed
            continue
        if (
            isinstance(cls, type)
            and issubclass(cls, torch.optim.Optimizer)
            and cls.__module__.split(".")[0] not in VERSIONED_PACKAGES
        ):
            found[target] = class_version(cls)
    return found
