"""Sharded datasets, continued: the native view under a read (a view replaced while a read
waits, its arguments, its stores' lifetime, a writer queued behind it), the limits both
languages hold, what the converters, verify, the command line and dictionary training do with
shards, a closed sharded dataset, and an append across shards that fails."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._store import sharded_store
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.zrecord import Zrecord

from shard_cases import CAPACITY, COUNT, SHAPE, dense_data, sharded

pytestmark = pytest.mark.compiled


def _roll_over_when_first_entered(
    monkeypatch: pytest.MonkeyPatch, ds: DenseDataset | RaggedDataset, roll_over: Any
) -> list[bool]:
    """Makes the first call on any view roll `ds` over just before it enters the view, so that
    it meets the view closed (as a reader on another thread does when a rollover lands between
    its picking up the view and its native call). Returns a flag list: [True] once it fired."""
    from loaderx._store.view import View

    fired: list[bool] = []
    enter = View._enter

    def entering(view: View, mark: object) -> int:
        if not fired:
            fired.append(True)
            roll_over()
            assert view.closed and ds.store.view is not view  # type: ignore[union-attr]
        return enter(view, mark)

    monkeypatch.setattr(View, "_enter", entering)
    return fired


@pytest.mark.parametrize("read", ["len", "record_lengths", "ragged"])
def test_a_read_that_meets_a_replaced_view_reads_again_through_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    records = [np.arange(k, dtype=np.int32) for k in range(1, 32)]
    with RaggedDataset(tmp_path / "r", dtype=np.int32, codec="raw", shard_records=10) as ds:
        ds.append(records[:25])
        fired = _roll_over_when_first_entered(monkeypatch, ds, lambda: ds.append(records[25:]))
        if read == "len":
            assert len(ds) == 31
        elif read == "record_lengths":
            assert ds.store.record_lengths([0, 30]).tolist() == [4, 124]
        else:
            got = ds[[30, 3, 0]]
            assert [list(r) for r in got] == [list(range(31)), list(range(4)), [0]]
        assert fired == [True]
        assert len(ds.shard_stats()) == 4


def test_a_dense_read_that_meets_a_replaced_view_reads_again_through_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
        store = ds.store
        assert isinstance(store, sharded_store.ShardedStore)
        stale = store.view
        ds.append(np.arange(25, 31, dtype=np.int64))  # a fourth shard: `stale` is closed now
        assert stale is not None and stale.closed
        current = sharded_store.ShardedStore.view
        handed: list[bool] = []

        def view_once_stale(self: sharded_store.ShardedStore) -> Any:
            # The fast path picks up the stale view, as a reader does that a rollover on another
            # thread overtakes; the general path then reads through the current one.
            if not handed:
                handed.append(True)
                return stale
            return current.fget(self)  # type: ignore[attr-defined]

        monkeypatch.setattr(sharded_store.ShardedStore, "view", property(view_once_stale))
        picks = np.array([30, 0, 17, 25], dtype=np.int64)
        assert np.array_equal(ds[picks], picks)
        assert handed == [True]
        out = np.zeros(4, dtype=np.int64)
        handed.clear()
        ds.read(picks, out=out)
        assert np.array_equal(out, picks) and handed == [True]


def test_view_arguments_are_checked_before_the_native_call(tmp_path: Path) -> None:
    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    with pytest.raises(ValueError, match="at least one store"):
        View([], "nothing")
    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append([b"abcd", b"efgh"])
    view = View([store, store], "twice")  # the same store twice is two shards of it
    try:
        assert len(view) == 4
        out = np.zeros(3, dtype=np.uint32)
        view.gather_into(np.array([3, 0, 1], dtype=np.int64), out, 4)
        assert out.tobytes() == b"efghabcdefgh"
        with pytest.raises(TypeError, match="int64"):
            view.gather_into(np.array([0], dtype=np.int32), out[:1], 4)
        with pytest.raises(ValueError, match="need 8"):
            view.gather_into(np.array([0, 1], dtype=np.int64), out, 4)
        with pytest.raises(ValueError, match="record 0 is 4 bytes but its destination slot is 2"):
            view.gather_into(np.array([0], dtype=np.int64), np.zeros(1, np.uint16), 2)
        with pytest.raises(ValueError, match="one-dimensional C-contiguous"):
            view.gather_into(np.array([0, 1, 2, 3], dtype=np.int64)[::2], out[:2], 4)
        with pytest.raises(ValueError, match="out must be a writable C-contiguous"):
            view.gather_into(np.array([0, 1], dtype=np.int64), np.zeros(4, dtype=np.uint32)[::2], 4)
        frozen = np.zeros(1, dtype=np.uint32)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="out must be a writable C-contiguous"):
            view.gather_into(np.array([0], dtype=np.int64), frozen, 4)
        assert out.tobytes() == b"efghabcdefgh" and frozen[0] == 0  # nothing was written
        data, offsets = view.gather_ragged(np.array([2, 1], dtype=np.int64))
        assert data.tobytes() == b"abcdefgh" and offsets.tolist() == [0, 4, 8]
    finally:
        view.close()
        store.close()
    with pytest.raises(ValueError, match="closed"):
        len(view)
    with pytest.raises(ValueError, match="closed"):
        store.native_handle


def test_a_view_holds_its_stores_and_closing_a_store_closes_the_view(tmp_path: Path) -> None:
    # The view borrowed only the stores' handles: a store collected under it, or closed before
    # it, freed what the next view call read (a segmentation fault).
    import gc

    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    with Zrecord(tmp_path / "s", create=True, codec="raw") as store:
        store.append_fixed(np.arange(10, dtype=np.uint64), 8)
    view = View([Zrecord(tmp_path / "s")], "collected")
    gc.collect()
    out = np.zeros(2, dtype=np.uint64)
    view.gather_into(np.array([9, 0], dtype=np.int64), out, 8)
    assert out.tolist() == [9, 0] and len(view) == 10
    view.close()

    first = Zrecord(tmp_path / "s")
    second = Zrecord(tmp_path / "s")
    views = [View([first], "one"), View([second, first], "two"), View([second], "other")]
    first.close()
    for closed in views[:2]:
        with pytest.raises(ValueError, match="is closed"):
            len(closed)
        with pytest.raises(ValueError, match="is closed"):
            closed.gather_into(np.array([0], dtype=np.int64), out[:1], 8)
    assert len(views[2]) == 10  # a view over other stores only stays open
    with pytest.raises(ValueError, match="is closed"):
        View([second, first], "late")
    views[2].close()
    second.close()


def test_a_view_of_one_store_twice_never_deadlocks_with_a_writer(tmp_path: Path) -> None:
    # A gather touching both positions of the store used to take its shared lock twice: a
    # compaction queued between the two waited on the first while the second waited on it.
    import threading

    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append_fixed(np.arange(1000, dtype=np.uint64), 8)
    view = View([store, store], "twice")
    indices = np.array([0, 1999] * 100, dtype=np.int64)
    stop = threading.Event()
    failures: list[BaseException] = []

    def repeat(action: Any) -> None:
        try:
            while not stop.is_set():
                action()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    out = np.zeros(len(indices), dtype=np.uint64)
    threads = [
        threading.Thread(target=repeat, args=(lambda: view.gather_into(indices, out, 8),), daemon=True),
        threading.Thread(target=repeat, args=(store.compact,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    stop.wait(2.0)
    stop.set()
    for thread in threads:
        thread.join(10.0)
    stuck = [thread.is_alive() for thread in threads]
    assert stuck == [False, False] and failures == []
    assert out.tolist() == [0, 999] * 100
    view.close()
    store.close()


def test_the_python_limits_agree_with_the_library() -> None:
    import ctypes

    from loaderx._native import library as _native
    from loaderx._store.layout import RECORD_COUNT_MAX, SHARD_COUNT_MAX, SHARD_RECORDS_MAX
    from loaderx.zrecord import RECORD_COUNT_MAX as STORE_RECORDS_MAX

    assert SHARD_RECORDS_MAX == STORE_RECORDS_MAX
    assert RECORD_COUNT_MAX == SHARD_COUNT_MAX * SHARD_RECORDS_MAX == 1 << 44
    out = ctypes.c_void_p()
    # The count is checked before the (absent) handle array is read.
    code = _native.lib.lx_view_open(None, SHARD_COUNT_MAX + 1, ctypes.byref(out))
    assert code == _native.INVALID_ARGUMENT and out.value is None
    assert f"a view holds 1 to {SHARD_COUNT_MAX} stores" in _native.lib.lx_last_error().decode()
    assert _native.lib.lx_view_open(None, 0, ctypes.byref(out)) == _native.INVALID_ARGUMENT


def test_converters_overwrite_a_sharded_dataset_but_nothing_foreign(tmp_path: Path) -> None:
    from loaderx.converter import from_numpy

    path, _data = sharded(tmp_path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        from_numpy(str(path), np.arange(5, dtype=np.int64))
    assert from_numpy(str(path), np.arange(5, dtype=np.int64), overwrite=True) == 5
    with DenseDataset(path) as ds:
        assert not ds.sharded and (ds[:] == np.arange(5)).all()
    path, _data = sharded(tmp_path / "again")
    (path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        from_numpy(str(path), np.arange(5, dtype=np.int64), overwrite=True)


def test_a_store_out_of_chunk_space_rolls_over_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard whose chunk space runs out (deleted garbage) before its record limit: the
    append that does not fit goes to a new shard. Chunk space cannot really be filled in a
    test (4096 x 4 GiB), so the store reports full past 7 records, as it would."""
    from loaderx.errors import StoreFullError
    from loaderx.zrecord import Zrecord

    real = Zrecord.append_fixed

    def append_fixed(store: Zrecord, data: npt.NDArray[Any], record_size: int, **kw: Any) -> int:
        if len(store) + data.nbytes // record_size > 7:
            raise StoreFullError(f"append to {store.path!r}: out of chunk space")
        return real(store, data, record_size, **kw)

    monkeypatch.setattr(Zrecord, "append_fixed", append_fixed)
    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw") as ds:
        assert ds.append(np.arange(5, dtype=np.int64)) == 0
        assert ds.append(np.arange(5, 10, dtype=np.int64)) == 5  # does not fit: new shard
        assert ds.append(np.arange(10, 12, dtype=np.int64)) == 10
        assert [s["records"] for s in ds.shard_stats()] == [5, 7]
        with pytest.raises(StoreFullError):  # a batch no empty shard can take is refused
            ds.append(np.arange(9, dtype=np.int64))
        assert (ds[:] == np.arange(12)).all()


def test_the_command_line_reports_a_sharded_dataset_whole(tmp_path: Path) -> None:
    from loaderx.cli.inspection import info_of

    path, data = sharded(tmp_path)
    info = info_of(str(path))
    assert info["records"] == COUNT
    assert info["logical_bytes"] == data.nbytes
    assert info["allocated_bytes"] >= data.nbytes  # the shard folders are counted too


def _flip_byte(chunk: Path, offset: int) -> None:
    with open(chunk, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_verify_names_bad_records_by_their_global_index(tmp_path: Path) -> None:
    import io
    import json

    from loaderx.cli import EXIT_PROBLEM, main
    from loaderx.verify import BadRecord

    path, data = sharded(tmp_path)
    with DenseDataset(path) as ds:
        assert ds.sharded and ds.verify().ok
        ds.sync()  # every shard's store, nothing to report
    record = data[0].nbytes  # raw records sit in index order in each shard's 0.zr
    # Record 2 of the first shard (the dataset's own folder), 5 of the second, 7 of the third.
    _flip_byte(path / "0.zr", 2 * record + 1)
    _flip_byte(path / "shard-000001" / "0.zr", 5 * record)
    _flip_byte(path / "shard-000002" / "0.zr", 7 * record + 3)
    want = [BadRecord(2, "checksum"), BadRecord(CAPACITY + 5, "checksum"), BadRecord(2 * CAPACITY + 7, "checksum")]
    with DenseDataset(path) as ds:
        report = ds.verify()
        assert report.bad == want and report.bad_count == 3
        assert report.records == COUNT and report.checksummed == COUNT and report.has_checksums
        # The records beside them read back exactly.
        intact = np.array([1, 3, CAPACITY + 4, CAPACITY + 6, 2 * CAPACITY + 8, COUNT - 1])
        np.testing.assert_array_equal(ds[intact], data[intact])
    out = io.StringIO()
    assert main(["verify", str(path), "--json"], out=out) == EXIT_PROBLEM
    listed = json.loads(out.getvalue())
    assert listed["bad"] == [{"index": b.index, "reason": b.reason} for b in want]
    assert listed["records"] == COUNT and listed["ok"] is False


def test_retraining_the_dictionary_of_a_sharded_dataset_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    from loaderx.errors import DictionaryError

    data = dense_data()
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="zstd_dict", dict_size=1024,
                      shard_records=CAPACITY) as ds:
        ds.train_dict(data[::5])
        ds.append(data)
        assert ds.sharded
        with pytest.raises(DictionaryError, match=r"shard-000002': the store already has a dictionary and 500 records"):
            ds.train_dict(data[::3])
        ds.append(data[:10])  # the shards' dictionary still compresses new records
    with DenseDataset(tmp_path / "d") as ds:
        np.testing.assert_array_equal(ds[np.arange(COUNT + 10)], np.concatenate([data, data[:10]]))


def test_a_ragged_view_gather_that_meets_a_delete_sizes_its_records_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizing and copying are two native calls: a delete between them makes the copy refuse a
    slot of the wrong size (SIZE_MISMATCH), and the pair runs again, up to a limit."""
    from loaderx._native import library as _native
    from loaderx._store import shared_calls
    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append([b"a", b"bcd", b"efghij"])
    view = View([store], "one")
    real = _native.lib.lx_view_gather
    calls: list[int] = []

    def refuse_first(*args: object) -> int:
        calls.append(1)
        return _native.SIZE_MISMATCH if len(calls) == 1 else int(real(*args))

    monkeypatch.setattr(_native.lib, "lx_view_gather", refuse_first)
    try:
        data, offsets = view.gather_ragged(np.array([2, 0, 1], dtype=np.int64))
        assert data.tobytes() == b"efghijabcd" and offsets.tolist() == [0, 6, 7, 10]
        assert len(calls) == 2
        # A copy refused every time gives up after a bounded number of rounds, with a message.
        calls.clear()

        def refuse_always(*args: object) -> int:
            calls.append(1)
            return _native.SIZE_MISMATCH

        monkeypatch.setattr(_native.lib, "lx_view_gather", refuse_always)
        with pytest.raises(ValueError, match="gather of 1 records from 'one'"):
            view.gather_ragged(np.array([1], dtype=np.int64))
        assert len(calls) == shared_calls._RAGGED_GATHER_ATTEMPTS
    finally:
        monkeypatch.undo()
        view.close()
        store.close()


def test_a_closed_sharded_dataset_raises_as_a_closed_store_does(tmp_path: Path) -> None:
    path, data = sharded(tmp_path)
    ds = DenseDataset(path)
    ds.close()
    out = np.full((2, *SHAPE), 7, dtype=np.uint16)
    for call in (
        lambda: len(ds),
        lambda: ds[3],
        lambda: ds[[]],
        lambda: ds[:],
        lambda: ds.read(np.array([0, 1]), out=out),
        lambda: ds.gather_into(np.array([0, 1]), out),
        lambda: ds.append(data[:1]),
        lambda: ds.delete([0]),
        lambda: ds.stats(),
        lambda: ds.verify(),
        lambda: ds.compact(),
    ):
        with pytest.raises(ValueError, match=r"^dataset .* is closed$"):
            call()
    assert (out == 7).all()
    with DenseDataset(path) as reopened:  # nothing changed
        assert reopened[:].tobytes() == data.tobytes()


@pytest.mark.parametrize("failing_call", [1, 3, 5])
def test_a_failed_append_across_shards_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    """The batch spans the tail and four new shards; whichever of its five store appends fails
    (the new shards are written first, the tail last), the dataset stays as it was."""
    from loaderx._store.layout import manifest_path
    from loaderx.zrecord import Zrecord

    path, data = sharded(tmp_path)  # shards of 1000, 1000, 500
    more = dense_data(4000)[::-1].copy()
    before = Path(manifest_path(str(path))).read_bytes()
    listing = sorted(os.listdir(path))
    original = Zrecord.append_fixed
    calls = []

    def flaky(store: Zrecord, rows: Any, record_size: int) -> int:
        calls.append(store.path)
        if len(calls) == failing_call:
            raise OSError(28, "No space left on device (injected)")
        return original(store, rows, record_size)

    with DenseDataset(path, shard_records=CAPACITY) as ds:
        monkeypatch.setattr(Zrecord, "append_fixed", flaky)
        with pytest.raises(OSError, match="injected"):
            ds.append(more)  # 500 into the tail, then 1000, 1000, 1000 and 500 in new shards
        monkeypatch.setattr(Zrecord, "append_fixed", original)
        assert len(ds) == COUNT and ds[:].tobytes() == data.tobytes()
        assert Path(manifest_path(str(path))).read_bytes() == before
        assert sorted(os.listdir(path)) == listing
        assert len(calls) == failing_call
        assert ds.append(more) == COUNT
        assert ds[:].tobytes() == np.concatenate([data, more]).tobytes()
    with DenseDataset(path) as reopened:
        assert reopened[:].tobytes() == np.concatenate([data, more]).tobytes()
        assert [s["records"] for s in reopened.shard_stats()] == [1000] * 6 + [500]
