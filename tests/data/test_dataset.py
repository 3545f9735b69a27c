"""Tests of loaderx.dataset: bit-exact round trips, every index form, append validation that
leaves the store untouched, schema checks on open, dictionaries, pad, and the README's examples.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaderx._store import schema as schema_module
from loaderx._store import zrecord
from loaderx.dataset import DICT_TIERS, DenseDataset, RaggedDataset, pad
from loaderx.errors import DictionaryError, SchemaError
from loaderx._store.indexing import normalize_index, normalize_selection
from loaderx._store.schema import Codec

pytestmark = pytest.mark.compiled

NUMERIC = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
]
SHAPES = [(), (3,), (2, 4), (28, 28)]


def random_samples(
    rng: np.random.Generator, dtype: Any, shape: tuple[int, ...], count: int
) -> npt.NDArray[Any]:
    """count samples of dtype whose bits are random; floats also get NaN payloads, inf, -0.0."""
    dt = np.dtype(dtype)
    full = (count, *shape)
    if dt.kind == "b":
        return rng.integers(0, 2, size=full).astype(np.bool_)
    size = int(np.prod(full, dtype=np.int64)) * dt.itemsize
    values = np.frombuffer(rng.bytes(size), dtype=dt).reshape(full).copy()
    if dt.kind in "fc" and values.size >= 6:
        part = np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt
        flat = values.reshape(-1).view(part)
        bits = flat.view(f"u{part.itemsize}")
        flat[0] = np.inf
        flat[1] = -np.inf
        flat[2] = -0.0
        flat[3] = np.nan
        # A NaN with a non-default payload and the sign bit set.
        bits[4] = bits.dtype.type(~0 & ((1 << (8 * part.itemsize)) - 1)) ^ bits.dtype.type(2)
        flat[5] = np.finfo(part).tiny / 4  # a subnormal
    return values


def same_bits(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def swap_last_delete(values: list[Any], indices: list[int]) -> list[Any]:
    """The store's documented delete: descending unique indices, each filled from the tail."""
    result = list(values)
    for index in sorted(set(indices), reverse=True):
        result[index] = result[-1]
        result.pop()
    return result


@pytest.fixture
def dense(store_path: str, rng: np.random.Generator) -> tuple[DenseDataset, npt.NDArray[Any]]:
    values = random_samples(rng, np.float32, (2, 3), 20)
    ds = DenseDataset(store_path, dtype=np.float32, item_shape=(2, 3))
    assert ds.append(values) == 0
    return ds, values


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_dense_round_trip_is_bit_exact(
    store_path: str, rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]
) -> None:
    values = random_samples(rng, dtype, shape, 9)
    with DenseDataset(store_path, dtype=dtype, item_shape=shape) as ds:
        assert ds.record_size == np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        assert ds.append(values[:4]) == 0
        assert ds.append(values[4:]) == 4
        same_bits(ds[:], values)
        same_bits(ds[3], values[3])
    with DenseDataset(store_path) as again:
        assert again.dtype == np.dtype(dtype)
        assert again.item_shape == shape
        same_bits(again[::-1], values[::-1])


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_dense_round_trip_per_codec(store_path: str, rng: np.random.Generator, codec: Codec) -> None:
    values = random_samples(rng, np.float64, (3,), 200)
    values[::2] = 1.5  # something to compress
    with DenseDataset(store_path, dtype=np.float64, item_shape=(3,), codec=codec) as ds:
        if codec == "zstd_dict":
            ds.train_dict(values)
        ds.append(values)
        same_bits(ds[:], values)


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_ragged_round_trip_is_bit_exact(
    store_path: str, rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]
) -> None:
    records = [random_samples(rng, dtype, shape, length) for length in (3, 0, 1, 7, 2)]
    with RaggedDataset(store_path, dtype=dtype, item_shape=shape) as rs:
        assert rs.append(records[:2]) == 0
        assert rs.append(records[2:]) == 2
        got = rs[:]
        assert isinstance(got, list) and len(got) == len(records)
        for have, want in zip(got, records):
            same_bits(have, want)
        same_bits(rs[-2], records[-2])
        assert rs.lengths(slice(None)).tolist() == [3, 0, 1, 7, 2]
    with RaggedDataset(store_path) as again:
        for have, want in zip(again[[4, 1, 0]], [records[4], records[1], records[0]]):
            same_bits(have, want)


# --- index forms ------------------------------------------------------------------------------

INDEX_FORMS: list[Any] = [
    0, 19, -1, -20, np.int64(7), np.uint8(3), np.array(5),
    slice(None), slice(2, 11, 3), slice(None, None, -1), slice(15, 2, -4), slice(30, 40),
    [0, 5, 2], [-1, -1, 0], [], (4, 3), range(1, 9, 2),
    np.array([3, 1, 3], dtype=np.int32), np.array([19, 0], dtype=np.uint64),
    np.array([-3, 2], dtype=np.int64),
    np.arange(20) % 3 == 0, [i % 2 == 1 for i in range(20)],
]


def reference_positions(index: Any, length: int) -> Any:
    """What NumPy selects from arange(length); a Python sequence is a list of record indices."""
    if isinstance(index, (list, tuple, range)):
        index = np.array(list(index), dtype=np.bool_ if index and isinstance(index[0], bool)
                         else np.int64)
    return np.arange(length)[index]


@pytest.mark.parametrize("index", INDEX_FORMS, ids=repr)
def test_dense_index_forms_match_numpy(
    dense: tuple[DenseDataset, npt.NDArray[Any]], index: Any
) -> None:
    ds, values = dense
    want = values[reference_positions(index, len(values))]
    same_bits(ds[index], want)
    same_bits(ds.read(index), want)


@pytest.mark.parametrize("index", INDEX_FORMS, ids=repr)
def test_ragged_index_forms_match_numpy(store_path: str, index: Any) -> None:
    records = [np.arange(i % 5, dtype=np.int16) + i for i in range(20)]
    rs = RaggedDataset(store_path, dtype=np.int16)
    rs.append(records)
    got = rs[index]
    positions = reference_positions(index, 20)
    if np.ndim(positions) == 0:
        same_bits(got, records[int(positions)])
    else:
        assert isinstance(got, list) and len(got) == len(positions)
        for have, position in zip(got, positions):
            same_bits(have, records[int(position)])


@pytest.mark.parametrize(
    ("index", "error"),
    [(20, IndexError), (-21, IndexError), ([0, 20], IndexError), (np.ones(3, bool), IndexError),
     (1.0, TypeError), ("0", TypeError), (True, TypeError), ([0.5], TypeError)],
    ids=repr,
)
def test_bad_indices(dense: tuple[DenseDataset, npt.NDArray[Any]], index: Any, error: type) -> None:
    ds, _ = dense
    with pytest.raises(error):
        ds[index]


def test_read_into_out(dense: tuple[DenseDataset, npt.NDArray[Any]]) -> None:
    ds, values = dense
    out = np.zeros((3, 2, 3), np.float32)
    assert ds.read([4, 0, 9], out=out) is out
    same_bits(out, values[[4, 0, 9]])
    one = np.zeros((2, 3), np.float32)
    ds.read(-1, out=one)
    same_bits(one, values[-1])
    with pytest.raises(TypeError, match="dtype"):
        ds.read([1], out=np.zeros((1, 2, 3), np.float64))
    with pytest.raises(ValueError, match="shape"):
        ds.read([1, 2], out=np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        ds.read([1, 2], out=np.zeros((2, 3, 2), np.float32).transpose(0, 2, 1))


def test_gather_into_hot_path(dense: tuple[DenseDataset, npt.NDArray[Any]]) -> None:
    ds, values = dense
    indices = np.array([19, 0, 7, 7], dtype=np.int64)
    out = np.empty((4, 2, 3), np.float32)
    ds.gather_into(indices, out)
    same_bits(out, values[indices])
    with pytest.raises(TypeError):
        ds.gather_into(indices, np.empty((4, 2, 3), np.float64))
    with pytest.raises(TypeError):
        ds.gather_into(indices.astype(np.int32), out)
    with pytest.raises(ValueError):
        ds.gather_into(indices, np.empty((3, 2, 3), np.float32))
    with pytest.raises(IndexError):
        ds.gather_into(np.array([20], dtype=np.int64), np.empty((1, 2, 3), np.float32))


class _Tagged(np.ndarray):
    """An ndarray subclass: the fast path takes only exact arrays, the general path takes an
    out of a subclass too (indices must be a plain array either way)."""


def test_gather_into_takes_subclasses_and_single_records_the_general_way(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, values = dense
    indices = np.array([19, 0, 7], dtype=np.int64)
    out = np.zeros((3, 2, 3), np.float32).view(_Tagged)
    ds.gather_into(indices, out)
    same_bits(np.asarray(out), values[indices])
    with pytest.raises(TypeError, match="out has dtype float64, the dataset holds float32"):
        ds.gather_into(indices, np.zeros((3, 2, 3), np.float64).view(_Tagged))
    for index in ([4], [19, 4]):  # one record (the native fast path leaves it), and two
        one = np.full((len(index), 2, 3), -1.0, np.float32)
        ds.gather_into(np.array(index, dtype=np.int64), one)
        same_bits(one, values[index])
        same_bits(ds[np.array(index, dtype=np.int64)], values[index])


def test_gather_into_wrong_types_are_type_errors_before_any_byte_moves(
    dense: tuple[DenseDataset, npt.NDArray[Any]],
) -> None:
    ds, values = dense
    indices = np.array([3, 1], dtype=np.int64)
    raw = bytearray(b"\xee" * (2 * ds.record_size))
    with pytest.raises(TypeError, match="out must be a numpy array .* not bytearray"):
        ds.gather_into(indices, raw)  # type: ignore[arg-type]
    assert raw == bytearray(b"\xee" * (2 * ds.record_size))
    out = np.full((2, 2, 3), -7.0, np.float32)
    for bad in ([3, 1], (3, 1), range(2), memoryview(indices.tobytes())):
        with pytest.raises(TypeError, match="indices must be an int64 numpy array"):
            ds.gather_into(bad, out)  # type: ignore[arg-type]
        assert (out == -7.0).all()
    with pytest.raises(TypeError):
        ds.gather_into(np.array([], dtype=np.float64), out[:0])
    ds.gather_into(indices, out)
    same_bits(out, values[indices])


# --- append -----------------------------------------------------------------------------------


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


# --- schema on open ---------------------------------------------------------------------------


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


# --- maintenance ------------------------------------------------------------------------------


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


# --- dictionaries -----------------------------------------------------------------------------


def test_dict_tiers() -> None:
    assert DICT_TIERS == {"small": 32 * 1024, "balanced": 128 * 1024, "max": 1024 * 1024}


@pytest.mark.parametrize(
    ("dict_size", "stored"), [("small", 32 << 10), ("max", 1 << 20), (40_000, 40_000)]
)
def test_dict_size_is_recorded(store_path: str, dict_size: str | int, stored: int) -> None:
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(64,), codec="zstd_dict",
                      dict_size=dict_size)
    assert ds.dict_size == stored
    ds.close()
    assert DenseDataset(store_path).dict_size == stored


def test_explicit_dict_size_bounds_the_trained_dictionary(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    values = similar_records(rng, 2000, 128)
    sizes = {}
    for dict_size in (2048, 16384):
        path = str(tmp_path / str(dict_size))
        with DenseDataset(path, dtype=np.uint8, item_shape=(128,), codec="zstd_dict",
                          dict_size=dict_size) as ds:
            ds.train_dict(values)
            # dict.zr is the dictionary plus its 16-byte checksum trailer.
            sizes[dict_size] = os.path.getsize(os.path.join(path, "dict.zr")) - 16
            ds.append(values[:50])
            same_bits(ds[:], values[:50])
        assert 0 < sizes[dict_size] <= dict_size
    # A per-call size overrides the schema's.
    with DenseDataset(str(tmp_path / "override"), dtype=np.uint8, item_shape=(128,),
                      codec="zstd_dict", dict_size="max") as ds:
        ds.train_dict(values, dict_size=1024)
        assert os.path.getsize(os.path.join(ds.path, "dict.zr")) - 16 <= 1024
        assert ds.dict_size == 1 << 20


@pytest.mark.parametrize("dict_size", [(1 << 20) + 1, 10, "giant"])
def test_bad_dict_sizes(store_path: str, dict_size: str | int) -> None:
    with pytest.raises(ValueError):
        DenseDataset(store_path, dtype=np.uint8, codec="zstd_dict", dict_size=dict_size)
    assert not os.path.exists(store_path)


def similar_records(rng: np.random.Generator, count: int, size: int) -> npt.NDArray[np.uint8]:
    """Small records sharing most of their content: a few templates with sparse edits."""
    templates = rng.integers(0, 256, size=(4, size), dtype=np.uint8)
    records = templates[rng.integers(0, 4, size=count)].copy()
    edits = rng.integers(0, size, size=(count, size // 16))
    for row, cols in enumerate(edits):
        records[row, cols] = rng.integers(0, 256, size=len(cols), dtype=np.uint8)
    return records


def test_zstd_dict_refuses_append_until_trained(store_path: str, rng: np.random.Generator) -> None:
    values = similar_records(rng, 300, 128)
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(128,), codec="zstd_dict",
                      dict_size="small")
    with pytest.raises(DictionaryError, match="train_dict"):
        ds.append(values)
    assert len(ds) == 0 and not ds.has_dict
    with pytest.raises(ValueError, match="train_dict needs at least one sample"):
        ds.train_dict(values[:0])
    assert not ds.has_dict
    ds.train_dict(values)
    assert ds.has_dict
    assert ds.append(values) == 0
    same_bits(ds[:], values)
    ds.close()
    with DenseDataset(store_path) as again:
        assert again.has_dict
        same_bits(again[::7], values[::7])


def test_ragged_zstd_dict_refuses_append_until_trained(
    store_path: str, rng: np.random.Generator
) -> None:
    records = [row[: 40 + i % 50] for i, row in enumerate(similar_records(rng, 200, 128))]
    rs = RaggedDataset(store_path, dtype=np.uint8, codec="zstd_dict", dict_size=8192)
    with pytest.raises(DictionaryError, match="train_dict"):
        rs.append(records)
    rs.train_dict(records)
    rs.append(records)
    for have, want in zip(rs[:], records):
        same_bits(have, want)


def test_train_dict_only_for_zstd_dict(store_path: str, rng: np.random.Generator) -> None:
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(128,))
    with pytest.raises(ValueError, match="zstd_dict"):
        ds.train_dict(similar_records(rng, 100, 128))


def test_zstd_dict_beats_plain_zstd_on_small_similar_records(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    values = similar_records(rng, 2000, 256)
    sizes = {}
    for codec in ("zstd", "zstd_dict"):
        with DenseDataset(str(tmp_path / codec), dtype=np.uint8, item_shape=(256,), codec=codec,
                          dict_size="small") as ds:
            if codec == "zstd_dict":
                ds.train_dict(values[::2])
            ds.append(values)
            same_bits(ds[:], values)
            sizes[codec] = ds.stats()["live_bytes"]
    assert sizes["zstd_dict"] < 0.5 * sizes["zstd"], sizes


# --- pad --------------------------------------------------------------------------------------


def test_pad() -> None:
    records = [np.arange(3, dtype=np.int32), np.arange(1, dtype=np.int32) + 7,
               np.zeros(0, np.int32)]
    dense, lengths = pad(records)
    assert dense.dtype == np.int32 and lengths.dtype == np.int64
    assert dense.tolist() == [[0, 1, 2], [7, 0, 0], [0, 0, 0]]
    assert lengths.tolist() == [3, 1, 0]
    filled, _ = pad(records, value=-1)
    assert filled.tolist() == [[0, 1, 2], [7, -1, -1], [-1, -1, -1]]


def test_pad_with_trailing_dimensions() -> None:
    records = [np.ones((2, 3), np.float16), np.full((4, 3), 2, np.float16)]
    dense, lengths = pad(records)
    assert dense.shape == (2, 4, 3)
    same_bits(dense[0, :2], records[0])
    same_bits(dense[1], records[1])
    assert not dense[0, 2:].any()
    assert lengths.tolist() == [2, 4]


def test_pad_refuses_mixed_records() -> None:
    with pytest.raises(ValueError):
        pad([])
    with pytest.raises(TypeError):
        pad([np.zeros(2, np.int32), np.zeros(2, np.int64)])
    with pytest.raises(ValueError):
        pad([np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(TypeError):
        pad([np.float64(1.0)])  # type: ignore[list-item]


@pytest.mark.parametrize(("dtype", "value"), [
    (np.int64, np.nan), (np.int32, 1.5), (np.uint8, -1), (np.int32, 2**40), (np.bool_, 5),
    (np.float16, 1e6), (np.float64, 1 + 2j), (np.float32, "x"), (np.int64, None), (np.int8, [1]),
])
def test_pad_refuses_a_value_the_records_cannot_hold(dtype: Any, value: Any) -> None:
    # np.full casts unsafely: NaN padded int records with -2**63, 1.5 with 1, 1e6 float16 with inf.
    records = [np.arange(2).astype(dtype), np.arange(1).astype(dtype)]
    with pytest.raises(ValueError, match=f"padding value .* is not a value of the records' dtype "
                       f"{np.dtype(dtype)}"):
        pad(records, value)


def test_pad_takes_values_a_float_rounds() -> None:
    dense, _ = pad([np.zeros(2, np.float32), np.zeros(1, np.float32)], 0.1)
    assert dense[1, 1] == np.float32(0.1)
    for value in (np.nan, -np.inf):
        assert np.isnan(value) == np.isnan(pad([np.zeros(2), np.zeros(1)], value)[0][1, 1])
    assert pad([np.zeros(2, np.uint8), np.zeros(1, np.uint8)], 2.0)[0].tolist() == [[0, 0], [0, 2]]
    assert pad([np.zeros(2, np.bool_), np.zeros(1, np.bool_)], True)[0][1, 1]


# --- the README's examples, as written ----------------------------------------------------------


def test_readme_records_dense(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    from_numpy('data', np.arange(64, dtype=np.float32).reshape(8, 2, 4))
    ds = DenseDataset('data')
    result = ds[[0, 5, 2]]
    assert result.shape == (3, 2, 4)
    same_bits(result, np.arange(64, dtype=np.float32).reshape(8, 2, 4)[[0, 5, 2]])


def test_readme_records_ragged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from loaderx.converter import from_iterator
    from loaderx.dataset import RaggedDataset, pad

    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    from_iterator('tokens', seqs)
    rs = RaggedDataset('tokens')

    records = rs[[0, 2, 4]]
    padded, lengths = pad(records)
    assert [r.tolist() for r in records] == [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert padded.shape == (3, 5) and padded.dtype == np.int32
    assert lengths.tolist() == [3, 4, 5]


def test_readme_writable_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    monkeypatch.chdir(tmp_path)
    images = rng.integers(0, 256, size=(2048, 28, 28), dtype=np.uint8)
    single_image = images[5]
    i = 1024
    seq_a, seq_b, seq_c = (np.arange(n, dtype=np.int32) for n in (4, 0, 9))

    from loaderx.dataset import DenseDataset, RaggedDataset

    ds = DenseDataset('mnist/x', dtype=np.uint8, item_shape=(28, 28))  # schema written now
    assert os.path.isfile('mnist/x/schema.msgpack')
    assert ds.append(images[i:i + 1024]) == 0
    assert ds.append(single_image[None]) == 1024
    head = ds[:4]
    same_bits(head, images[i:i + 4])

    tok = RaggedDataset('tokens', dtype=np.int32, item_shape=())
    assert tok.append([seq_a, seq_b, seq_c]) == 0
    picked = tok[[0, 2]]
    assert isinstance(picked, list)
    same_bits(picked[0], seq_a)
    same_bits(picked[1], seq_c)

    model = swap_last_delete(list(np.concatenate([images[i:i + 1024], single_image[None]])),
                             list(range(0, 1025, 2)))
    ds.delete(np.arange(0, len(ds), 2))
    stats = ds.stats()
    assert set(stats) == {'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}
    ds.compact()
    assert len(ds) == 512
    same_bits(ds[:], np.array(model))


# --- a model check ------------------------------------------------------------------------------

OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6)),
        st.tuples(st.just("delete"), st.lists(st.integers(-40, 40), max_size=4)),
        st.tuples(st.just("compact"), st.just(0)),
    ),
    max_size=12,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OPERATIONS, codec=st.sampled_from(["raw", "zstd"]))
def test_dense_matches_a_list_model(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, Any]], codec: Codec
) -> None:
    path = str(tmp_path_factory.mktemp("model") / "ds")
    model: list[npt.NDArray[np.int16]] = []
    counter = 0
    with DenseDataset(path, dtype=np.int16, item_shape=(3,), codec=codec) as ds:
        for name, argument in operations:
            if name == "append":
                batch = (np.arange(argument * 3, dtype=np.int16) + counter).reshape(-1, 3)
                counter += argument * 3
                assert ds.append(batch) == len(model)
                model.extend(batch)
            elif name == "delete":
                picked = [i for i in argument if -len(model) <= i < len(model)]
                ds.delete(picked)
                model = swap_last_delete(model, [i % len(model) for i in picked])
            else:
                ds.compact()
            assert len(ds) == len(model)
        want = np.array(model, dtype=np.int16).reshape(-1, 3)
        same_bits(ds[:], want)


# --- pickling and opening what does not exist ---------------------------------------------------


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


# --- the dense fast path: index arrays go straight to the native bounds check -----------------


def general_path_error(index: Any, length: int) -> tuple[type, str]:
    """The exception type and message the general path (normalize_selection) gives."""
    with pytest.raises(Exception) as caught:
        normalize_selection(index, length)
    return type(caught.value), str(caught.value)


FAST_PATH_INDICES = [
    np.array([3, -1, 0, -20], dtype=np.int64),  # negatives: refused natively, normalised
    np.arange(20, dtype=np.int64)[::2],  # non-contiguous
    np.arange(20, dtype=np.int64)[::-1],  # negative stride
    np.array([5, 19, 0], dtype=">i8"),  # non-native byte order
    np.frombuffer(np.array([4, 4, 2], dtype=np.int64).tobytes(), dtype=np.int64),  # read-only
    np.array(7, dtype=np.int64),  # 0-d: one sample
    np.empty(0, dtype=np.int64),
    *[np.array([1, 19, 0, 3], dtype=dtype) for dtype in
      (np.int8, np.int16, np.int32, np.uint8, np.uint16, np.uint32, np.uint64)],
    np.array([-1, -19], dtype=np.int16),
]


@pytest.mark.parametrize("index", FAST_PATH_INDICES, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_fast_path_index_arrays_read_as_numpy_does(
    dense: tuple[DenseDataset, npt.NDArray[Any]], index: npt.NDArray[Any]
) -> None:
    ds, values = dense
    want = values[reference_positions(index, len(values))]
    same_bits(ds[index], want)
    same_bits(ds.read(index), want)
    out = np.zeros(want.shape, np.float32)
    assert ds.read(index, out=out) is out
    same_bits(out, want)


OUT_OF_RANGE = [
    np.array([0, 20], dtype=np.int64),
    np.array([-21, 3], dtype=np.int64),
    np.array([25, -30], dtype=np.int64),  # both sides wrong: the high one is named, as before
    np.array([np.iinfo(np.int64).min, 0], dtype=np.int64),
    np.array([np.iinfo(np.int64).max], dtype=np.int64),
    np.array([2**63 + 5], dtype=np.uint64),
    np.array([0, 20], dtype=np.int32),
    np.arange(40, dtype=np.int64)[::2],  # non-contiguous and out of range
    np.array([[0, 20]], dtype=np.int64),  # two-dimensional
    np.array([[-21], [3]], dtype=np.int64),
]


def test_an_empty_float_index_is_refused_on_every_path_as_numpy_refuses_it(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, values = dense
    index = np.empty(0, dtype=np.float64)
    with pytest.raises(IndexError):
        values[index]  # NumPy's own answer
    out = np.full((0, 2, 3), 7.0, np.float32)
    for read in (lambda: ds[index], lambda: ds.read(index), lambda: ds.read(index, out=out)):
        with pytest.raises(TypeError, match="record indices must be integers, not float64"):
            read()


@pytest.mark.parametrize("index", OUT_OF_RANGE, ids=lambda a: f"{a.dtype.str}{a.shape}")
def test_fast_path_refusals_keep_the_general_path_messages(
    dense: tuple[DenseDataset, npt.NDArray[Any]], index: npt.NDArray[Any]
) -> None:
    ds, values = dense
    error, message = general_path_error(index, len(values))
    out = np.full((*index.shape, 2, 3), 7.0, np.float32)
    for read in (lambda: ds[index], lambda: ds.read(index), lambda: ds.read(index, out=out)):
        with pytest.raises(error) as caught:
            read()
        assert str(caught.value) == message
    assert (out == 7.0).all(), "a refused read must leave out as it was"


def test_fast_path_out_checks_keep_their_order_and_messages(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, _ = dense
    bad_index = np.array([0, 20], dtype=np.int64)
    # The index is checked before out, as before: an out-of-range index wins over a bad out.
    with pytest.raises(IndexError, match="index 20 is out of range for length 20"):
        ds.read(bad_index, out=np.zeros((5, 2, 3), np.float64))
    index = np.array([0, 1], dtype=np.int64)
    with pytest.raises(TypeError, match="out has dtype float64 but the dataset holds float32"):
        ds.read(index, out=np.zeros((2, 2, 3), np.float64))
    with pytest.raises(ValueError, match=r"out has shape \(3, 2, 3\), the selection needs"):
        ds.read(index, out=np.zeros((3, 2, 3), np.float32))
    read_only = np.zeros((2, 2, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writable C-contiguous array"):
        ds.read(index, out=read_only)
    with pytest.raises(ValueError, match="out must be a writable C-contiguous array"):
        ds.read(index, out=np.zeros((2, 3, 2), np.float32).transpose(0, 2, 1))


def test_gather_into_refusals_are_unchanged(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, values = dense
    out = np.full((2, 2, 3), 7.0, np.float32)
    # gather_into takes normalised indices: a negative one is refused natively, as before.
    with pytest.raises(IndexError, match=r"index -1 \(position 1\) is out of range for a store of 20"):
        ds.gather_into(np.array([0, -1], dtype=np.int64), out)
    assert (out == 7.0).all()
    with pytest.raises(ValueError, match="indices must be a one-dimensional C-contiguous array"):
        ds.gather_into(np.arange(4, dtype=np.int64)[::2], out)
    with pytest.raises(TypeError, match="indices must be int64, not int32"):
        ds.gather_into(np.array([0, 1], dtype=np.int32), out)
    frozen = np.zeros((2, 2, 3), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out must be a writable C-contiguous array"):
        ds.gather_into(np.array([0, 1], dtype=np.int64), frozen)
    read_only_indices = np.frombuffer(np.array([3, 1], dtype=np.int64).tobytes(), np.int64)
    ds.gather_into(read_only_indices, out)
    same_bits(out, values[[3, 1]])
    ds.gather_into(np.empty(0, np.int64), np.empty((0, 2, 3), np.float32))


def test_gather_fixed_declines_what_it_does_not_take(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, values = dense
    store = ds.store
    assert isinstance(store, zrecord.Zrecord)
    size = ds.record_size
    out = np.zeros((2, 2, 3), np.float32)
    assert store.gather_fixed(np.array([5, 6], dtype=np.int64), out, size)
    same_bits(out, values[[5, 6]])
    out[:] = 7.0
    declined: list[tuple[npt.NDArray[Any], npt.NDArray[Any]]] = [
        (np.array([5, -1], dtype=np.int64), out),  # negative
        (np.array([5, 20], dtype=np.int64), out),  # past the end
        (np.array([5, 6], dtype=np.int32), out),  # another dtype
        (np.arange(4, dtype=np.int64)[::2], out),  # non-contiguous
        (np.array([[5, 6]], dtype=np.int64), out),  # two-dimensional
        (np.empty(0, dtype=np.int64), np.empty((0, 2, 3), np.float32)),  # empty
        (np.array([5, 6], dtype=np.int64), np.zeros((3, 2, 3), np.float32)),  # wrong size
        (np.array([5, 6], dtype=np.int64), out.view(np.ndarray)[:, ::-1]),  # non-contiguous out
    ]
    for indices, target in declined:
        assert not store.gather_fixed(indices, target, size)
    assert (out == 7.0).all()
    ds.close()
    with pytest.raises(ValueError, match="is closed"):
        store.gather_fixed(np.array([5, 6], dtype=np.int64), out, size)
    with pytest.raises(ValueError, match="is closed"):
        ds[np.array([5, 6], dtype=np.int64)]


def test_numpy_integers_are_taken_for_shard_records_and_dict_size(tmp_path: Path) -> None:
    """As interpreted, so compiled: mypyc's own check of an int parameter refuses them."""
    values = (np.arange(60 * 16) % 5).astype(np.int32).reshape(60, 16)
    with DenseDataset(tmp_path / "d", dtype=np.int32, item_shape=(16,), codec="zstd_dict",
                      dict_size=np.int64(1024), shard_records=np.uint32(25)) as ds:
        assert (ds.dict_size, ds.shard_records) == (1024, 25)
        assert type(ds.dict_size) is int and type(ds.shard_records) is int
        ds.train_dict(values, dict_size=np.int16(2048))
        ds.append(values)
        assert [s["records"] for s in ds.shard_stats()] == [25, 25, 10]
        np.testing.assert_array_equal(ds[:], values)
    rows = [np.full((n, 2), n, dtype=np.int16) for n in range(1, 30)]
    with RaggedDataset(tmp_path / "r", dtype=np.int16, item_shape=(2,), codec="zstd",
                       dict_size=np.int64(4096), shard_records=np.int8(10)) as ragged:
        ragged.append(rows)
        assert ragged.sharded and [r.tolist() for r in ragged[[0, 28, 13]]] == [
            rows[0].tolist(), rows[28].tolist(), rows[13].tolist()
        ]


@pytest.mark.parametrize(
    ("keywords", "error", "message"),
    [
        ({"shard_records": 10.0}, TypeError, "shard_records must be an int, not float"),
        ({"shard_records": "10"}, TypeError, "shard_records must be an int, not str"),
        ({"shard_records": 0}, ValueError, "shard_records must be in 1..16777216 .a store's limit., got 0"),
        ({"dict_size": 1024.0}, TypeError, "dict_size must be a tier name or an int, got 1024.0"),
        ({"dict_size": np.float32(1)}, TypeError, r"dict_size must be a tier name or an int, got np.float32\(1.0\)|dict_size must be a tier name or an int, got 1.0"),
    ],
)
def test_wrongly_typed_sizes_are_refused_by_name(
    tmp_path: Path, keywords: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=f"^({message})$"):
        DenseDataset(tmp_path / "d", dtype=np.int32, codec="zstd_dict", **keywords)
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


@pytest.mark.parametrize("shard_records", [None, 4])
def test_index_arrays_of_ndarray_subclasses_read_as_their_plain_arrays(
    tmp_path: Path, shard_records: int | None
) -> None:
    # np.memmap (indices saved with np.save and loaded with mmap_mode) and other subclasses
    # index as NumPy indexes with them; they were refused with "indices must be an int64 numpy
    # array", which they are.
    samples = np.arange(30, dtype=np.int32).reshape(10, 3)
    ds = DenseDataset(tmp_path / "d", dtype=np.int32, item_shape=(3,), codec="raw",
                      shard_records=shard_records)
    ds.append(samples)
    np.save(tmp_path / "idx.npy", np.array([3, 1, 9], dtype=np.int64))
    mapped = np.load(tmp_path / "idx.npy", mmap_mode="r")
    masked = np.ma.array([3, 1, 9], mask=[False, True, False])  # NumPy ignores the mask
    for index in (mapped, masked, np.array([3, 1, 9]).view(np.recarray)):
        want = samples[np.asarray(index)]
        same_bits(ds[index], want)
        out = np.zeros_like(want)
        ds.read(index, out=out)
        same_bits(out, want)
    out = np.zeros((3, 3), dtype=np.int32)
    ds.gather_into(mapped, out)
    same_bits(out, samples[[3, 1, 9]])
    ds.delete(mapped[:1])
    assert len(ds) == 9
    ds.close()
    ragged = RaggedDataset(tmp_path / "r", dtype=np.int32, codec="raw", shard_records=shard_records)
    ragged.append([np.arange(n + 1, dtype=np.int32) for n in range(10)])
    assert [len(r) for r in ragged[mapped]] == [4, 2, 10]
    ragged.close()
