"""A range is checked and written while it arrives (loaderx/_remote/arriving_range.py), against
moto's S3 server: records of 1 MB, so a range of four crosses 2 MiB steps of the chunk file.
The pieces reach the fetcher in small slices, and between two of them the test evicts, as
another thread or process of the cache may. And a fetch sends each store's requests before it
plans the next store's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import loaderx._remote.fetcher as fetcher_module
from loaderx._remote.fetcher import Fetcher
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import RemoteError

from .s3_server import S3Server

RECORD = 1_000_000  # record i lies at bytes [i * RECORD, (i + 1) * RECORD) of the chunk file
SLICE = 256 << 10


def records(count: int = 8) -> np.ndarray:
    return np.random.default_rng(4).integers(0, 256, (count, RECORD), dtype=np.uint8)


def sliced(fetcher: Fetcher, between: Callable[[int], None]) -> None:
    """The fetcher's ranges arrive in SLICE-byte pieces; between(bytes so far) runs before each
    piece after the first (the fetching thread holds no lock then)."""
    objects = fetcher._objects
    stream = objects.stream_range

    def stream_range(name: str, start: int, end: int, etag: str | None,
                     piece_bytes: int) -> Iterator[memoryview]:
        received = 0
        for piece in stream(name, start, end, etag, piece_bytes):
            for first in range(0, len(piece), SLICE):
                if received:
                    between(received)
                part = piece[first:first + SLICE]
                received += len(part)
                yield part

    objects.stream_range = stream_range  # type: ignore[method-assign]


def evict(fetcher: Fetcher, index: int) -> None:
    """Drops record `index` as Fetcher._evict does: under the exclusive gate and the state
    maps' lock, the eviction counter odd meanwhile, its blocks punched (the blocks it shares
    with no present record)."""
    with fetcher._gate.exclusive(), fetcher._maps.lock, fetcher._evicting():
        fetcher._maps.present[0][index] = 0
        fetcher._punch(0, np.array([index], dtype=np.int64), fetcher._maps.present[0])


def publish(server: S3Server, bucket: str, folder: Path, data: np.ndarray) -> str:
    from_numpy(str(folder), data, codec="raw")
    server.upload_tree(folder, bucket, "ds")
    return f"s3://{bucket}/ds"


def test_a_record_whose_first_bytes_an_eviction_punched_is_written_whole(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = records()
    url = publish(s3_env, s3_bucket, tmp_path / "local", data)
    # A bound below the dataset: ranges hold the records asked for, nothing absorbed.
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=6 * RECORD) as ds:
        fetcher = ds._remote.fetcher  # type: ignore[union-attr]
        np.testing.assert_array_equal(ds[np.array([1])], data[[1]])
        evicted: list[int] = []
        boundary = (2 << 20) - 2 * RECORD  # the first 2 MiB step, from record 2's start

        def between(received: int) -> None:
            # Once the first step wrote record 2's first bytes (it is still absent), record 1
            # is evicted: the block they share holds no present record, so it is punched.
            if received > boundary and not evicted:
                assert not fetcher._maps.present[0][2]
                evict(fetcher, 1)
                evicted.append(1)

        sliced(fetcher, between)
        # The gather copies from the replica's file: a punched head would read as zeros.
        np.testing.assert_array_equal(ds[np.array([2, 3, 4, 5])], data[2:6])
        assert evicted == [1]
        np.testing.assert_array_equal(ds[np.array([1, 2])], data[[1, 2]])


def test_a_failed_record_leaves_the_records_checked_before_it_present(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = records()
    local = tmp_path / "local"
    url = publish(s3_env, s3_bucket, local, data)
    chunk = local / "0.zr"
    raw = bytearray(chunk.read_bytes())
    raw[5 * RECORD + 7] ^= 0xFF  # record 5 now differs from its checksum
    chunk.write_bytes(bytes(raw))
    s3_env.upload_tree(local, s3_bucket, "bad")
    with DenseDataset(f"s3://{s3_bucket}/bad", cache_dir=tmp_path / "cache",
                      cache_bytes=6 * RECORD) as ds:
        fetcher = ds._remote.fetcher  # type: ignore[union-attr]
        sliced(fetcher, lambda received: None)
        with pytest.raises(RemoteError, match="record 5 .* does not match its checksum"):
            ds[np.array([2, 3, 4, 5])]
        # Records 2 and 3 were checked and written by steps before record 5 arrived.
        assert fetcher._maps.present[0][[2, 3, 4, 5]].tolist() == [1, 1, 0, 0]
        np.testing.assert_array_equal(ds[np.array([3, 2])], data[[3, 2]])
    del url



def test_the_first_store_s_requests_leave_before_the_next_store_is_planned(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = np.random.default_rng(6).integers(0, 256, (60, 500), dtype=np.uint8)
    with DenseDataset(str(tmp_path / "local"), dtype=np.uint8, item_shape=(500,), codec="raw",
                      shard_records=20) as local:
        for start in range(0, 60, 20):
            local.append(data[start:start + 20])
    s3_env.upload_tree(tmp_path / "local", s3_bucket, "ds")
    events: list[str] = []
    plan = fetcher_module.plan_ranges

    def planning(store: int, *args: Any) -> list[Any]:
        events.append(f"plan {store}")
        return plan(store, *args)

    monkeypatch.setattr(fetcher_module, "plan_ranges", planning)
    with DenseDataset(f"s3://{s3_bucket}/ds", cache_dir=tmp_path / "cache") as ds:
        fetcher = ds._remote.fetcher  # type: ignore[union-attr]
        pool = fetcher._executor()

        class Logged:
            def submit(self, call: Callable[[Any], None], piece: Any) -> Any:
                events.append(f"send {piece.store}")
                return pool.submit(call, piece)

        monkeypatch.setattr(fetcher, "_executor", lambda: Logged())
        np.testing.assert_array_equal(ds[np.array([5, 25, 45])], data[[5, 25, 45]])
    assert events == ["plan 0", "send 0", "plan 1", "send 1", "plan 2", "send 2"]
