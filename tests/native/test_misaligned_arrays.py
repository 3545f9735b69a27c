"""Arrays that are not aligned for their dtype (views at an odd byte offset, which NumPy allows)
never reach the library as typed pointers: C and Zig may read an int64_t, uint64_t or int32_t
only at its own alignment, so passing one would be undefined behaviour that x86 happens to
forgive. Indices are copied (normalize_index, the dense checked path) and give the same
records; an output array the library would write is refused with a message naming it, before
anything is written; the short paths decline and leave the case to those checked paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._loading.ragged_batch import pad_into
from loaderx._loading.sampler import Sampler
from loaderx._native import calls as native_calls
from loaderx._native.padded_batch import pad_rows
from loaderx._store.indexing import normalize_index
from loaderx.dataset import DenseDataset, RaggedDataset

# calls.py, ragged.py and dense.py are compiled with mypyc: the compiled run takes this too.
pytestmark = pytest.mark.compiled

COUNT = 64


def misaligned(values: npt.ArrayLike, dtype: Any) -> npt.NDArray[Any]:
    """`values` in a C-contiguous array of `dtype` that starts one byte past an aligned one."""
    wanted = np.asarray(values, dtype=dtype)
    raw = np.zeros(wanted.nbytes + 1, dtype=np.uint8)
    view: npt.NDArray[Any] = raw[1:].view(dtype)
    view[:] = wanted
    assert view.flags.c_contiguous and view.flags.writeable and not view.flags.aligned
    return view


@pytest.fixture
def dense(tmp_path: Path) -> Any:
    data = np.arange(COUNT * 6, dtype=np.int32).reshape(COUNT, 6)
    with DenseDataset(str(tmp_path / "dense"), dtype=np.int32, item_shape=(6,)) as ds:
        ds.append(data)
    ds = DenseDataset(str(tmp_path / "dense"))
    yield ds, data
    ds.close()


@pytest.fixture
def ragged(tmp_path: Path) -> Any:
    rng = np.random.default_rng(5)
    records = [rng.integers(0, 1000, size=int(n), dtype=np.int32)
               for n in rng.integers(1, 30, COUNT)]
    with RaggedDataset(str(tmp_path / "ragged"), dtype=np.int32) as ds:
        ds.append(records)
    ds = RaggedDataset(str(tmp_path / "ragged"))
    yield ds, records
    ds.close()


INDICES = [5, 0, 63, 17, 17, 2, 40]


def test_normalize_index_copies_misaligned_indices_to_an_aligned_array() -> None:
    indices = misaligned(INDICES, np.int64)
    normal = normalize_index(indices, COUNT)
    assert normal.flags.aligned and normal.flags.c_contiguous and normal.dtype == np.int64
    assert normal.tolist() == INDICES
    aligned = np.array(INDICES, dtype=np.int64)
    assert normalize_index(aligned, COUNT) is aligned  # an aligned array is still not copied


def test_dense_reads_take_misaligned_indices_and_give_the_same_records(dense: Any) -> None:
    ds, data = dense
    indices = misaligned(INDICES, np.int64)
    assert np.array_equal(ds[indices], data[INDICES])
    out = np.zeros((len(INDICES), 6), dtype=np.int32)
    ds.gather_into(indices, out)
    assert np.array_equal(out, data[INDICES])
    out[:] = 0
    ds.store.gather_into(indices, out, 24)  # the store's own checked path copies them
    assert np.array_equal(out, data[INDICES])


def test_the_dense_short_path_declines_misaligned_indices(dense: Any) -> None:
    ds, data = dense
    out = np.zeros((len(INDICES), 6), dtype=np.int32)
    assert native_calls.gather_fixed(ds.store, misaligned(INDICES, np.int64), out, 24) is False
    assert not out.any()
    assert native_calls.gather_fixed(ds.store, np.array(INDICES), out, 24) is True
    assert np.array_equal(out, data[INDICES])


def test_ragged_reads_take_misaligned_indices(ragged: Any) -> None:
    ds, records = ragged
    indices = misaligned(INDICES, np.int64)
    got = ds[indices]
    assert len(got) == len(INDICES)
    assert all(np.array_equal(a, records[i]) for a, i in zip(got, INDICES))
    assert ds.lengths(indices).tolist() == [len(records[i]) for i in INDICES]


def packed_arrays(count: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64],
                                       npt.NDArray[np.int32]]:
    return (np.full(4096, 7, dtype=np.uint8), np.full(count + 1, 9, dtype=np.uint64),
            np.full(count + 1, 9, dtype=np.int32))


@pytest.mark.parametrize("which", ["indices", "offsets", "rows"])
def test_a_packed_gather_refuses_a_misaligned_array_and_writes_nothing(
        ragged: Any, which: str) -> None:
    ds, records = ragged
    count = len(INDICES)
    indices = np.array(INDICES, dtype=np.int64)
    out, offsets, rows = packed_arrays(count)
    if which == "indices":
        indices = misaligned(INDICES, np.int64)
    elif which == "offsets":
        offsets = misaligned(offsets, np.uint64)
    else:
        rows = misaligned(rows, np.int32)
    assert native_calls.gather_packed(ds.store, indices, 4, out, offsets, rows) == \
        native_calls.PACKED_DECLINED
    with pytest.raises(ValueError, match=f"{which} is not aligned"):
        ds.gather_packed(indices, out, offsets, rows)
    with pytest.raises(ValueError, match=f"{which} is not aligned"):
        ds.record_offsets(indices, offsets, rows)
    assert (out == 7).all() and (offsets == 9).all() and (rows == 9).all()
    # The same arrays aligned: the records, back to back.
    good_out, good_offsets, good_rows = packed_arrays(count)
    assert ds.gather_packed(np.array(INDICES, dtype=np.int64), good_out, good_offsets, good_rows)
    values = good_out[: int(good_offsets[-1])].view(np.int32)
    assert np.array_equal(values, np.concatenate([records[i] for i in INDICES]))


def test_a_padded_gather_refuses_misaligned_rows_and_writes_nothing(ragged: Any) -> None:
    ds, _ = ragged
    count = len(INDICES)
    out = np.full(count * 40 * 4, 7, dtype=np.uint8)
    mask = np.full(count * 40, 7, dtype=np.uint8)
    rows = misaligned(np.full(count + 1, 9), np.uint64)
    pad_row = np.zeros(1, dtype=np.int32)
    with pytest.raises(ValueError, match="rows is not aligned"):
        ds.gather_padded(np.array(INDICES, dtype=np.int64), pad_row,
                         np.array([40], dtype=np.uint64), False, out, mask, rows)
    assert (out == 7).all() and (mask == 7).all() and (rows == 9).all()


def test_sampler_fill_refuses_a_misaligned_out_and_writes_nothing() -> None:
    sampler = Sampler(COUNT, 8, mode="cyclic", seed=0)
    out = misaligned(np.full(8, -1), np.int64)
    with pytest.raises(ValueError, match="aligned"):
        sampler.fill(0, out)
    assert (out == -1).all()
    aligned = np.empty(8, dtype=np.int64)
    sampler.fill(0, aligned)
    assert np.array_equal(aligned, sampler.batch(0))


def test_padding_takes_misaligned_offsets_through_pad_into_and_pad_rows_refuses_them() -> None:
    values = np.arange(10, dtype=np.int32)
    cu_values = [0, 3, 3, 10]
    out = np.full((3, 8), -1, dtype=np.int32)
    mask = np.zeros((3, 8), dtype=np.bool_)
    pad_into(values, misaligned(cu_values, np.int32), 8, 0, out, mask)
    assert out.tolist() == [[0, 1, 2, 0, 0, 0, 0, 0], [0] * 8, [3, 4, 5, 6, 7, 8, 9, 0]]
    assert mask.sum(axis=1).tolist() == [3, 0, 7]
    out[:] = -1
    pad_row = np.zeros(1, dtype=np.int32)
    with pytest.raises(ValueError, match="cu must be aligned"):
        pad_rows(values, misaligned(cu_values, np.int32), 4, pad_row, 8, out, mask)
    assert (out == -1).all()
