"""Datasets: appends (the first index returned, non-contiguous input, and every refusal leaving
the store as it was), the schema written at construction and checked on open, refusals of
incomplete or wrong arguments, and delete, stats and compact passed through."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt
import pytest

from loaderx._store import schema as schema_module
from loaderx._store import zrecord
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import SchemaError

# Fixtures are found by name in the module: imported, pytest uses them.
from dataset_cases import dense, random_samples, same_bits, swap_last_delete

pytestmark = pytest.mark.compiled


def test_append_returns_first_index_and_copies_non_contiguous(
    store_path: str, rng: np.random.Generator
) -> None:
    base = random_samples(rng, np.int32, (4, 3), 10)
    ds = DenseDataset(store_path, dtype=np.int32, item_shape=(3, 4))
    strided = base.transpose(0, 2, 1)  # (10, 3, 4), not C-contiguous
    assert not strided.flags.c_contiguous
    assert ds.append(strided) == 0
    assert ds.append(strided[::3]) == 10
    assert ds.append(strided[:0]) == 14  # an empty batch writes nothing
    assert len(ds) == 14
    same_bits(ds[:10], np.ascontiguousarray(strided))
    same_bits(ds[10:], np.ascontiguousarray(strided[::3]))


def snapshot(ds: DenseDataset | RaggedDataset) -> tuple[int, dict[str, int], bytes]:
    records = ds[:]
    content = b"".join(r.tobytes() for r in records) if isinstance(records, list) else records.tobytes()
    return len(ds), ds.stats(), content


WRONG_DENSE: list[tuple[str, Callable[[], Any], type[BaseException]]] = [
    ("dtype", lambda: np.zeros((2, 2, 3), np.float64), TypeError),
    ("list", lambda: [[[0.0] * 3] * 2], TypeError),
    ("trailing shape", lambda: np.zeros((2, 3, 2), np.float32), ValueError),
    ("no batch axis", lambda: np.zeros((2, 3), np.float32), ValueError),
    ("scalar", lambda: np.float32(1), TypeError),
    ("0-d array", lambda: np.array(1, np.float32), ValueError),
    ("object", lambda: np.empty((2, 2, 3), object), TypeError),
]


@pytest.mark.parametrize(("name", "make", "error"), WRONG_DENSE, ids=[w[0] for w in WRONG_DENSE])
def test_wrong_dense_append_changes_nothing(
    dense: tuple[DenseDataset, npt.NDArray[Any]],
    name: str,
    make: Callable[[], Any],
    error: type[BaseException],
) -> None:
    ds, _ = dense
    before = snapshot(ds)
    with pytest.raises(error):
        ds.append(make())
    assert snapshot(ds) == before


def test_missing_batch_axis_hint(dense: tuple[DenseDataset, npt.NDArray[Any]]) -> None:
    ds, _ = dense
    with pytest.raises(ValueError, match=r"sample\[None\]"):
        ds.append(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match="astype"):
        ds.append(np.zeros((1, 2, 3), np.float64))


def test_a_numpy_scalar_is_named_as_one_when_an_array_is_needed(store_path: str) -> None:
    # NumPy names a scalar's type like a dtype: the message said "of dtype uint16, not uint16".
    ds = DenseDataset(store_path, dtype=np.uint16)
    with pytest.raises(TypeError, match=r"^batch must be a numpy array of dtype uint16, not a "
                       r"NumPy uint16 scalar \(build it with np.asarray"):
        ds.append(np.uint16(3))  # type: ignore[arg-type]
    ds.append(np.arange(2, dtype=np.uint16))
    with pytest.raises(TypeError, match="not a NumPy uint16 scalar"):
        ds.read([0], out=np.uint16(3))  # type: ignore[arg-type]
    ds.close()
    rs = RaggedDataset(store_path + "-ragged", dtype=np.float32)
    with pytest.raises(TypeError, match=r"records\[0\] must be .* not a NumPy float32 scalar"):
        rs.append([np.float32(1)])  # type: ignore[list-item]
    rs.close()


WRONG_RAGGED: list[tuple[str, Callable[[], Any], type[BaseException]]] = [
    ("bare array", lambda: np.zeros((4, 2), np.int16), TypeError),
    ("dtype in the middle", lambda: [np.zeros((1, 2), np.int16), np.zeros((1, 2), np.int32)],
     TypeError),
    ("trailing shape", lambda: [np.zeros((1, 2), np.int16), np.zeros((1, 3), np.int16)],
     ValueError),
    ("missing L axis", lambda: [np.zeros(2, np.int16)], ValueError),
    ("list record", lambda: [np.zeros((1, 2), np.int16), [[1, 2]]], TypeError),
    ("over 1 MiB", lambda: [np.zeros((1, 2), np.int16), np.zeros((1 << 18 + 1, 2), np.int16)],
     ValueError),
]


@pytest.mark.parametrize(("name", "make", "error"), WRONG_RAGGED, ids=[w[0] for w in WRONG_RAGGED])
def test_wrong_ragged_append_changes_nothing(
    store_path: str, name: str, make: Callable[[], Any], error: type[BaseException]
) -> None:
    rs = RaggedDataset(store_path, dtype=np.int16, item_shape=(2,))
    rs.append([np.arange(2 * n, dtype=np.int16).reshape(n, 2) for n in (1, 4, 2)])
    before = snapshot(rs)
    with pytest.raises(error):
        rs.append(make())
    assert snapshot(rs) == before


def test_ragged_append_takes_non_contiguous_and_empty(store_path: str) -> None:
    rs = RaggedDataset(store_path, dtype=np.float32, item_shape=(2,))
    base = np.arange(24, dtype=np.float32).reshape(2, 12)
    view = base.T[::2]  # (6, 2), strided
    assert rs.append([view, view[:0]]) == 0
    assert rs.append([]) == 2
    same_bits(rs[0], np.ascontiguousarray(view))
    assert rs[1].shape == (0, 2)


def test_schema_is_written_at_construction(store_path: str) -> None:
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(28, 28), codec="raw")
    raw = msgpack.unpackb(Path(store_path, "schema.msgpack").read_bytes())
    assert raw["kind"] == "dense" and raw["dtype"] == "|u1" and raw["item_shape"] == [28, 28]
    assert raw["codec"] == "raw"
    ds.close()
    again = DenseDataset(store_path)
    assert (again.dtype, again.item_shape, again.codec) == (np.dtype(np.uint8), (28, 28), "raw")
    # Reopening with the same schema is fine.
    DenseDataset(store_path, dtype="u1", item_shape=[28, 28], codec="raw").close()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"dtype": np.int8, "item_shape": (28, 28)}, "dtype"),
     ({"dtype": np.uint8, "item_shape": (28,)}, "item_shape"),
     ({"dtype": np.uint8, "item_shape": (28, 28), "codec": "zstd"}, "codec")],
)
def test_reopen_with_another_schema_names_the_field(
    store_path: str, kwargs: dict[str, Any], field: str
) -> None:
    DenseDataset(store_path, dtype=np.uint8, item_shape=(28, 28), codec="raw").close()
    with pytest.raises(SchemaError, match=f"{field}: store has"):
        DenseDataset(store_path, **kwargs)


def test_kind_mismatch_points_to_the_right_class(tmp_path: Path) -> None:
    DenseDataset(str(tmp_path / "d"), dtype=np.int32).close()
    RaggedDataset(str(tmp_path / "r"), dtype=np.int32).close()
    with pytest.raises(SchemaError, match="RaggedDataset"):
        DenseDataset(str(tmp_path / "r"))
    with pytest.raises(SchemaError, match="DenseDataset"):
        RaggedDataset(str(tmp_path / "d"))
    with pytest.raises(SchemaError, match="RaggedDataset"):
        DenseDataset(str(tmp_path / "r"), dtype=np.int32)


def test_missing_path_and_incomplete_arguments(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="dtype"):
        DenseDataset(str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError):
        RaggedDataset(str(tmp_path))  # a folder, but no dataset in it
    with pytest.raises(TypeError, match="dtype"):
        DenseDataset(str(tmp_path / "x"), item_shape=(3,))
    assert not os.path.exists(tmp_path / "nothing")
    assert not os.path.exists(tmp_path / "x")


def test_bare_zrecord_store_is_not_taken_for_a_dataset(store_path: str) -> None:
    with zrecord.Zrecord(store_path, create=True) as store:
        store.append([b"abc"])
    with pytest.raises(SchemaError, match="Zrecord"):
        DenseDataset(store_path)
    with pytest.raises(SchemaError, match="unknown layout"):
        DenseDataset(store_path, dtype=np.uint8, item_shape=(3,))
    assert not os.path.exists(os.path.join(store_path, "schema.msgpack"))


def test_sizes_refused_at_creation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="1 MiB"):
        DenseDataset(str(tmp_path / "a"), dtype=np.float64, item_shape=(512, 257))
    with pytest.raises(ValueError, match="at least one byte"):
        DenseDataset(str(tmp_path / "b"), dtype=np.float64, item_shape=(4, 0))
    with pytest.raises(ValueError, match="at least one byte"):
        RaggedDataset(str(tmp_path / "c"), dtype=np.float64, item_shape=(0,))
    assert os.listdir(tmp_path) == []  # nothing was created
    biggest = DenseDataset(str(tmp_path / "d"), dtype=np.uint8, item_shape=(1 << 20,), codec="raw")
    sample = np.full((1, 1 << 20), 7, np.uint8)
    biggest.append(sample)
    same_bits(biggest[0:1], sample)


def test_codec_constants_agree_with_zrecord() -> None:
    assert schema_module.CODEC_NAMES == tuple(zrecord.CODECS)
    assert schema_module.RECORD_SIZE_MAX == zrecord.RECORD_SIZE_MAX


def test_empty_dataset_reads(store_path: str) -> None:
    ds = DenseDataset(store_path, dtype=np.int64, item_shape=(2,))
    assert len(ds) == 0
    assert ds[:].shape == (0, 2)
    assert ds[[]].shape == (0, 2)
    with pytest.raises(IndexError):
        ds[0]
    rs = RaggedDataset(store_path + "r", dtype=np.int64)
    assert rs[:] == []


@pytest.mark.parametrize(
    "index",
    [np.arange(0, 20, 2), slice(5, None, 3), -1, [3, 3, 0], np.arange(20) >= 17],
    ids=repr,
)
def test_delete_stats_compact_pass_through(
    dense: tuple[DenseDataset, npt.NDArray[Any]], index: Any
) -> None:
    ds, values = dense
    picked = np.arange(20)[index]
    model = swap_last_delete(list(values), [int(i) for i in np.atleast_1d(picked)])
    ds.delete(index)
    assert len(ds) == len(model)
    same_bits(ds[:], np.array(model, dtype=np.float32).reshape(-1, 2, 3))
    stats = ds.stats()
    assert set(stats) == {"records", "live_bytes", "chunk_bytes", "reclaimable"}
    assert stats["records"] == len(model)
    assert stats["reclaimable"] > 0
    ds.compact()
    assert ds.stats()["reclaimable"] <= stats["reclaimable"]
    same_bits(ds[:], np.array(model, dtype=np.float32).reshape(-1, 2, 3))


def test_ragged_delete(store_path: str) -> None:
    records = [np.full(i, i, np.uint16) for i in range(10)]
    rs = RaggedDataset(store_path, dtype=np.uint16)
    rs.append(records)
    rs.delete([1, -1, 4])
    model = swap_last_delete(records, [1, 9, 4])
    for have, want in zip(rs[:], model):
        same_bits(have, want)
    rs.compact()
    for have, want in zip(rs[:], model):
        same_bits(have, want)
