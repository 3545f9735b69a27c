"""Recycled memory behind big read results (loaderx.result_buffers): exact data on recycled
memory, never a buffer that is still referenced, threads, fork, the limits, release."""

from __future__ import annotations

import gc
import os
import threading
import time
import traceback
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx
from loaderx._native import result_buffers
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError
from loaderx._native.result_buffers import Limits, ResultBufferPool, size_class

from forked_child import held_by_another_thread, run_child, wait_child

pytestmark = pytest.mark.compiled

RECORDS = 300
ITEM = (16, 8)  # int32: 512-byte records
SMALL_MIN_BYTES = 4096  # results of 8 records and more are pooled in these tests
HEADER = ENTRY = 16  # meta.zr's header and table entry sizes (see tests/store/test_integrity.py)


@pytest.fixture
def small_pool() -> Iterator[None]:
    """The pool with a test-sized threshold; the previous limits and an empty pool after."""
    result_buffers.release_buffers()
    previous = result_buffers.configure(min_bytes=SMALL_MIN_BYTES, per_size=2, max_bytes=1 << 20)
    try:
        yield
    finally:
        gc.collect()
        result_buffers.configure(*previous)
        result_buffers.release_buffers()


def dense(path: Path, **options: Any) -> tuple[DenseDataset, np.ndarray]:
    data = np.random.default_rng(11).integers(-(2**31), 2**31, (RECORDS, *ITEM), dtype=np.int32)
    dataset = DenseDataset(path, dtype=np.int32, item_shape=ITEM, codec="raw", **options)
    dataset.append(data)
    return dataset, data


def indices(rng: np.random.Generator, count: int) -> np.ndarray:
    return rng.integers(0, RECORDS, count)


def test_size_classes_round_up_by_at_most_an_eighth() -> None:
    for nbytes in [1, 7, 8, 9, 4096, 4097, 5000, (32 << 20) - 1, 32 << 20, (32 << 20) + 1]:
        size = size_class(nbytes)
        assert nbytes <= size <= nbytes + nbytes // 8 + 1
        assert size_class(size) == size
    assert size_class(17) == 18 and size_class(4097) == 4608


def test_recycled_results_round_trip_exactly(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d")
    rng = np.random.default_rng(3)
    reused_before = result_buffers.stats()["reused"]
    for call in range(300):
        idx = indices(rng, int(rng.choice([8, 9, 40, 41, 100])))
        forms: list[Callable[[], np.ndarray]] = [
            lambda: dataset[idx],
            lambda: dataset.read(idx),
            lambda: dataset.read(idx.tolist()),
            lambda: dataset[idx - RECORDS],  # negative: the native path refuses, general path
        ]
        result = forms[call % len(forms)]()
        assert result.shape == (len(idx), *ITEM) and result.dtype == np.int32
        assert result.flags.c_contiguous and result.flags.writeable
        anchor = result.base
        assert not result.flags.owndata and anchor is not None
        assert isinstance(anchor.base, memoryview)
        np.testing.assert_array_equal(result, data[idx])
        # Whatever the user leaves in a result, the next read over that memory overwrites it.
        result[...] = -1
    assert result_buffers.stats()["reused"] - reused_before >= 250
    # A slice read and a small read: pooled and not, both exact.
    np.testing.assert_array_equal(dataset[10:60], data[10:60])
    np.testing.assert_array_equal(dataset[[5, 6]], data[[5, 6]])
    dataset.close()


def test_a_result_alive_is_never_reused(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d")
    rng = np.random.default_rng(4)
    idx = indices(rng, 40)
    held = dataset[idx]
    view = held[5:10]
    expected = data[idx]
    for _ in range(20):
        other = dataset[indices(rng, 40)]
        assert not np.shares_memory(other, held)
        other[...] = -7
        del other
    np.testing.assert_array_equal(held, expected)
    del held  # the view alone keeps the memory
    for _ in range(20):
        other = dataset[indices(rng, 40)]
        assert not np.shares_memory(other, view)
        other[...] = -7
        del other
    np.testing.assert_array_equal(view, expected[5:10])
    reused = result_buffers.stats()["reused"]
    del view
    np.testing.assert_array_equal(dataset[idx], expected)
    assert result_buffers.stats()["reused"] == reused + 1
    dataset.close()


DERIVED: dict[str, Callable[[Any], Any]] = {
    "slice": lambda r: r[3:9, 2],
    "transpose": lambda r: r.T,
    "dtype view": lambda r: r.view(np.uint8),
    "reshape": lambda r: r.reshape(-1),
    "memoryview": lambda r: memoryview(r),
    "frombuffer": lambda r: np.frombuffer(r, dtype=np.int32),
    "base": lambda r: r.base,
    "raw memoryview": lambda r: r.base.base,  # the pool's memoryview itself
    "memoryview of it": lambda r: memoryview(r.base.base),
    "asarray of it": lambda r: np.asarray(r.base.base),
}


@pytest.mark.parametrize("kind", sorted(DERIVED))
def test_anything_derived_from_a_result_keeps_its_memory(
    tmp_path: Path, small_pool: None, kind: str
) -> None:
    dataset, data = dense(tmp_path / "d")
    rng = np.random.default_rng(5)
    idx = indices(rng, 40)
    result = dataset[idx]
    np.testing.assert_array_equal(result, data[idx])
    derived = DERIVED[kind](result)
    expected = np.asarray(derived).tobytes()
    del result
    gc.collect()
    for _ in range(10):
        other = dataset[indices(rng, 40)]
        other[...] = -3
        del other
    assert np.asarray(derived).tobytes() == expected
    dataset.close()


def test_threads_get_correct_and_distinct_buffers(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d")
    held: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(4)]
    failures: list[str] = []

    def reader(number: int) -> None:
        rng = np.random.default_rng(number)
        mine = held[number]
        try:
            for _ in range(150):
                idx = indices(rng, int(rng.choice([8, 40])))
                mine.append((dataset[idx], idx))
                if len(mine) > 3:
                    mine.pop(0)
                for result, wanted in mine:  # what this thread still holds is intact
                    if not np.array_equal(result, data[wanted]):
                        failures.append(f"thread {number}: a held result changed")
                        return
        except BaseException:
            failures.append(traceback.format_exc())

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    alive = [result for mine in held for result, _ in mine]
    assert len(alive) == 12
    for i, first in enumerate(alive):
        for second in alive[i + 1 :]:
            assert not np.shares_memory(first, second)
    assert result_buffers.stats()["reused"] > 0
    dataset.close()


def test_a_forked_child_starts_with_an_empty_pool(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d")
    stop = threading.Event()

    def busy() -> None:  # keeps taking and giving back buffers (and the pool's lock)
        rng = np.random.default_rng(9)
        while not stop.is_set():
            idx = indices(rng, 40)
            assert np.array_equal(dataset[idx], data[idx])

    thread = threading.Thread(target=busy)
    thread.start()
    kept = dataset[np.arange(40)]  # alive across the fork: the child must not reuse it
    try:
        for round_number in range(8):
            time.sleep(0.01)

            def child(seed: int = round_number) -> None:
                found = result_buffers.stats()
                assert (found["free_buffers"], found["leased"]) == (0, 0), found
                rng = np.random.default_rng(seed)
                for _ in range(30):
                    idx = indices(rng, 40)
                    result = dataset[idx]
                    assert np.array_equal(result, data[idx])
                    assert not np.shares_memory(result, kept)
                assert np.array_equal(kept, data[:40])
                assert result_buffers.stats()["reused"] > 0

            wait_child(run_child(child))
    finally:
        stop.set()
        thread.join()
    np.testing.assert_array_equal(kept, data[:40])
    dataset.close()



def test_a_forked_child_renews_every_pool_not_only_the_shared_one() -> None:
    """A pool made with ResultBufferPool() whose lock a parent thread held at the fork used to
    stay locked in the child for good: its first big result hung."""
    pool = ResultBufferPool(min_bytes=64, per_size=2, max_bytes=1 << 20)
    kept = pool.empty((4, 64), np.dtype(np.int32), 1024)
    kept[...] = 5
    del kept  # a free block the child must not see either
    def child() -> None:
        found = pool.stats()
        assert (found["free_buffers"], found["leased"], found["reused"]) == (0, 0, 0), found
        first = pool.empty((4, 64), np.dtype(np.int32), 1024)
        first[...] = 1
        del first
        second = pool.empty((4, 64), np.dtype(np.int32), 1024)
        assert pool.stats()["reused"] == 1 and not second.flags.owndata

    with held_by_another_thread(pool._lock):
        pid = run_child(child)
    wait_child(pid)
    assert pool.stats()["free_buffers"] == 1  # the parent's pool is as it was


def test_the_pool_keeps_at_most_per_size_and_max_bytes(tmp_path: Path, small_pool: None) -> None:
    dataset, _ = dense(tmp_path / "d")
    results = [dataset[np.arange(40)] for _ in range(5)]  # 20 KiB each, one size class
    assert result_buffers.stats()["leased"] == 5
    del results
    found = result_buffers.stats()
    assert (found["free_buffers"], found["free_bytes"], found["leased"]) == (2, 2 * 20480, 0)
    result_buffers.configure(max_bytes=64 << 10)
    sizes = [8, 16, 24, 32, 48, 64, 80, 96]  # records: 4 to 48 KiB results
    for _ in range(3):
        results = [dataset[np.arange(n)] for n in sizes]
        del results
        found = result_buffers.stats()
        assert found["free_bytes"] <= 64 << 10
        assert found["free_bytes"] >= (64 << 10) - size_class(96 * 512)
    # The newest blocks stay: the oldest were dropped first.
    result_buffers.configure(max_bytes=0)  # nothing kept, nothing pooled
    assert result_buffers.stats()["free_bytes"] == 0
    result = dataset[np.arange(40)]
    assert result.flags.owndata and result_buffers.stats()["leased"] == 0
    dataset.close()


def test_release_buffers_frees_the_memory(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d")
    tracemalloc.start()  # NumPy reports its allocations to tracemalloc
    try:
        results = [dataset[np.arange(n)] for n in (40, 80)]
        del results
        kept = result_buffers.stats()["free_bytes"]
        assert kept == size_class(40 * 512) + size_class(80 * 512)
        before, _ = tracemalloc.get_traced_memory()
        assert loaderx.release_buffers() == kept
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert before - after >= kept
    assert result_buffers.stats()["free_bytes"] == 0
    assert loaderx.release_buffers() == 0
    np.testing.assert_array_equal(dataset[np.arange(40)], data[:40])
    dataset.close()


def test_a_failed_gather_never_hands_out_its_buffer(tmp_path: Path, small_pool: None) -> None:
    dataset, data = dense(tmp_path / "d", verify=True)
    dataset.close()
    # Corrupt record 150's stored bytes: a checksummed read of it fails mid-batch.
    table = (tmp_path / "d" / "meta.zr").read_bytes()
    offset, _, _, chunk = (int(v) for v in np.frombuffer(
        table[HEADER + ENTRY * 150 : HEADER + ENTRY * 151], dtype=np.uint32))
    with open(tmp_path / "d" / f"{chunk & 0xFFFF}.zr", "r+b") as f:
        f.seek(offset + 100)
        byte = f.read(1)[0]
        f.seek(offset + 100)
        f.write(bytes([byte ^ 0x10]))
    dataset = DenseDataset(tmp_path / "d", verify=True)
    bad = np.concatenate([np.arange(20), [150], np.arange(200, 219)])
    good = np.concatenate([np.arange(20), [151], np.arange(200, 219)])
    for _ in range(5):
        with pytest.raises(CorruptStoreError):
            dataset[bad]
        result = dataset[good]
        np.testing.assert_array_equal(result, data[good])
        result[...] = -1
        del result
    gc.collect()
    assert result_buffers.stats()["leased"] == 0
    dataset.close()


def test_ragged_and_sharded_reads_round_trip_on_recycled_memory(
    tmp_path: Path, small_pool: None
) -> None:
    rng = np.random.default_rng(6)
    records = [rng.integers(0, 1000, (int(rng.integers(1, 60)), 4), dtype=np.int64)
               for _ in range(200)]
    ragged = RaggedDataset(tmp_path / "r", dtype=np.int64, item_shape=(4,), codec="zstd")
    ragged.append(records)
    sharded, data = dense(tmp_path / "s", shard_records=70)
    assert sharded.sharded
    held = ragged[np.arange(30)]
    reused = result_buffers.stats()["reused"]
    for _ in range(60):
        idx = rng.integers(0, 200, 30)
        for got, want in zip(ragged[idx], idx):
            np.testing.assert_array_equal(got, records[want])
        didx = indices(rng, 40)
        np.testing.assert_array_equal(sharded[didx], data[didx])
    for position, got in enumerate(held):
        np.testing.assert_array_equal(got, records[position])
    assert result_buffers.stats()["reused"] - reused >= 60
    ragged.close()
    sharded.close()


def test_the_real_threshold_is_32_mib(tmp_path: Path) -> None:
    result_buffers.release_buffers()
    assert result_buffers.stats()["min_bytes"] == 32 << 20
    record = 1 << 20
    data = np.random.default_rng(8).integers(0, 256, (6, record), dtype=np.uint8)
    dataset = DenseDataset(tmp_path / "big", dtype=np.uint8, item_shape=(record,), codec="raw")
    dataset.append(data)
    idx = np.arange(32) % 6
    before = result_buffers.stats()
    first = dataset[idx]
    assert result_buffers.stats()["leased"] == before["leased"] + 1
    first[...] = 0
    del first
    second = dataset[idx[::-1].copy()]
    assert result_buffers.stats()["reused"] == before["reused"] + 1
    np.testing.assert_array_equal(second, data[idx[::-1]])
    del second
    small = dataset[idx[:31]]  # 31 MiB: plain np.empty
    assert small.flags.owndata
    del small
    assert result_buffers.release_buffers() == 32 << 20
    dataset.close()


def test_configure_refuses_bad_limits_and_returns_the_previous_ones() -> None:
    pool = ResultBufferPool(min_bytes=10, per_size=1, max_bytes=100)
    for bad in (-1, 1.5, "1"):
        with pytest.raises(ValueError, match="min_bytes must be an int >= 0"):
            pool.configure(min_bytes=bad)  # type: ignore[arg-type]
    assert pool.configure(per_size=3) == Limits(10, 1, 100)
    assert pool.configure() == Limits(10, 3, 100)
    # A new pool takes the same limits only (it used to take any).
    for name, bad in (("min_bytes", -1), ("per_size", 1.5), ("max_bytes", "1")):
        with pytest.raises(ValueError, match=f"{name} must be an int >= 0, got {bad!r}"):
            ResultBufferPool(**{name: bad})  # type: ignore[arg-type]


def test_a_torch_tensor_made_from_a_result_keeps_its_memory(
    tmp_path: Path, small_pool: None
) -> None:
    torch = pytest.importorskip("torch")
    dataset, data = dense(tmp_path / "d")
    tensor = torch.from_numpy(dataset[np.arange(40)])
    gc.collect()
    for _ in range(10):
        other = dataset[np.arange(40)]
        other[...] = -3
        del other
    np.testing.assert_array_equal(tensor.numpy(), data[:40])
    dataset.close()
