"""The dense read's fast path (index arrays straight to the native bounds check): it reads as
NumPy does, and every refusal keeps the general path's type, message and order of checks;
NumPy integers taken for sizes, wrongly typed sizes refused by name, and index arrays of
ndarray subclasses read as plain arrays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._store import zrecord
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx._store.indexing import normalize_selection

# Fixtures are found by name in the module: imported, pytest uses them.
from dataset_cases import dense, reference_positions, same_bits

pytestmark = pytest.mark.compiled


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
