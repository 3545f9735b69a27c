"""Datasets pickled (by path, keeping verify and read-only, never recreating a removed one),
opening a dataset that does not exist, and index forms given as lists of 0-d tensors or
NumPy takes, which read with NumPy's shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaderx._store import zrecord
from loaderx.dataset import DenseDataset, RaggedDataset

pytestmark = pytest.mark.compiled


def test_datasets_pickle_by_path_and_reopen(tmp_path: Path, rng: np.random.Generator) -> None:
    import pickle

    images = rng.integers(0, 255, size=(40, 3, 5), dtype=np.uint8)
    with DenseDataset(tmp_path / "dense", dtype=np.uint8, item_shape=(3, 5)) as ds:
        ds.append(images)
        copy = pickle.loads(pickle.dumps(ds))
    assert type(copy) is DenseDataset
    assert copy.path == str(tmp_path / "dense")
    assert np.array_equal(copy[:], images)
    copy.close()
    seqs = [np.arange(n, dtype=np.int32) for n in (3, 0, 7)]
    with RaggedDataset(tmp_path / "ragged", dtype=np.int32, item_shape=()) as rs:
        rs.append(seqs)
        ragged = pickle.loads(pickle.dumps(rs))
    assert type(ragged) is RaggedDataset
    for want, have in zip(seqs, ragged[:], strict=True):
        assert np.array_equal(want, have)
    ragged.close()


def test_lists_of_0d_tensors_index_as_numpy_indexes_them(tmp_path: Path) -> None:
    """ds[[torch.tensor(1), torch.tensor(2)]] was refused although a tensor index is taken;
    0-d integer or bool tensors and arrays in a list are now their values, as NumPy reads them."""
    import torch

    values = np.arange(20, dtype=np.int32).reshape(10, 2)
    with DenseDataset(tmp_path / "d", dtype=np.int32, item_shape=(2,)) as ds:
        ds.append(values)
        for index in (
            [torch.tensor(1), torch.tensor(-2)], [3, torch.tensor(2, dtype=torch.uint8), np.int16(0)],
            (np.array(4), 1), [torch.tensor(k % 3 == 0) for k in range(10)],
        ):
            want = values[np.asarray(index)]
            assert np.array_equal(ds[index], want) and ds[index].shape == want.shape
        for bad, name in ((torch.tensor(1.0), "Tensor"), (torch.tensor([1]), "Tensor"),
                          (np.array([1]), "ndarray"), (1.0, "float")):
            with pytest.raises(TypeError, match=f"must be integers .*found {name}"):
                ds[[0, bad]]
        with pytest.raises(IndexError, match="index 10 is out of range for length 10"):
            ds[[torch.tensor(10)]]
    with RaggedDataset(tmp_path / "r", dtype=np.int32, item_shape=()) as rs:
        rs.append([np.arange(n, dtype=np.int32) for n in (2, 0, 5)])
        assert [len(r) for r in rs[[torch.tensor(2), torch.tensor(0)]]] == [5, 2]


def test_index_forms_numpy_takes_give_numpy_shapes(tmp_path: Path) -> None:
    """Objects with __index__, array-likes (a torch tensor, a JAX array) and integer arrays of
    two or more dimensions select what NumPy selects, in NumPy's shape."""
    import torch

    class Three:
        def __index__(self) -> int:
            return 3

    values = np.arange(60, dtype=np.float32).reshape(10, 3, 2)
    grid = np.array([[1, -2], [3, 0], [9, 9]])
    for codec in ("raw", "zstd"):
        with DenseDataset(tmp_path / codec, dtype=np.float32, item_shape=(3, 2), codec=codec) as ds:
            ds.append(values)
            for index in (Three(), torch.tensor(3), torch.tensor([4, -1, 4]), grid,
                          torch.from_numpy(grid), np.abs(grid).astype(np.uint16), grid[:, ::-1]):
                want = values[index]
                got = ds[index]
                assert got.shape == want.shape and np.array_equal(got, want)
            out = np.full((3, 2, 3, 2), -1, dtype=np.float32)
            assert ds.read(grid, out=out) is out and np.array_equal(out, values[grid])
            untouched = out.copy()
            with pytest.raises(ValueError, match="out has shape \\(6, 3, 2\\), the selection"):
                ds.read(grid, out=out.reshape(6, 3, 2))
            with pytest.raises(IndexError, match="index 10 is out of range"):
                ds.read(np.array([[0], [10]]), out=out[:2, :1])
            assert np.array_equal(out, untouched)
    with RaggedDataset(tmp_path / "ragged", dtype=np.int32, item_shape=()) as rs:
        rs.append([np.arange(n, dtype=np.int32) for n in (2, 0, 5)])
        assert np.array_equal(rs[torch.tensor(2)], np.arange(5))
        assert [len(r) for r in rs[torch.tensor([2, 0])]] == [5, 2]
        with pytest.raises(IndexError, match="one-dimensional selections; this index has shape"):
            rs[np.array([[0, 1], [2, 2]])]


@pytest.mark.parametrize("verify", [None, True, False])
def test_a_pickled_dataset_keeps_verify_and_readonly(
    tmp_path: Path, rng: np.random.Generator, verify: bool | None
) -> None:
    import pickle

    values = rng.integers(0, 1 << 40, size=(30, 2), dtype=np.int64)
    with DenseDataset(tmp_path / "dense", dtype=np.int64, item_shape=(2,)) as ds:
        ds.append(values)
    with DenseDataset(tmp_path / "dense", readonly=True, verify=verify) as ds:
        data = pickle.dumps(ds)
    with pickle.loads(data) as copy:
        assert copy.readonly and copy.store.verify_reads is verify
        assert np.array_equal(copy[:], values)


def test_unpickling_a_removed_dataset_does_not_recreate_it(tmp_path: Path) -> None:
    import pickle
    import shutil

    with DenseDataset(tmp_path / "gone", dtype=np.int64, item_shape=()) as ds:
        data = pickle.dumps(ds)
    shutil.rmtree(tmp_path / "gone")
    with pytest.raises(FileNotFoundError, match="no loaderx dataset"):
        pickle.loads(data)
    assert not (tmp_path / "gone").exists()


def test_opening_a_missing_dataset_creates_nothing(tmp_path: Path) -> None:
    for cls in (DenseDataset, RaggedDataset):
        with pytest.raises(FileNotFoundError, match="pass dtype="):
            cls(tmp_path / "typo")
        assert not (tmp_path / "typo").exists()
    with pytest.raises(FileNotFoundError, match="pass create=True"):
        zrecord.Zrecord(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("kind", [DenseDataset, RaggedDataset])
def test_opening_refuses_an_unknown_codec_or_dict_size(tmp_path: Path, kind: type) -> None:
    """Only opening (no dtype=), a dataset took codec="gzip" or dict_size="huge" without a word,
    though the guide says an unknown codec is a ValueError listing the valid names (and
    Zrecord refuses it when opening): a typo must not pass for a setting."""
    kind(tmp_path / "d", dtype=np.uint8, item_shape=(2,)).close()
    with pytest.raises(ValueError, match=r"^codec must be one of 'raw', 'zstd', 'zstd_dict', "
                                         r"got 'gzip'$"):
        kind(tmp_path / "d", codec="gzip")
    with pytest.raises(ValueError, match=r"^dict_size must be one of 'small', 'balanced', 'max' "
                                         r"or a byte count; got 'huge'$"):
        kind(tmp_path / "d", dict_size="huge")
    with pytest.raises(ValueError, match=r"^dict_size 10 is under the 1024-byte minimum$"):
        kind(tmp_path / "d", codec="zstd_dict", dict_size=10)
    # Valid settings that differ from the stored ones are not compared without dtype=: the
    # stored schema is used.
    with kind(tmp_path / "d", codec="raw", dict_size="max") as ds:
        assert ds.codec == "zstd" and ds.dict_size == 0
