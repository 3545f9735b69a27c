"""Python's and NumPy's protocols over a dataset, the same whether its class is compiled or not:
`for record in ds`, reversed(ds), list/enumerate/zip, np.asarray(ds) and np.array(ds).

The mypyc-compiled classes (what the wheels ship) used to be neither iterable nor reversible,
and NumPy wrapped them in a 0-d object array, while the interpreted ones got Python's fallback
sequence protocol from __getitem__ and __len__. These tests run in both builds (`compiled`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_iterator
from loaderx.dataset import DenseDataset, RaggedDataset

pytestmark = pytest.mark.compiled


def dense_of(path: Path, records: np.ndarray) -> DenseDataset:
    ds = DenseDataset(str(path), dtype=records.dtype, item_shape=records.shape[1:])
    if len(records):
        ds.append(records)
    return ds


def test_iteration_gives_each_record_as_indexing_does(tmp_path: Path) -> None:
    # 4 KiB records: iteration reads 256 a block, so 600 records cross two block boundaries.
    records = np.random.default_rng(3).integers(0, 1 << 30, (600, 1024), dtype=np.int32)
    with dense_of(tmp_path / "d", records) as ds:
        got = list(ds)
        assert len(got) == 600
        for index, record in enumerate(got):
            np.testing.assert_array_equal(record, records[index])
            assert record.dtype == records.dtype and record.shape == (1024,)
        backwards = list(reversed(ds))
        assert len(backwards) == 600
        for index, record in enumerate(backwards):
            np.testing.assert_array_equal(record, records[599 - index])
        assert [int(a[0]) for a, _ in zip(ds, range(3))] == records[:3, 0].tolist()


def test_records_of_scalars_iterate_as_numpy_scalars(tmp_path: Path) -> None:
    values = np.arange(10, dtype=np.float64) / 4
    with dense_of(tmp_path / "d", values) as ds:
        got = list(ds)
        assert got == values.tolist()
        assert all(type(value) is np.float64 for value in got)
        assert [float(v) for v in reversed(ds)] == values[::-1].tolist()
        assert sum(ds) == values.sum()


def test_an_empty_dataset_iterates_over_nothing(tmp_path: Path) -> None:
    with dense_of(tmp_path / "d", np.empty((0, 3), np.uint8)) as ds:
        assert list(ds) == [] and list(reversed(ds)) == []
        assert np.asarray(ds).shape == (0, 3)


def test_numpy_makes_one_array_of_a_dense_dataset(tmp_path: Path) -> None:
    records = np.arange(60, dtype=np.int16).reshape(10, 2, 3)
    with dense_of(tmp_path / "d", records) as ds:
        for made in (np.asarray(ds), np.array(ds)):
            assert made.dtype == np.int16 and made.shape == (10, 2, 3)
            np.testing.assert_array_equal(made, records)
        widened = np.asarray(ds, dtype=np.float32)
        assert widened.dtype == np.float32
        np.testing.assert_array_equal(widened, records.astype(np.float32))
        np.testing.assert_array_equal(np.stack(list(ds)), records)
        with pytest.raises(ValueError, match="always a new one"):
            np.asarray(ds, copy=False)


def test_a_ragged_dataset_iterates_and_numpy_refuses_it(tmp_path: Path) -> None:
    rows = [np.arange(n % 9, dtype=np.int32).reshape(-1, 1) * n for n in range(150)]
    with RaggedDataset(str(tmp_path / "r"), dtype=np.int32, item_shape=(1,)) as ds:
        ds.append(rows)
        got = list(ds)  # 150 records: three blocks of 64
        assert len(got) == 150
        for record, row in zip(got, rows):
            assert record.dtype == np.int32 and record.shape == row.shape
            np.testing.assert_array_equal(record, row)
        for record, row in zip(reversed(ds), rows[::-1]):
            np.testing.assert_array_equal(record, row)
        with pytest.raises(TypeError, match="differ in length"):
            np.asarray(ds)


def test_the_schema_facts_are_read_only(tmp_path: Path) -> None:
    # Assigning ds.dtype (hoping for a cast) or ds.item_shape used to be accepted, in both
    # builds, and left reads and appends failing later with messages about byte counts.
    records = np.arange(24, dtype=np.float32).reshape(8, 3)
    with dense_of(tmp_path / "d", records) as ds:
        from_iterator(str(tmp_path / "r"), [np.arange(n, dtype=np.int16) for n in (2, 0, 5)])
        with RaggedDataset(str(tmp_path / "r")) as ragged:
            facts = {
                ds: ("path", "schema", "dtype", "item_shape", "codec", "dict_size",
                     "shard_records", "record_size"),
                ragged: ("path", "schema", "dtype", "item_shape", "codec", "dict_size",
                         "shard_records", "row_size"),
            }
            for dataset, names in facts.items():
                for name in names:
                    before = getattr(dataset, name)
                    with pytest.raises(AttributeError):
                        setattr(dataset, name, np.dtype(np.float64))
                    assert getattr(dataset, name) == before
            assert ds.dtype == np.float32 and ds.item_shape == (3,) and ds.record_size == 12
            assert ds.path == str(tmp_path / "d") and ds.codec == "zstd"
            np.testing.assert_array_equal(ds[[7, 0]], records[[7, 0]])
            assert ragged.dtype == np.int16 and ragged.item_shape == () and ragged.row_size == 2
            assert [r.tolist() for r in ragged[[2, 1, 0]]] == [[0, 1, 2, 3, 4], [], [0, 1]]


def test_content_identity_takes_integers_only(tmp_path: Path) -> None:
    """The interpreted dataset took content_identity("3") and content_identity(1.5) (as 3 and
    1), the compiled one refused them, and np.int64(3), with mypyc's "int or None object
    expected"; both now take any integer and refuse the rest by name."""
    with dense_of(tmp_path / "d", np.arange(10, dtype=np.int64)) as ds:
        three = ds.content_identity(3)
        assert ds.content_identity(np.int64(3)) == three != ds.content_identity()
        assert ds.content_identity(None) == ds.content_identity(10) == ds.content_identity()
        for wrong, name in (("3", "str"), (1.5, "float"), (np.float64(3), "float64")):
            with pytest.raises(TypeError, match=f"^length must be an integer or None, not {name}$"):
                ds.content_identity(wrong)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=r"^length must be in \[0, 10\], got 11$"):
            ds.content_identity(11)
