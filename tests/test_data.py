"""Loading MNIST: IDX parsing, both folder layouts, md5 checks, fixed subsets."""

import shutil

import numpy as np
import pytest
import torch

from conftest import write_idx
from harness.errors import DataError
from harness.problems.classification.mnist import MNIST_FILES, load_mnist, read_idx


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
