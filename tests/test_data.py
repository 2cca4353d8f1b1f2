"""Loading MNIST: IDX parsing, both folder layouts, md5 checks, fixed subsets, the cache."""

import dataclasses
import gzip
import hashlib
import logging
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import write_idx
from harness.errors import DataError
from harness.problems.classification import mnist
from harness.problems.classification.mnist import (
    MNIST_FILES,
    TensorData,
    cache_dir,
    load_mnist,
    read_idx,
)


def test_read_idx_roundtrip(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = write_idx(tmp_path / "a-idx3-ubyte", array)
    np.testing.assert_array_equal(read_idx(path.read_bytes()), array)


def test_read_idx_rejects_truncated_and_foreign_files(tmp_path):
    data = write_idx(tmp_path / "a", np.zeros((5, 4), np.uint8)).read_bytes()
    with pytest.raises(DataError, match="truncated"):
        read_idx(data[:-3])
    with pytest.raises(DataError, match="magic"):
        read_idx(b"PK\x03\x04 not idx")


def test_torchvision_layout_from_tiny_idx_files(tiny_mnist):
    data = load_mnist(tiny_mnist, normalization="unit")
    assert data.x_train.shape == (200, 784) and data.x_test.shape == (50, 784)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert data.y_train.tolist()[:12] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert data.x_train.min() >= 0.0 and data.x_train.max() == 1.0
    # The label's row was written bright: the pixels are where the IDX file put them.
    image = data.x_train[3].reshape(28, 28)
    assert torch.all(image[3] == 1.0) and image[4].max() < 0.2


def test_standard_normalization(tiny_mnist):
    unit = load_mnist(tiny_mnist, normalization="unit")
    standard = load_mnist(tiny_mnist, normalization="standard")
    torch.testing.assert_close(standard.x_train, (unit.x_train - 0.1307) / 0.3081)


def test_subsets_are_fixed_by_subset_seed_and_disjoint_from_run_seed(tiny_mnist):
    a = load_mnist(tiny_mnist, train_size=50, test_size=20, subset_seed=1)
    b = load_mnist(tiny_mnist, train_size=50, test_size=20, subset_seed=1)
    c = load_mnist(tiny_mnist, train_size=50, test_size=20, subset_seed=2)
    assert len(a.y_train) == 50 and len(a.y_test) == 20
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, c.x_train)


def test_subset_larger_than_data_is_refused(tiny_mnist):
    with pytest.raises(DataError, match=r"data.train_size must be at most 200"):
        load_mnist(tiny_mnist, train_size=201)
    with pytest.raises(DataError, match=r"data.test_size must be at most 50"):
        load_mnist(tiny_mnist, test_size=51)


def test_flat_folder_of_canonical_files(mnist_dir):
    data = load_mnist(mnist_dir, train_size=1000, test_size=500)
    assert data.x_train.shape == (1000, 784) and data.x_test.shape == (500, 784)
    assert set(data.y_train.unique().tolist()) == set(range(10))
    assert abs(data.x_train.mean().item()) < 0.1  # standardised with MNIST's own statistics


def test_wrong_md5_names_the_file(tmp_path, mnist_dir):
    for name in MNIST_FILES:
        shutil.copy(mnist_dir / name, tmp_path / name)
    bad = tmp_path / "t10k-labels-idx1-ubyte.gz"
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF  # one corrupted byte
    bad.write_bytes(bytes(data))
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.gz has the wrong md5"):
        load_mnist(tmp_path)


def test_incomplete_and_missing_folders(tmp_path, mnist_dir):
    shutil.copy(mnist_dir / "train-images-idx3-ubyte.gz", tmp_path)
    with pytest.raises(DataError, match="lacks train-labels-idx1-ubyte.gz"):
        load_mnist(tmp_path)
    with pytest.raises(DataError, match="is not a folder"):
        load_mnist(tmp_path / "nowhere")


def test_validation_is_held_out_of_the_training_data_and_fixed_by_subset_seed(tiny_mnist):
    full = load_mnist(tiny_mnist, normalization="unit")
    a = load_mnist(tiny_mnist, train_size=100, val_size=60, subset_seed=1, normalization="unit")
    b = load_mnist(tiny_mnist, train_size=100, val_size=60, subset_seed=1, normalization="unit")
    c = load_mnist(tiny_mnist, train_size=100, val_size=60, subset_seed=2, normalization="unit")
    assert len(a.y_train) == 100 and len(a.y_val) == 60 and len(a.y_test) == 50
    assert torch.equal(a.x_val, b.x_val) and torch.equal(a.x_train, b.x_train)
    assert not torch.equal(a.x_val, c.x_val)

    def rows(x: torch.Tensor) -> set[int]:  # which training images these are
        return {int(torch.where((full.x_train == r).all(1))[0][0]) for r in x}

    train, val = rows(a.x_train), rows(a.x_val)
    assert len(train) == 100 and len(val) == 60 and not train & val
    assert torch.equal(a.x_test, full.x_test)  # the test set is untouched
    # Without train_size, training is everything validation leaves.
    rest = load_mnist(tiny_mnist, val_size=60, normalization="unit")
    assert len(rest.y_train) == 140 and not rows(rest.x_train) & rows(rest.x_val)


def test_no_validation_keeps_the_training_subset_of_before(tiny_mnist):
    """val_size=0 draws exactly the subsets drawn before validation existed, so runs recorded
    then keep their data (and their identity: results.NEUTRAL_VALUES)."""
    generator = torch.Generator().manual_seed(3)
    old_train = torch.randperm(200, generator=generator)[:80].sort().values
    old_test = torch.randperm(50, generator=generator)[:20].sort().values
    data = load_mnist(tiny_mnist, train_size=80, test_size=20, subset_seed=3, normalization="unit")
    full = load_mnist(tiny_mnist, normalization="unit")
    assert data.y_val is None
    assert torch.equal(data.x_train, full.x_train[old_train])
    assert torch.equal(data.x_test, full.x_test[old_test])


def test_validation_larger_than_the_data_is_refused(tiny_mnist):
    with pytest.raises(DataError, match=r"data.val_size \(150\) leaves fewer than data.train_size"):
        load_mnist(tiny_mnist, train_size=51, val_size=150)
    with pytest.raises(DataError, match=r"data.val_size \(200\) leaves no"):
        load_mnist(tiny_mnist, val_size=200)


# --- the cache of decoded arrays -----------------------------------------------------------


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder of the test's own ($HARNESS_CACHE_DIR)."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def uncachable(tmp_path, monkeypatch) -> None:
    """A cache folder that cannot be made (its parent is a file), whoever runs the tests."""
    (tmp_path / "a-file").touch()
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "a-file" / "cache"))


@pytest.fixture
def tiny_flat(tiny_mnist) -> Path:
    """conftest.tiny_mnist's files gzipped into a flat folder (not MNIST's md5 sums)."""
    flat = tiny_mnist / "flat"
    flat.mkdir()
    for name in MNIST_FILES:
        raw = tiny_mnist / "MNIST" / "raw" / name.removesuffix(".gz")
        (flat / name).write_bytes(gzip.compress(raw.read_bytes()))
    return flat


@pytest.fixture(params=["real", "tiny"])
def flat_source(request) -> tuple[Path, dict]:
    """A flat folder and the load_mnist arguments to load it with: the canonical files, and the
    tiny ones (verify_md5 off)."""
    if request.param == "real":
        kwargs = {"train_size": 5000, "val_size": 1000, "test_size": 1000}
        return request.getfixturevalue("mnist_dir"), {**kwargs, "verify_md5": True}
    return request.getfixturevalue("tiny_flat"), {"val_size": 40, "verify_md5": False}


def assert_identical(a: TensorData, b: TensorData) -> None:
    for field in dataclasses.fields(TensorData):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert (x is None) == (y is None), field.name
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y), field.name
        else:  # the number of classes, or None
            assert x == y, field.name


def cache_files(cache: Path) -> list[Path]:
    return sorted((cache / "mnist").iterdir())


def fail(*args, **kwargs):
    raise AssertionError("called on a cache hit")


def test_the_cache_returns_bit_for_bit_what_decoding_returns(
    flat_source, uncachable, tmp_path, monkeypatch
):
    root, kwargs = flat_source
    uncached = load_mnist(root, **kwargs)
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    decoded = mnist._load_flat_folder(root, kwargs["verify_md5"])  # and cached
    assert len(cache_files(tmp_path / "cache")) == 1
    # A hit neither parses nor hashes the files again.
    monkeypatch.setattr(mnist, "read_idx", fail)
    monkeypatch.setattr(hashlib, "md5", fail)
    for a, b in zip(decoded, mnist._load_flat_folder(root, kwargs["verify_md5"]), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    assert_identical(load_mnist(root, **kwargs), uncached)


def test_tiny_flat_folder_holds_the_tiny_data(tiny_mnist, tiny_flat, cache):
    assert_identical(load_mnist(tiny_flat, verify_md5=False), load_mnist(tiny_mnist))


def test_a_changed_source_file_is_decoded_again(tiny_flat, cache):
    labels_file = tiny_flat / "train-labels-idx1-ubyte.gz"
    labels = np.arange(200) % 10

    def write_labels(shift: int, path: Path = labels_file) -> None:
        # gzip without compression: the same size whatever the labels.
        write_idx(path, (labels + shift) % 10)
        path.write_bytes(gzip.compress(path.read_bytes(), compresslevel=0, mtime=0))

    def loaded_labels() -> list[int]:
        return load_mnist(tiny_flat, verify_md5=False).y_train.tolist()

    assert loaded_labels() == labels.tolist()
    # Rewritten with other content and size.
    write_labels(1)
    assert loaded_labels() == ((labels + 1) % 10).tolist()
    size, mtime = labels_file.stat().st_size, labels_file.stat().st_mtime_ns
    # Rewritten in place, same size, its modification time put back (its change time moves on,
    # at the clock's granularity).
    time.sleep(0.02)
    write_labels(2)
    os.utime(labels_file, ns=(mtime, mtime))
    assert labels_file.stat().st_size == size
    assert loaded_labels() == ((labels + 2) % 10).tolist()
    # Replaced by another file of the same size and time.
    write_labels(3, tiny_flat / "new")
    os.utime(tiny_flat / "new", ns=(mtime, mtime))
    os.replace(tiny_flat / "new", labels_file)
    assert loaded_labels() == ((labels + 3) % 10).tolist()
    assert len(cache_files(cache)) == 1  # one entry per folder, overwritten


@pytest.mark.parametrize("damage", ["truncated", "one byte flipped", "empty", "not a zip"])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(tiny_flat, cache, damage, monkeypatch):
    first = load_mnist(tiny_flat, verify_md5=False)
    [entry] = cache_files(cache)
    data = entry.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1  # in the middle of the images: only the zip's CRC tells
    damaged = {
        "truncated": data[: len(data) // 2],
        "one byte flipped": bytes(flipped),
        "empty": b"",
        "not a zip": b"not a cache entry",
    }[damage]
    entry.write_bytes(damaged)
    assert_identical(load_mnist(tiny_flat, verify_md5=False), first)
    assert cache_files(cache) == [entry]
    monkeypatch.setattr(mnist, "read_idx", fail)  # rewritten: the next load is a hit
    assert_identical(load_mnist(tiny_flat, verify_md5=False), first)


def test_an_unwritable_cache_folder_still_loads(tiny_flat, uncachable, monkeypatch, caplog):
    monkeypatch.setattr(mnist, "_told_uncached", False)
    caplog.set_level(logging.DEBUG, logger=mnist.__name__)
    first = load_mnist(tiny_flat, verify_md5=False)
    assert_identical(load_mnist(tiny_flat, verify_md5=False), first)
    assert sum("MNIST not cached" in r.message for r in caplog.records) == 1  # logged once


def test_a_failed_write_leaves_the_old_entry_and_no_temporary_file(tiny_flat, cache, monkeypatch):
    load_mnist(tiny_flat, verify_md5=False)
    [entry] = cache_files(cache)
    before = entry.read_bytes()

    def disk_full(file, **arrays):
        file.write(b"PK\x03\x04 half an entry")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    os.utime(tiny_flat / "t10k-labels-idx1-ubyte.gz", ns=(0, 0))  # the entry is to be rewritten
    assert load_mnist(tiny_flat, verify_md5=False).x_test.shape == (50, 784)
    assert cache_files(cache) == [entry] and entry.read_bytes() == before


def test_the_cache_does_not_skip_the_md5_check(tiny_flat, cache):
    load_mnist(tiny_flat, verify_md5=False)  # cached, with the files' (foreign) md5 sums
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz has the wrong md5"):
        load_mnist(tiny_flat)


def test_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESS_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / ".cache" / "optimizer-harness"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "optimizer-harness"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize("normalization", ["standard", "unit"])
def test_the_features_are_the_pixels_scaled_and_standardised_to_the_bit(mnist_dir, normalization):
    """The features computed in place are (pixel / 255 - mean) / std, or pixel / 255, exactly as
    the out-of-place expression gives them, for every pixel value."""
    data = load_mnist(mnist_dir, val_size=10000, normalization=normalization, test_size=1000)
    x_train, *_ = mnist._load_flat_folder(mnist_dir, verify_md5=True)
    train_idx, _ = mnist.split_train(len(x_train), None, 10000, torch.Generator().manual_seed(0))
    x = torch.from_numpy(x_train.reshape(len(x_train), -1)[train_idx.numpy()]).float() / 255.0
    expected = (x - mnist.MNIST_MEAN) / mnist.MNIST_STD if normalization == "standard" else x
    assert torch.equal(data.x_train.view(torch.int32), expected.view(torch.int32))
    assert len(torch.unique(data.x_train)) == 256  # every pixel value occurs
