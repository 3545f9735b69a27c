"""Tests for the padded gather (RaggedDataset.gather_padded, lx_{store,view}_gather_padded): one
native call gives exactly ds[indices] padded by hand, for raw, zstd and zstd_dict records, a
store and a sharded dataset (a view), with truncation, buckets, empty records and B = 1; it
refuses bad arguments with nothing written, and a DataLoader's padded step takes it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._native import library as _native
from loaderx.dataloader import DataLoader, Padding
from loaderx.dataset import RaggedDataset
from loaderx.errors import CorruptStoreError

pytestmark = pytest.mark.compiled

ITEM: tuple[int, ...] = (3,)
DTYPE: Any = np.int16
ROW: int = 6
FILL: int = 0x5A


def make_records(count: int, longest: int, seed: int) -> list[npt.NDArray[Any]]:
    """Records of 0 to `longest` rows of similar values (so a dictionary can be trained), a
    few empty."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest + 1, size=count)
    lengths[:4] = (0, longest, 1, 0)
    base = rng.integers(-50, 50, size=(longest, *ITEM)).astype(DTYPE)
    return [(base[: int(n)] + rng.integers(0, 3, size=(int(n), *ITEM))).astype(DTYPE)
            for n in lengths]


def dataset(tmp_path: Path, codec: str, sharded: bool, data: list[npt.NDArray[Any]]) -> RaggedDataset:
    shards = {"shard_records": 23} if sharded else {}
    made = RaggedDataset(tmp_path / f"{codec}-{sharded}", dtype=DTYPE, item_shape=ITEM,
                         codec=codec, dict_size=4096, **shards)  # type: ignore[arg-type]
    if codec == "zstd_dict":
        made.train_dict(data)
    made.append(data)
    return made


def by_hand(records: list[npt.NDArray[Any]], length: int, value: int
            ) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """The records padded to length with value, and their mask, written with NumPy."""
    out = np.full((len(records), length, *ITEM), value, dtype=DTYPE)
    mask = np.zeros((len(records), length), dtype=np.bool_)
    for i, record in enumerate(records):
        kept = min(len(record), length)
        out[i, :kept] = record[:kept]
        mask[i, :kept] = True
    return out, mask


def pad_row(value: int) -> npt.NDArray[np.uint8]:
    return np.full(ITEM, value, dtype=DTYPE).view(np.uint8)


def gather(ds: RaggedDataset, indices: npt.NDArray[np.int64], lengths: tuple[int, ...],
           truncate: bool, value: int) -> tuple[int, npt.NDArray[Any], npt.NDArray[np.bool_]]:
    """One gather_padded into buffers just large enough for the largest allowed length."""
    count = len(indices)
    most = max(lengths) if lengths else max([0, *ds.lengths(indices).tolist()])
    out = np.full(count * most * ROW + 7, FILL, dtype=np.uint8)
    mask = np.full(count * most + 7, FILL, dtype=np.uint8)
    rows = np.zeros(count + 1, dtype=np.uint64)
    assert ds.gather_padded(indices, pad_row(value), np.array(lengths, dtype=np.uint64), truncate,
                            out, mask, rows)
    length = int(rows[-1])
    cells = count * length
    # Nothing past the batch is written.
    assert (out[cells * ROW:] == FILL).all() and (mask[cells:] == FILL).all()
    assert rows[:-1].tolist() == ds.lengths(indices).tolist()
    return (length, out[: cells * ROW].view(DTYPE).reshape(count, length, *ITEM),
            mask[:cells].view(np.bool_).reshape(count, length))


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_padded_gathers_are_the_records_padded_by_hand(tmp_path: Path, codec: str,
                                                      sharded: bool) -> None:
    data = make_records(90, 30, seed=1)
    ds = dataset(tmp_path, codec, sharded, data)
    rng = np.random.default_rng(2)
    # (lengths, truncate, expected length from the longest record)
    forms: list[tuple[tuple[int, ...], bool, Callable[[int], int]]] = [
        ((), False, lambda n: n), ((40,), False, lambda n: 40),
        ((8, 16, 32), False, lambda n: min(b for b in (8, 16, 32) if b >= n)),
        ((4, 12), True, lambda n: 4 if n <= 4 else 12), ((5,), True, lambda n: 5)]
    with ds:
        for lengths, truncate, expected in forms:
            for count in (1, 2, 9, 40):
                indices = rng.integers(0, len(ds), size=count).astype(np.int64)
                records = ds[indices]
                length, out, mask = gather(ds, indices, lengths, truncate, value=-9)
                assert length == expected(max(len(r) for r in records))
                want, want_mask = by_hand(records, length, -9)
                assert out.tobytes() == want.tobytes()
                assert (mask == want_mask).all()


def test_empty_records_and_a_batch_of_them(tmp_path: Path) -> None:
    data = make_records(20, 10, seed=3)
    ds = dataset(tmp_path, "zstd", False, data)
    empties = np.array([i for i, r in enumerate(data) if len(r) == 0][:3], dtype=np.int64)
    with ds:
        length, out, mask = gather(ds, empties, (), False, value=1)
        assert length == 0 and out.shape == (len(empties), 0, *ITEM) and mask.shape == (len(empties), 0)
        length, out, mask = gather(ds, empties, (4,), False, value=1)
        assert length == 4 and not mask.any() and (out == 1).all()


def test_a_too_small_buffer_or_a_long_record_writes_only_rows(tmp_path: Path) -> None:
    data = make_records(30, 20, seed=4)
    ds = dataset(tmp_path, "raw", False, data)
    indices = np.array([1, 2, 5], dtype=np.int64)  # record 1 has 20 rows
    with ds:
        out = np.full(3 * 20 * ROW - 1, FILL, dtype=np.uint8)
        mask = np.full(3 * 20, FILL, dtype=np.uint8)
        rows = np.zeros(4, dtype=np.uint64)
        assert not ds.gather_padded(indices, pad_row(0), np.empty(0, np.uint64), False, out, mask, rows)
        assert int(rows[-1]) == 20 and (out == FILL).all() and (mask == FILL).all()
        assert not ds.gather_padded(indices, pad_row(0), np.array([8, 16], np.uint64), False,
                                    out, mask, rows)
        assert int(rows[-1]) == 20 and (out == FILL).all() and (mask == FILL).all()


def bad_calls(ds: RaggedDataset, out: Any, mask: Any, rows: Any) -> list[tuple[type, str, dict[str, Any]]]:
    indices = np.array([0, 1], dtype=np.int64)
    good: dict[str, Any] = {"indices": indices, "pad_row": pad_row(0),
                            "lengths": np.array([8], np.uint64), "truncate": False,
                            "out": out, "mask": mask, "rows": rows}
    return [
        (TypeError, "indices", {**good, "indices": indices.astype(np.int32)}),
        (IndexError, "10000", {**good, "indices": np.array([0, 10_000], np.int64)}),
        (ValueError, "lengths must increase", {**good, "lengths": np.array([8, 8], np.uint64)}),
        (ValueError, "lengths must increase", {**good, "lengths": np.array([0, 8], np.uint64)}),
        (TypeError, "lengths", {**good, "lengths": np.array([8], np.int64)}),
        (ValueError, "pad_row holds 2 bytes", {**good, "pad_row": np.zeros(2, np.uint8)}),
        (ValueError, "out must be a writable", {**good, "out": out[::2]}),
        (ValueError, "mask must be a writable", {**good, "mask": np.zeros(4, np.uint8)[::2]}),
        (ValueError, "rows has 2 entries", {**good, "rows": rows[:2]}),
        (ValueError, "needs lengths", {**good, "lengths": np.empty(0, np.uint64), "truncate": True}),
        (ValueError, "out overlaps mask", {**good, "mask": out[:100]}),
        (ValueError, "overlaps", {**good, "pad_row": out[:ROW]}),
    ]


@pytest.mark.parametrize("sharded", [False, True])
def test_bad_arguments_are_refused_with_nothing_written(tmp_path: Path, sharded: bool) -> None:
    ds = dataset(tmp_path, "zstd", sharded, make_records(30, 8, seed=5))
    out = np.full(1000, FILL, dtype=np.uint8)
    mask = np.full(100, FILL, dtype=np.uint8)
    rows = np.full(3, 77, dtype=np.uint64)
    with ds:
        for error, match, call in bad_calls(ds, out, mask, rows):
            with pytest.raises(error, match=match):
                ds.gather_padded(**call)
            assert (out == FILL).all() and (mask == FILL).all() and rows.tolist() == [77] * 3, match


def test_the_native_call_refuses_bad_arguments_itself(tmp_path: Path) -> None:
    """What the Python checks would catch first, passed straight to lx_store_gather_padded."""
    ds = dataset(tmp_path, "raw", False, make_records(10, 4, seed=6))
    store = ds.store
    lib = _native.lib
    indices = np.array([0, 1], dtype=np.int64)
    row = pad_row(0)
    lengths = np.array([4, 2], dtype=np.uint64)
    out = np.full(64, FILL, dtype=np.uint8)
    mask = np.full(16, FILL, dtype=np.uint8)
    rows = np.full(3, 77, dtype=np.uint64)
    with ds:
        mark = object()
        try:
            handle = store._enter(mark)  # type: ignore[union-attr]
            def call(**changes: Any) -> int:
                args: dict[str, Any] = {
                    "indices": indices.ctypes.data, "count": 2, "row_size": ROW,
                    "pad_row": row.ctypes.data, "lengths": lengths.ctypes.data, "length_count": 1,
                    "flags": 0, "out": out.ctypes.data, "out_capacity": out.nbytes,
                    "mask": mask.ctypes.data, "mask_capacity": mask.nbytes,
                    "out_rows": rows.ctypes.data, "out_length": rows.ctypes.data + 16, **changes}
                return int(lib.lx_store_gather_padded(handle, *args.values()))

            refusals: list[tuple[dict[str, Any], str]] = [
                ({"row_size": 0}, "row_size is 0"), ({"pad_row": None}, "pad_row is NULL"),
                ({"out_length": None}, "out_length is NULL"), ({"flags": 2}, "flags 2"),
                ({"length_count": 2}, "lengths do not increase"),
                ({"lengths": None}, "lengths is NULL"),
                ({"length_count": 0, "flags": 1}, "LX_PAD_TRUNCATE needs lengths"),
                ({"indices": None}, "indices is NULL"), ({"out_rows": None}, "out_rows is NULL"),
                ({"out": None}, "out is NULL"), ({"mask": None}, "mask is NULL"),
                ({"count": 1 << 62}, "overflows"),
                ({"mask": out.ctypes.data + 8}, "out overlaps mask"),
                ({"out_rows": out.ctypes.data}, "out overlaps out_rows"),
                ({"pad_row": mask.ctypes.data}, "mask overlaps pad_row"),
            ]
            for changes, message in refusals:
                assert call(**changes) == _native.INVALID_ARGUMENT, message
                assert message in lib.lx_last_error().decode(), message
                assert (out == FILL).all() and (mask == FILL).all() and rows.tolist() == [77] * 3
            assert call() == _native.OK and int(rows[2]) == 4
        finally:
            store._marks.discard(mark)  # type: ignore[union-attr]


def test_a_record_that_is_not_whole_rows_is_corrupt_with_nothing_written(tmp_path: Path) -> None:
    ds = dataset(tmp_path, "raw", False, make_records(10, 4, seed=7))
    with ds:
        out = np.full(400, FILL, dtype=np.uint8)
        mask = np.full(40, FILL, dtype=np.uint8)
        rows = np.zeros(3, dtype=np.uint64)
        # Rows of 4 bytes do not divide the 6-byte rows of the records.
        with pytest.raises(CorruptStoreError, match="whole number of 4-byte rows"):
            ds.store.gather_padded(np.array([1, 2], np.int64), 4, np.zeros(4, np.uint8),
                                   np.empty(0, np.uint64), False, out, mask, rows)
        assert (out == FILL).all() and (mask == FILL).all()


@pytest.mark.parametrize("sharded", [False, True])
@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_a_loader_pads_in_one_call_and_reuses_its_buffers(tmp_path: Path, codec: str,
                                                          sharded: bool) -> None:
    data = make_records(120, 40, seed=8)
    ds = dataset(tmp_path, codec, sharded, data)
    calls: list[int] = []
    original = ds.gather_padded

    def counted(*args: Any) -> bool:
        calls.append(1)
        return original(*args)

    try:
        ds.gather_padded = counted  # type: ignore[method-assign,assignment]
        counting = True
    except AttributeError:  # compiled by mypyc: its methods cannot be replaced
        counting = False
    for padding in (Padding(48, value=-1), Padding(buckets=(16, 32), value=2, truncate=True),
                    Padding(value=4)):
        # Cleared before the loader is made: its workers start making steps at once, and a
        # count cleared after that missed some of them (6 to 9 calls for 10 steps, now and
        # then, when other tests ran first).
        calls.clear()
        with DataLoader({"t": ds}, batch_size=7, seed=3, ragged=padding) as loader:
            for step in range(10):
                indices = loader.indices(step)
                records = ds[indices]
                batch = next(loader)
                length = padding.target(max(len(r) for r in records))
                want, want_mask = by_hand(records, length, padding.value)
                assert batch["t"].tobytes() == want.tobytes()
                assert (batch["t.mask"] == want_mask).all()
                del batch
            # One call a step (those the workers made ahead too), and one more on the steps
            # whose buffers had to grow.
            assert not counting or 10 <= len(calls) <= 10 + loader.prefetch + 6


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_records_checked_against_their_sums_pad_the_same(tmp_path: Path, codec: str) -> None:
    """verify=True sends every record, raw ones too, through the checked copy (and the cut
    records through their checked prefix)."""
    data = make_records(40, 16, seed=9)
    dataset(tmp_path, codec, False, data).close()
    indices = np.arange(40, dtype=np.int64)
    with RaggedDataset(tmp_path / f"{codec}-False", verify=True) as ds:
        for lengths, truncate in (((), False), ((6,), True)):
            length, out, mask = gather(ds, indices, lengths, truncate, value=3)
            want, want_mask = by_hand(data, length, 3)
            assert out.tobytes() == want.tobytes() and (mask == want_mask).all()
