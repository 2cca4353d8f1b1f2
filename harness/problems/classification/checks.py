"""The classification problem's own config checks (`model`, `data`), each failing with one line
that names the key and the fix."""

from __future__ import annotations

from omegaconf import DictConfig

from harness.config.class_paths import located
from harness.config.validate import is_int, require_choice, require_int, require_number
from harness.errors import ConfigError
from harness.problems.classification.datasets import (
    ARRAY_NORMALIZATIONS,
    TORCHVISION_NORMALIZATIONS,
    load_arrays,
    load_torchvision,
)
from harness.problems.classification.mnist import NORMALIZATIONS
from harness.problems.classification.networks import (
    INITS,
    LENET_TARGET,
    MLP_TARGET,
    resolve_activations,
)


def validate_model(model: DictConfig) -> None:
    """The keys of the built-in models (MLP, LeNet); another model's constructor checks its
    own arguments when it is built."""
    target = located(model.get("_target_"))
    if target == LENET_TARGET:
        channels = model.get("channels")
        if not _positive_ints(channels) or len(channels) != 2:
            raise ConfigError(f"model.channels must be two positive integers, got {channels!r}")
        if not _positive_ints(model.get("hidden")):
            raise ConfigError(
                f"model.hidden must be a list of positive integers, got {model.get('hidden')!r}"
            )
        resolve_activations([1], [model.get("activation")])
        _validate_init(model)
        return
    if target != MLP_TARGET:
        return
    hidden = model.get("hidden")
    if not _positive_ints(hidden):
        raise ConfigError(f"model.hidden must be a list of positive integers, got {hidden!r}")
    activations = model.get("activations")
    if activations is None or isinstance(activations, str):
        raise ConfigError(f"model.activations must be a list of names, got {activations!r}")
    if len(hidden) > 0:
        resolve_activations(hidden, activations)
    _validate_init(model)


def _positive_ints(values) -> bool:  # noqa: ANN001 - anything a config holds
    return (
        values is not None
        and not isinstance(values, str)
        and all(is_int(v) and v > 0 for v in values)
    )


def _validate_init(model: DictConfig) -> None:
    require_choice(model.get("init"), "model.init", INITS)
    if (
        model.get("init") == "gaussian"
        and require_number(model.get("init_std"), "model.init_std") <= 0
    ):
        raise ConfigError(f"model.init_std must be > 0, got {model.init_std}")


_ARRAYS_TARGET = f"{load_arrays.__module__}.{load_arrays.__qualname__}"
_TORCHVISION_TARGET = f"{load_torchvision.__module__}.{load_torchvision.__qualname__}"


def validate_data(data: DictConfig) -> None:
    """The keys every classification data set shares (subsets, validation), then its own:
    MNIST's folder, torchvision's data set name, the arrays' file."""
    require_int(data.get("train_size"), "data.train_size", minimum=1, optional=True)
    require_int(data.get("test_size"), "data.test_size", minimum=1, optional=True)
    require_int(data.get("val_size", 0), "data.val_size", minimum=0)
    require_int(data.get("subset_seed"), "data.subset_seed")
    target = located(data.get("_target_"))
    if target == _ARRAYS_TARGET:
        path = data.get("path")
        if not isinstance(path, str) or not path:
            raise ConfigError(f"data.path must be the path of an .npz file, got {path!r}")
        require_int(data.get("classes"), "data.classes", minimum=2, optional=True)
        require_choice(data.get("normalization"), "data.normalization", ARRAY_NORMALIZATIONS)
        return
    root = data.get("root")
    if not isinstance(root, str) or not root:
        raise ConfigError(f"data.root must be a folder path, got {root!r}")
    if target == _TORCHVISION_TARGET:
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"data.name must be a class of torchvision.datasets, got {name!r}")
        require_choice(data.get("normalization"), "data.normalization", TORCHVISION_NORMALIZATIONS)
        return
    require_choice(data.get("normalization"), "data.normalization", NORMALIZATIONS)
    if not isinstance(data.get("verify_md5"), bool):
        raise ConfigError(f"data.verify_md5 must be true or false, got {data.get('verify_md5')!r}")
