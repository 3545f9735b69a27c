"""Large raw gathers give the same bytes whichever stores write them and however their records
are fetched.

A gather of 1 MiB or more of raw records of at least 1 KiB may write its destination with
streaming stores, and fetch its records non-temporally (zig/src/store/raw_copy.zig); each store and
each view of shards learns from its own timings which ways are faster. Its first 16 such
gathers try each way of writing in turn (8 and 8), its first 24 each way of fetching (16 and
8). These tests make 40 gathers per path, so every way runs, and compare every byte with NumPy,
including destinations that start one byte off alignment and the bytes just around them.
A fixed stores policy (loaderx._native.library.set_stores_policy) sends every such gather one way; each
policy gives the same bytes (tests/native/test_pool_policy.py checks that a bad one is refused).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._native import library as _native
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

RECORD = 4096  # bytes: 256 records make 1 MiB, the smallest batch that may stream
COUNT = 1024
BATCH = 256
GATHERS = 40  # beyond the 16 of the warm-up
POLICIES = (_native.STORES_STREAMING, _native.STORES_CACHED, _native.STORES_AUTO)
RAGGED_BATCH = 384  # token records of 4 KiB on average: always 1 MiB or more


@pytest.fixture(autouse=True)
def restore_policy() -> Iterator[None]:
    yield
    _native.set_stores_policy(_native.STORES_AUTO)


def _records() -> npt.NDArray[np.uint8]:
    return np.random.default_rng(11).integers(0, 256, size=(COUNT, RECORD), dtype=np.uint8)


def _batches() -> list[npt.NDArray[np.int64]]:
    rng = np.random.default_rng(12)
    return [rng.integers(0, COUNT, BATCH) for _ in range(GATHERS)]


def _off_alignment(shape: tuple[int, ...]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """A writable C-contiguous array starting one byte into a buffer, and the whole buffer."""
    size = int(np.prod(shape))
    buffer = np.full(size + 2, 0xAA, dtype=np.uint8)
    return buffer[1 : 1 + size].reshape(shape), buffer


def _check_gathers(ds: DenseDataset, records: npt.NDArray[np.uint8]) -> None:
    for n, indices in enumerate(_batches()):
        want = records[indices]
        assert np.array_equal(ds[indices], want)
        if n % 2:
            out, buffer = _off_alignment(want.shape)
            ds.gather_into(indices, out)
            assert np.array_equal(out, want)
            assert buffer[0] == 0xAA and buffer[-1] == 0xAA
        else:
            out = np.full(want.shape, 0x55, dtype=np.uint8)
            ds.gather_into(indices, out)
            assert np.array_equal(out, want)


def test_one_store_round_trips_through_both_ways(tmp_path: Path) -> None:
    records = _records()
    ds = DenseDataset(tmp_path / "one", dtype=np.uint8, item_shape=(RECORD,), codec="raw")
    ds.append(records)
    _check_gathers(ds, records)
    ds.close()


def test_shards_round_trip_through_both_ways(tmp_path: Path) -> None:
    records = _records()
    ds = DenseDataset(
        tmp_path / "shards", dtype=np.uint8, item_shape=(RECORD,), codec="raw", shard_records=300
    )
    ds.append(records[:500])
    ds.append(records[500:])
    assert len(ds.shard_stats()) == 4
    _check_gathers(ds, records)
    ds.close()


def test_a_loader_ring_round_trips_through_both_ways(tmp_path: Path) -> None:
    """The loader's ring of batches, the case streaming stores are for, against the sampler's
    indices read with NumPy."""
    records = _records()
    ds = DenseDataset(tmp_path / "ring", dtype=np.uint8, item_shape=(RECORD,), codec="raw")
    ds.append(records)
    labels = DenseDataset(tmp_path / "labels", dtype=np.int64, item_shape=(), codec="raw")
    labels.append(np.arange(COUNT, dtype=np.int64) * 3)
    loader = DataLoader({"x": ds, "y": labels}, batch_size=BATCH, seed=5)
    try:
        for _ in range(GATHERS):
            batch = next(loader)
            y = batch["y"]
            assert np.array_equal(y % 3, np.zeros_like(y))
            assert np.array_equal(batch["x"], records[y // 3])
    finally:
        loader.close()
        ds.close()
        labels.close()


def test_the_default_stores_policy_is_auto_and_each_reads_back() -> None:
    assert _native.stores_policy() == _native.STORES_AUTO
    for policy in POLICIES:
        _native.set_stores_policy(policy)
        assert _native.stores_policy() == policy


def test_every_stores_policy_gives_the_same_bytes_from_a_store_and_from_shards(tmp_path: Path) -> None:
    records = _records()
    one = DenseDataset(tmp_path / "one", dtype=np.uint8, item_shape=(RECORD,), codec="raw")
    shards = DenseDataset(
        tmp_path / "shards", dtype=np.uint8, item_shape=(RECORD,), codec="raw", shard_records=300
    )
    for ds in (one, shards):
        ds.append(records)
    try:
        for policy in POLICIES:
            _native.set_stores_policy(policy)
            for ds in (one, shards):
                _check_gathers(ds, records)
    finally:
        one.close()
        shards.close()



def _ragged_records(count: int, seed: int) -> list[npt.NDArray[np.int32]]:
    """Token records of 1 to 2,047 int32 (4 bytes to 8 KiB at any 4-byte offset: slot
    boundaries fall inside 16-byte blocks), a few of them longer, with empty ones between."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 2048, size=count)
    lengths[::97] = 0
    lengths[5::131] = 6000
    return [rng.integers(0, 1 << 31, size=int(n), dtype=np.int32) for n in lengths]


def test_packed_ragged_batches_round_trip_through_every_stores_policy(tmp_path: Path) -> None:
    """Packed slots lie back to back at any 4-byte offset: a streamed batch writes the blocks
    two records share as one (raw_copy.zig, StreamedRun). Every byte against the records, and
    the bytes around the batch untouched."""
    from loaderx.dataset import RaggedDataset

    records = _ragged_records(COUNT, 21)
    rng = np.random.default_rng(22)
    for shard_records in (None, 300):
        ds = RaggedDataset(tmp_path / f"ragged-{shard_records}", dtype=np.int32, codec="raw",
                           shard_records=shard_records)
        ds.append(records)
        try:
            for policy in POLICIES:
                _native.set_stores_policy(policy)
                for n in range(GATHERS):
                    indices = rng.integers(0, COUNT, RAGGED_BATCH)
                    want = np.concatenate([records[i] for i in indices]).view(np.uint8)
                    assert want.nbytes >= 1 << 20  # large enough to stream
                    start = n % 16  # the batch at every offset of a block
                    buffer = np.full(want.nbytes + 64, 0xAA, dtype=np.uint8)
                    offsets = np.empty(RAGGED_BATCH + 1, dtype=np.uint64)
                    assert ds.gather_packed(indices, buffer[start:], offsets)
                    assert int(offsets[-1]) == want.nbytes
                    assert np.array_equal(buffer[start : start + want.nbytes], want)
                    assert (buffer[:start] == 0xAA).all()
                    assert (buffer[start + want.nbytes :] == 0xAA).all()
        finally:
            ds.close()


def test_records_of_an_odd_size_round_trip_through_every_stores_policy(tmp_path: Path) -> None:
    """Fixed-size slots of 4,100 bytes: every slot boundary but every fourth falls inside a
    16-byte block."""
    records = np.random.default_rng(23).integers(0, 256, size=(COUNT, RECORD + 4), dtype=np.uint8)
    ds = DenseDataset(tmp_path / "odd", dtype=np.uint8, item_shape=(RECORD + 4,), codec="raw")
    ds.append(records)
    try:
        for policy in POLICIES:
            _native.set_stores_policy(policy)
            _check_gathers(ds, records)
    finally:
        ds.close()
