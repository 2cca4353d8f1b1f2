"""Classification data beyond MNIST: any torchvision classification data set by its class name
(`data=torchvision data.name=FashionMNIST`) and a user's own arrays (`data=arrays
data.path=mine.npz`). Both become a `mnist.TensorData` (rows of flattened features, integer
labels 0..classes-1) with the validation split held out of the training data exactly as MNIST's
is (`mnist.split_train`, seeded by `data.subset_seed`), so every choice is made on validation.

Bad data ends in one line (DataError): a missing key or file, an empty split, labels that are not
class indices, training and test examples of different shapes.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import numpy as np
import torch

from harness.errors import DataError
from harness.problems.classification.mnist import TensorData, _subset, split_train

log = logging.getLogger(__name__)

ARRAY_KEYS = ("x_train", "y_train", "x_test", "y_test")
TORCHVISION_NORMALIZATIONS = ("standard", "unit")
ARRAY_NORMALIZATIONS = ("standard", "none")


def tensor_data(
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    classes: int | None,
    train_size: int | None,
    test_size: int | None,
    subset_seed: int,
    val_size: int,
    scale,  # noqa: ANN001 - (rows of the training split) -> function that scales rows
    what: str,
) -> TensorData:
    """The checked arrays (x_train, y_train, x_test, y_test) as TensorData: validation held out,
    subsets drawn with one generator seeded by `subset_seed` (as MNIST's), features flattened
    and scaled by `scale`, which is fitted on the training rows."""
    x_train, y_train, x_test, y_test = arrays
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if len(x) == 0 or len(y) == 0:
            raise DataError(f"{what}: the {name} split is empty")
        if len(x) != len(y):
            raise DataError(f"{what}: x_{name} has {len(x)} examples, y_{name} {len(y)} labels")
        if y.ndim != 1:
            raise DataError(f"{what}: y_{name} must be one label per example, shape {y.shape}")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DataError(
            f"{what}: training examples of shape {x_train.shape[1:]}, test examples of shape "
            f"{x_test.shape[1:]}"
        )
    labels = [
        _class_indices(y, f"{what}: y_{n}") for n, y in (("train", y_train), ("test", y_test))
    ]
    found = max(int(y.max()) for y in labels) + 1
    if classes is None:
        classes = found
    elif found > classes:
        raise DataError(
            f"{what}: labels go up to {found - 1}, beyond data.classes={classes} (0..{classes - 1})"
        )
    if classes < 2:
        raise DataError(f"{what}: every label is 0; classification needs at least 2 classes")
    generator = torch.Generator().manual_seed(subset_seed)
    train_idx, val_idx = split_train(len(y_train), train_size, val_size, generator)
    test_idx = _subset(len(y_test), test_size, generator, "data.test_size")
    flat_train = x_train.reshape(len(x_train), -1)
    scaled = scale(flat_train[train_idx.numpy()])

    def features(x: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
        return scaled(torch.from_numpy(np.asarray(x.reshape(len(x), -1)[idx.numpy()])).float())

    def targets(y: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(y[idx.numpy()].astype(np.int64))

    has_val = len(val_idx) > 0
    return TensorData(
        features(x_train, train_idx),
        targets(labels[0], train_idx),
        features(x_test, test_idx),
        targets(labels[1], test_idx),
        features(x_train, val_idx) if has_val else None,
        targets(labels[0], val_idx) if has_val else None,
        classes=classes,
    )


def _class_indices(y: np.ndarray, what: str) -> np.ndarray:
    """`y` as integer class indices >= 0; a DataError if they are not."""
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise DataError(f"{what} holds labels that are not whole numbers (class indices)")
        y = y.astype(np.int64)
    if y.dtype.kind not in "iub":
        raise DataError(f"{what} must hold integer class indices, not {y.dtype}")
    if y.min() < 0:
        raise DataError(f"{what} holds a negative label ({int(y.min())}): labels are 0..classes-1")
    return y.astype(np.int64)


def _standardise(rows: np.ndarray):  # noqa: ANN202
    """Per-feature mean and standard deviation of the training rows (a feature constant there is
    only centred)."""
    x = torch.from_numpy(np.asarray(rows, dtype=np.float64))
    mean, std = x.mean(0).float(), x.std(0).float()
    std[std == 0] = 1.0
    return lambda t: t.sub_(mean).div_(std)


def load_arrays(
    path: str | Path,
    train_size: int | None = None,
    test_size: int | None = None,
    subset_seed: int = 0,
    val_size: int = 0,
    normalization: str = "standard",
    classes: int | None = None,
) -> TensorData:
    """A user's `.npz` of x_train, y_train, x_test, y_test (images or flat features; labels
    0..classes-1): examples flattened to rows, each feature standardised by the training rows'
    mean and deviation (`normalization: standard`) or kept as stored (`none`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataError(
            f"data.path={path} is not a file; give an .npz with {', '.join(ARRAY_KEYS)}"
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ARRAY_KEYS if k not in npz.files]
            if missing:
                raise DataError(
                    f"data.path={path} lacks {', '.join(missing)} (an .npz needs "
                    f"{', '.join(ARRAY_KEYS)})"
                )
            arrays = tuple(npz[k] for k in ARRAY_KEYS)
    except DataError:
        raise
    except Exception as exc:  # not a zip, a pickled object array, a truncated file
        raise DataError(f"data.path={path} cannot be read as an .npz of arrays ({exc})") from exc
    for key, x in zip(("x_train", "x_test"), arrays[::2], strict=True):
        if x.dtype.kind not in "iufb" or x.ndim < 2:
            raise DataError(
                f"data.path={path}: {key} must be numbers, one row (or image) per example, "
                f"got {x.dtype} of shape {x.shape}"
            )
    scale = _standardise if normalization == "standard" else lambda rows: lambda t: t
    data = tensor_data(
        arrays, classes, train_size, test_size, subset_seed, val_size, scale, f"data.path={path}"
    )
    log.info("arrays loaded from %s: %d train, %d test", path, len(data.y_train), len(data.y_test))
    return data


def load_torchvision(
    name: str,
    root: str | Path,
    train_size: int | None = None,
    test_size: int | None = None,
    subset_seed: int = 0,
    val_size: int = 0,
    normalization: str = "standard",
    download: bool = True,
) -> TensorData:
    """torchvision's classification data set `name` (its class in torchvision.datasets:
    FashionMNIST, KMNIST, CIFAR10, SVHN, ...) from `root` in torchvision's layout, downloaded
    there when missing and the machine is online. Pixels scaled to [0, 1] (`unit`) or
    standardised by the training file's mean and deviation over all pixels (`standard`, as
    MNIST's constants are)."""
    import torchvision.datasets

    cls = getattr(torchvision.datasets, str(name), None)
    if not (inspect.isclass(cls) and issubclass(cls, torchvision.datasets.VisionDataset)):
        raise DataError(
            f"data.name={name} is not a data set of torchvision.datasets (e.g. FashionMNIST, "
            "KMNIST, CIFAR10, SVHN)"
        )
    parameters = inspect.signature(cls).parameters
    if "train" in parameters:
        splits = ({"train": True}, {"train": False})
    elif "split" in parameters:
        splits = ({"split": "train"}, {"split": "test"})
    else:
        raise DataError(f"torchvision's {name} has no train and test split the harness can read")
    root = Path(root).expanduser()
    arrays = []
    for split in splits:
        try:
            ds = cls(str(root), download=download, **split)
        except Exception as exc:  # network errors, missing files, bad archives
            raise DataError(
                f"no {name} in data.root={root} and downloading it failed ({exc}); put "
                f"torchvision's files for {name} under {root}"
            ) from exc
        arrays += list(_dataset_arrays(ds, name))
    classes = len(getattr(ds, "classes", ()) or ()) or None
    x_train = arrays[0]
    integer = x_train.dtype.kind in "ub"
    top = 255.0 if integer else 1.0
    if normalization == "standard":
        pixels = torch.from_numpy(np.asarray(x_train, dtype=np.float64)) / top
        mean, std = pixels.mean().item(), pixels.std().item() or 1.0
        scale = lambda rows: lambda t: t.div_(top).sub_(mean).div_(std)  # noqa: E731
    else:
        scale = lambda rows: lambda t: t.div_(top)  # noqa: E731
    data = tensor_data(
        tuple(arrays), classes, train_size, test_size, subset_seed, val_size, scale, str(name)
    )
    log.info(
        "%s loaded from %s: %d train, %d test", name, root, len(data.y_train), len(data.y_test)
    )
    return data


def _dataset_arrays(ds, name: str) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """(examples, labels) of a torchvision data set: its `data` and `targets` (or `labels`)
    arrays where it holds them, else each item read (PIL images to arrays)."""
    labels = getattr(ds, "targets", None)
    if labels is None:
        labels = getattr(ds, "labels", None)
    data = getattr(ds, "data", None)
    if data is not None and labels is not None and len(data) == len(labels):
        return np.asarray(data), np.asarray(labels)
    items = [(np.asarray(x), y) for x, y in ds]
    if not items:
        raise DataError(f"torchvision's {name}: a split is empty")
    return np.stack([x for x, _ in items]), np.asarray([y for _, y in items])
