"""MNIST as tensors: loaded once, subset and normalised, then kept on the training device.

Two sources are accepted for ``data.root``:
* a folder holding the four canonical gzip files flat (as in ``../shared/data/mnist``); their
  md5 sums are checked and the files are parsed directly, once: the decoded arrays are kept in
  the user's cache folder (`cache_dir`) for the next process, as decoding costs every process
  ~0.3 s;
* otherwise torchvision's layout ``<root>/MNIST/raw``, which torchvision downloads when the files
  are missing and the machine is online.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from harness.errors import DataError

log = logging.getLogger(__name__)

# The canonical files and their md5 sums (the same ones torchvision checks).
MNIST_FILES = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
NORMALIZATIONS = ("standard", "unit")
NUM_CLASSES = 10

# IDX element types: https://yann.lecun.com/exdb/mnist/ (only unsigned bytes occur in MNIST).
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# The names of the decoded files' arrays in a cache entry, in MNIST_FILES' order.
_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
_told_uncached = False  # a cache that cannot be written is logged once a process


@dataclass(frozen=True)
class TensorData:
    """A classification data set held as whole tensors (rows are flattened examples): training
    rows, validation rows held out of the training data (none when `data.val_size` is 0) and
    the test set."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None
    classes: int = NUM_CLASSES  # labels are 0..classes-1

    @property
    def num_features(self) -> int:
        return self.x_train.shape[1]

    @property
    def num_classes(self) -> int:
        return self.classes

    def split(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        """(features, labels) of a held-out split: "val" or "test"."""
        return (self.x_val, self.y_val) if name == "val" else (self.x_test, self.y_test)

    def to(self, device: torch.device, dtype: torch.dtype) -> TensorData:
        def move(t: torch.Tensor | None, floating: bool) -> torch.Tensor | None:
            if t is None:
                return None
            return t.to(device=device, dtype=dtype) if floating else t.to(device=device)

        return TensorData(
            move(self.x_train, True),
            move(self.y_train, False),
            move(self.x_test, True),
            move(self.y_test, False),
            move(self.x_val, True),
            move(self.y_val, False),
            self.classes,
        )


def read_idx(data: bytes, name: str = "IDX data") -> np.ndarray:
    """Parse an (uncompressed) IDX file: magic 0x0000 <type> <ndim>, ndim big-endian sizes, data."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise DataError(f"{name} is not an IDX file (bad magic number)")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    offset = 4 + 4 * ndim
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(data) - offset != expected:
        raise DataError(
            f"{name} is truncated or padded: {len(data) - offset} bytes, {expected} expected"
        )
    return np.frombuffer(data, dtype=dtype, offset=offset).reshape(shape)


def cache_dir() -> Path:
    """The user's cache folder: $HARNESS_CACHE_DIR, else $XDG_CACHE_HOME/optimizer-harness, else
    ~/.cache/optimizer-harness (the data root is often a shared, read-only folder)."""
    if os.environ.get("HARNESS_CACHE_DIR"):
        return Path(os.environ["HARNESS_CACHE_DIR"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "optimizer-harness"


def _cache_entry(root: Path) -> Path:
    # One entry per data root, named by its path: changed files overwrite it rather than leave
    # another 55 MB behind.
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_dir() / "mnist" / f"{name}.npz"


def _identity(paths: list[Path]) -> str:
    """What identifies the files' contents without reading them: a file rewritten, replaced or
    touched changes its inode, size, modification or change time."""
    stats = [(p.resolve(), p.stat()) for p in paths]
    return repr([(str(p), s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for p, s in stats])


def _read_cache(root: Path, key: str) -> tuple[list[str], tuple[np.ndarray, ...]] | None:
    """(md5 sums, arrays) of the files `key` identifies, as cached when they were decoded; None
    when the cache holds no entry for them."""
    try:
        with np.load(_cache_entry(root)) as entry:
            if entry["key"].item() != key:
                return None
            return entry["md5"].tolist(), tuple(entry[name] for name in _ARRAYS)
    except OSError:  # no entry yet, or no readable cache folder (the write tells why)
        return None
    except Exception as exc:  # truncated, corrupt (zip's CRCs), foreign: decoded and rewritten
        log.debug("MNIST cache entry for %s unreadable, rewriting it: %s", root, exc)
        return None


def _write_cache(root: Path, key: str, md5s: list[str], arrays: tuple[np.ndarray, ...]) -> None:
    """Keep decoded arrays for the next process: written to a temporary file in the cache folder,
    then renamed over the entry, so a process loading at the same time reads the old entry or the
    new one whole. Where the cache cannot be written, nothing is kept."""
    global _told_uncached
    tmp = None
    try:
        entry = _cache_entry(root)
        entry.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=entry.parent, suffix=".tmp", delete=False) as file:
            tmp = Path(file.name)
            np.savez(file, key=key, md5=md5s, **dict(zip(_ARRAYS, arrays, strict=True)))
        os.replace(tmp, entry)
        tmp = None
    except (OSError, RuntimeError) as exc:  # read-only or full, no home folder: load uncached
        if not _told_uncached:
            log.debug("MNIST not cached (%s): it is decoded in every process", exc)
            _told_uncached = True
    finally:  # a write that failed or was interrupted leaves no 55 MB behind
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _check_md5s(paths: list[Path], md5s: list[str]) -> None:
    for path, md5 in zip(paths, md5s, strict=True):
        if md5 != MNIST_FILES[path.name]:
            raise DataError(
                f"{path} has the wrong md5 (expected {MNIST_FILES[path.name]}): the file is "
                "corrupt or not MNIST (set data.verify_md5=false for other data in MNIST's format)"
            )


def _load_flat_folder(root: Path, verify_md5: bool) -> tuple[np.ndarray, ...]:
    """The four files' arrays: from the cache when it holds these very files (their md5 sums
    recorded with them, so a verified file is not hashed again), else decoded and cached."""
    paths = [root / name for name in MNIST_FILES]
    # Identified before they are read: a file changed in between no longer matches the key its
    # arrays are kept under, so it is decoded again next time rather than served stale.
    key = _identity(paths)
    cached = _read_cache(root, key)
    if cached is not None:
        md5s, arrays = cached
        if verify_md5:
            _check_md5s(paths, md5s)
        return arrays
    data = [path.read_bytes() for path in paths]
    md5s = [hashlib.md5(d).hexdigest() for d in data]  # also unverified: kept for a verified load
    if verify_md5:
        _check_md5s(paths, md5s)  # before parsing: a foreign file is named as such
    arrays = tuple(read_idx(gzip.decompress(d), str(p)) for p, d in zip(paths, data, strict=True))
    _write_cache(root, key, md5s, arrays)
    return arrays


def _load_torchvision(root: Path) -> tuple[np.ndarray, ...]:
    from torchvision.datasets import MNIST  # heavy import, only on this path

    arrays = []
    for train in (True, False):
        try:
            ds = MNIST(str(root), train=train, download=True)
        except Exception as exc:  # network errors, bad archives: all mean "no data here"
            raise DataError(
                f"no MNIST found in data.root={root} and downloading it failed ({exc}); point "
                f"data.root at a folder holding the four files {', '.join(MNIST_FILES)}"
            ) from exc
        arrays += [ds.data.numpy(), ds.targets.numpy()]
    return tuple(arrays)


def _subset(n_total: int, size: int | None, generator: torch.Generator, what: str) -> torch.Tensor:
    if size is None:
        return torch.arange(n_total)
    if size > n_total:
        raise DataError(f"{what} must be at most {n_total} (the data has {n_total}), got {size}")
    return torch.randperm(n_total, generator=generator)[:size].sort().values


def split_train(
    n_total: int, train_size: int | None, val_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """(training rows, validation rows) of `n_total` training examples: `val_size` of them held
    out at random, and `train_size` (None: all the others) drawn from the rest, disjoint. With
    no validation rows the training subset is the one drawn before validation existed."""
    if val_size == 0:
        return _subset(n_total, train_size, generator, "data.train_size"), torch.arange(0)
    wanted = val_size + (train_size if train_size is not None else 1)
    if wanted > n_total:
        raise DataError(
            f"data.val_size ({val_size}) leaves "
            + (f"fewer than data.train_size ({train_size})" if train_size else "none")
            + f" of the {n_total} training examples to train on"
        )
    perm = torch.randperm(n_total, generator=generator)
    rest = perm[val_size:] if train_size is None else perm[val_size : val_size + train_size]
    return rest.sort().values, perm[:val_size].sort().values


def load_mnist(
    root: str | Path,
    train_size: int | None = None,
    test_size: int | None = None,
    subset_seed: int = 0,
    val_size: int = 0,
    normalization: str = "standard",
    verify_md5: bool = True,
) -> TensorData:
    """Load MNIST from ``root`` as float32 tensors on the CPU, flattened to 784 features, with
    `val_size` training examples held out for validation (selection never sees the test set)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(
            f"data.root={root} is not a folder; give the folder holding the MNIST files"
        )
    present = [name for name in MNIST_FILES if (root / name).is_file()]
    if present:
        missing = [name for name in MNIST_FILES if name not in present]
        if missing:
            raise DataError(f"data.root={root} lacks {', '.join(missing)}")
        x_train, y_train, x_test, y_test = _load_flat_folder(root, verify_md5)
    else:
        x_train, y_train, x_test, y_test = _load_torchvision(root)
    log.info("MNIST loaded from %s: %d train, %d test", root, len(y_train), len(y_test))

    # One generator for all subsets: the subsets are part of the problem, not of the run's seed.
    generator = torch.Generator().manual_seed(subset_seed)
    train_idx, val_idx = split_train(len(y_train), train_size, val_size, generator)
    test_idx = _subset(len(y_test), test_size, generator, "data.test_size")

    def features(images: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
        # in place: the same bits as (x / 255 - mean) / std, without two copies of 47 M floats
        # (0.1 s against 0.3 s for the training set)
        x = torch.from_numpy(images.reshape(len(images), -1)[idx.numpy()]).float().div_(255.0)
        return x.sub_(MNIST_MEAN).div_(MNIST_STD) if normalization == "standard" else x

    def labels(targets: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(targets[idx.numpy()].astype(np.int64))

    has_val = len(val_idx) > 0
    return TensorData(
        features(x_train, train_idx),
        labels(y_train, train_idx),
        features(x_test, test_idx),
        labels(y_test, test_idx),
        features(x_train, val_idx) if has_val else None,
        labels(y_train, val_idx) if has_val else None,
    )
