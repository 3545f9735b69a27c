"""Concurrency: many gathering threads beside an appending one, and close() under load."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx._store.schema import Codec
from loaderx.zrecord import Zrecord

pytestmark = pytest.mark.compiled

ROOT = Path(__file__).resolve().parents[2]

# Appends alternate between these codecs at random.
CODECS_MIXED: list[Codec] = ["raw", "zstd"]

GATHERERS = 8
ROUNDS = 30


def record_of(index: int) -> bytes:
    """Record `index`: its index, then a size and content that depend on it (some compressible)."""
    draw = random.Random(index)
    size = draw.randrange(0, 6000)
    if index % 2:
        body = draw.randbytes(size)
    else:
        body = bytes([index % 251, 7, 7, 7]) * (size // 4)
    return index.to_bytes(8, "little") + body


def dense_of(indices: np.ndarray) -> np.ndarray:
    """Dense 256-byte records of 32 uint64 words: the index, then small index-dependent values."""
    base = indices.astype(np.uint64)[:, None]
    words = (base * np.uint64(2654435761) + np.arange(32, dtype=np.uint64)[None, :]) % np.uint64(7)
    words[:, 0] = base[:, 0]
    return words


def run_threads(targets: list[Callable[[], None]]) -> None:
    """Runs each target on its own thread and re-raises the first failure."""
    failures: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def body() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        return body

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def test_eight_gatherers_and_one_appender(store_path: str) -> None:
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append([record_of(i) for i in range(1500)])
        appended = threading.Event()

        def appender() -> None:
            draw = random.Random(1)
            for _ in range(ROUNDS):
                first = len(store)
                batch = [record_of(first + k) for k in range(draw.randrange(1, 60))]
                codec = draw.choice(CODECS_MIXED)
                assert store.append(batch, codec=codec) == first
            appended.set()

        def gatherer(seed: int) -> Callable[[], None]:
            def body() -> None:
                draw = random.Random(seed)
                for _ in range(ROUNDS):
                    length = len(store)  # grows while we read: anything below it is committed
                    picks = [draw.randrange(length) for _ in range(draw.randrange(1, 128))]
                    got = store.gather(picks)
                    for index, record in zip(picks, got):
                        assert record == record_of(index), f"record {index}"

            return body

        run_threads([appender] + [gatherer(s) for s in range(GATHERERS)])
        assert appended.is_set()
        assert store.gather(slice(1500, None)) == [
            record_of(i) for i in range(1500, len(store))
        ]


def test_eight_dense_gatherers_and_one_appender(store_path: str) -> None:
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append_fixed(dense_of(np.arange(2000)), 256)

        def appender() -> None:
            for round_index in range(ROUNDS):
                first = len(store)
                count = 1 + round_index * 7 % 50
                rows = dense_of(np.arange(first, first + count))
                codec: Codec | None = "raw" if round_index % 2 else None
                assert store.append_fixed(rows, 256, codec=codec) == first

        def gatherer(seed: int) -> Callable[[], None]:
            def body() -> None:
                rng = np.random.default_rng(seed)
                out = np.empty((256, 32), dtype=np.uint64)
                for _ in range(ROUNDS):
                    indices = rng.integers(0, len(store), 256, dtype=np.int64)
                    store.gather_into(indices, out, 256)
                    assert np.array_equal(out, dense_of(indices))

            return body

        run_threads([appender] + [gatherer(s) for s in range(GATHERERS)])


def test_close_while_threads_are_inside_calls(store_path: str) -> None:
    store = Zrecord(store_path, create=True, codec="zstd")
    store.append([record_of(i) for i in range(400)])
    progress = threading.Semaphore(0)
    outcomes: list[int] = []
    lock = threading.Lock()

    def reader(seed: int) -> Callable[[], None]:
        def body() -> None:
            draw = random.Random(seed)
            done = 0
            while True:
                picks = [draw.randrange(400) for _ in range(64)]
                try:
                    got = store.gather(picks)
                    size = int(store.record_lengths(picks).sum())
                except ValueError as exc:
                    assert "closed" in str(exc)
                    break
                assert got == [record_of(i) for i in picks]
                assert size == sum(len(record) for record in got)
                done += 1
                progress.release()
            with lock:
                outcomes.append(done)

        return body

    threads = [threading.Thread(target=reader(s)) for s in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(20):  # close while the readers are busy, not before they begin
        assert progress.acquire(timeout=60)
    store.close()
    store.close()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    # Every reader saw either whole, correct batches or a clean "closed", nothing else.
    assert len(outcomes) == 4
    assert sum(outcomes) >= 20


def test_concurrent_appenders_get_disjoint_contiguous_ranges(store_path: str) -> None:
    with Zrecord(store_path, create=True, codec="zstd") as store:
        placed: dict[int, list[bytes]] = {}
        lock = threading.Lock()

        def appender(writer: int) -> Callable[[], None]:
            def body() -> None:
                draw = random.Random(writer)
                for batch_index in range(ROUNDS):
                    batch = [
                        f"writer {writer} batch {batch_index} record {k} ".encode() * (k + 1)
                        for k in range(draw.randrange(1, 20))
                    ]
                    first = store.append(batch, codec=draw.choice(CODECS_MIXED))
                    with lock:
                        placed[first] = batch

            return body

        run_threads([appender(w) for w in range(3)])
        expected: list[bytes] = []
        for first in sorted(placed):
            assert first == len(expected), "batches must land contiguously, without gaps"
            expected.extend(placed[first])
        assert len(store) == len(expected)
        assert store.gather(slice(None)) == expected


def self_checking(token: int) -> bytes:
    """A record that proves its own integrity: a crc32 of the body, then the body."""
    body = record_of(token)
    return zlib.crc32(body).to_bytes(4, "little") + body


def test_delete_and_compact_while_others_gather(store_path: str) -> None:
    # delete and compact take the store exclusively: readers racing them must see whole records
    # (or an IndexError when the store shrank under a stale index), never torn bytes.
    with Zrecord(store_path, create=True, codec="zstd") as store:
        store.append([self_checking(i) for i in range(1200)])
        stop = threading.Event()
        seen = [0]
        lock = threading.Lock()

        def gatherer(seed: int) -> Callable[[], None]:
            def body() -> None:
                draw = random.Random(seed)
                while not stop.is_set():
                    length = len(store)
                    picks = [draw.randrange(length) for _ in range(48)]
                    try:
                        got = store.gather(picks)
                    except IndexError:
                        continue
                    for record in got:
                        assert zlib.crc32(record[4:]) == int.from_bytes(record[:4], "little")
                    with lock:
                        seen[0] += len(got)

            return body

        model = list(range(1200))  # the token of each live record, in index order

        def seen_now() -> int:
            with lock:
                return seen[0]

        def maintainer() -> None:
            draw = random.Random(99)
            try:
                for _ in range(6):
                    # The readers race every round: each starts once they have read since the
                    # last (on a loaded machine the rounds could otherwise all pass before any
                    # reader's first gather, and the test then saw nothing).
                    before = seen_now()
                    deadline = time.monotonic() + 10.0
                    while seen_now() == before and time.monotonic() < deadline:
                        time.sleep(0.001)
                    targets = [draw.randrange(len(model)) for _ in range(60)]
                    store.delete(targets)
                    for index in sorted(set(targets), reverse=True):  # the spec's swap-last
                        model[index] = model[-1]
                        model.pop()
                    store.compact()
                    assert store.stats()["reclaimable"] == 0
            finally:
                stop.set()

        run_threads([maintainer] + [gatherer(s) for s in range(4)])
        assert seen[0] > 0
        assert store.gather(slice(None)) == [self_checking(token) for token in model]


def wide_of(indices: np.ndarray) -> np.ndarray:
    """Dense 4 KiB records of 512 uint64 words: the index, then index-dependent values."""
    base = indices.astype(np.uint64)[:, None]
    words = (base * np.uint64(40503) + np.arange(512, dtype=np.uint64)[None, :]) % np.uint64(251)
    words[:, 0] = base[:, 0]
    return words


CALLERS = 200


def test_two_hundred_concurrent_gathers_and_appends(store_path: str) -> None:
    # Far more batches in flight than cores (each is offered only the cores the others leave):
    # every call must still run and return exact data. Each batch is big enough to be split
    # across threads, and a barrier starts all 200 calls at once, so they overlap.
    with Zrecord(store_path, codec="zstd", create=True) as store:
        table = wide_of(np.arange(2000))
        store.append_fixed(table, 4096)
        start = threading.Barrier(CALLERS)
        placed: dict[int, int] = {}
        lock = threading.Lock()

        def gatherer(seed: int) -> Callable[[], None]:
            def body() -> None:
                rng = np.random.default_rng(seed)
                out = np.empty((256, 512), dtype=np.uint64)
                start.wait()
                for _ in range(6):
                    indices = rng.integers(0, 2000, 256, dtype=np.int64)
                    store.gather_into(indices, out, 4096)
                    assert np.array_equal(out, table[indices])

            return body

        def appender(writer: int) -> Callable[[], None]:
            def body() -> None:
                # Writers tag their rows with ids past 10^6 so each batch's content is known.
                rows = wide_of(np.arange(48) + 1_000_000 + writer * 48)
                start.wait()
                first = store.append_fixed(rows, 4096, codec="raw" if writer % 4 == 0 else "zstd")
                with lock:
                    placed[first] = writer

            return body

        appenders = CALLERS // 5
        run_threads([appender(w) for w in range(appenders)] + [gatherer(s) for s in range(CALLERS - appenders)])
        assert len(store) == 2000 + appenders * 48
        assert sorted(placed) == [2000 + k * 48 for k in range(appenders)]
        out = np.empty((48, 512), dtype=np.uint64)
        for first, writer in placed.items():
            store.gather_into(np.arange(first, first + 48), out, 4096)
            assert np.array_equal(out, wide_of(np.arange(48) + 1_000_000 + writer * 48))


# ---- indices whose memory changes during the call ----------------------------------------------

_OVERLAP = """
import sys
import numpy as np
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

codec, how, folder = sys.argv[1], sys.argv[2], sys.argv[3]
n = 4096
data = np.arange(n, dtype=np.int64) * 3 + (1 << 40)
from_numpy(folder, data, codec=codec, progress=False)
buffer = np.zeros(2 * n, dtype=np.int64)
buffer[:n] = np.arange(n)[::-1]
idx, out = buffer[:n], buffer[300:300 + n]  # out overlaps the indices, 300 records on
wanted = data[np.arange(n)[::-1]]
with DenseDataset(folder) as ds:
    ds.read(idx, out=out) if how == "read" else ds.gather_into(idx, out)
assert np.array_equal(out, wanted), "wrong records"
print("ok")
"""


def test_an_out_that_overlaps_the_indices_gets_the_records_they_named(tmp_path: Path) -> None:
    """The native gather checks the indices once and reads them again while it copies, so it
    works on its own copy: records written into an `out` that overlaps the index array are
    exactly those the indices named before the call (it used to read overwritten indices,
    unchecked, and abort)."""
    for codec in ("raw", "zstd"):
        for how in ("gather_into", "read"):
            result = subprocess.run(
                [sys.executable, "-c", _OVERLAP, codec, how, str(tmp_path / f"{codec}-{how}")],
                capture_output=True, text=True, timeout=120, cwd=ROOT,
            )
            assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr}"
            assert result.stdout == "ok\n", (codec, how, result.stdout + result.stderr)


_SCRIBBLED = """
import sys
import threading
import numpy as np
from loaderx.zrecord import Zrecord

n = 1 << 16
data = np.arange(n * 8, dtype=np.uint64).reshape(n, 8)
with Zrecord(sys.argv[1], codec=sys.argv[2], create=True) as store:
    store.append_fixed(data, 64)
idx = np.arange(n, dtype=np.int64)
stop = threading.Event()

def scribble():
    while not stop.is_set():
        idx[n // 2:] = 1 << 30
        idx[n // 2:] = np.arange(n // 2, n)

outcomes = {"refused": 0, "read": 0}
writer = threading.Thread(target=scribble)
writer.start()
try:
    with Zrecord(sys.argv[1]) as store:
        for _ in range(200):
            out = np.zeros_like(data)
            try:
                store.gather_into(idx, out, 64)
            except IndexError:
                outcomes["refused"] += 1
            else:
                outcomes["read"] += 1
                assert np.array_equal(out, data), "wrong records"
finally:
    stop.set()
    writer.join()
print(outcomes["refused"] + outcomes["read"])
"""


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_indices_rewritten_by_another_thread_never_crash(tmp_path: Path, codec: Codec) -> None:
    """Another thread rewrites half the index array (to an out-of-range value and back) while
    gathers run with the GIL released: each gather either refuses with IndexError or returns
    exactly the records the indices named; the process never aborts (it used to, reading an
    index again after its check)."""
    result = subprocess.run(
        [sys.executable, "-c", _SCRIBBLED, str(tmp_path / "s"), codec],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr}"
    assert result.stdout == "200\n", result.stdout + result.stderr
