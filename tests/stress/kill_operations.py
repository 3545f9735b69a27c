"""What a kill loop worker does, in the child that tests/stress/kill_loop.py forks and SIGKILLs:
the operations it runs in a loop on a store (append, delete, compact, conversion) or on a sharded
dataset (appends that roll over, deletes over several shards, parallel appends), the line it
writes to its parent before each operation (what it is about to do) and after it (acknowledged),
and the records and rows it writes, which describe themselves (pure functions of their id) so
that the checks of stress/kill_models.py can tell every byte exact. WORKERS maps each operation
of the loop to its worker.
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._data.converter import from_numpy
from loaderx._data.dense import DenseDataset
from loaderx._store.layout import SHARD_RECORDS_MAX
from loaderx._store.schema import Codec
from loaderx._store.zrecord import Zrecord

SHARDED_OPERATIONS: Final = ("sharded-append", "sharded-delete", "parallel-append")
OPERATIONS: Final = ("append", "delete", "compact", "convert", *SHARDED_OPERATIONS)
HEADER: Final = struct.Struct("<QII")  # own id, payload size, crc32 of the payload
# Stores are kept near this many records so that checking one stays cheap.
RECORDS_TARGET: Final = 1500


# --- records that describe themselves ------------------------------------------------------------


def payload_of(record_id: int) -> bytes:
    """The bytes of record record_id: random or compressible, 0..3000 bytes, a pure function."""
    seed = hashlib.blake2b(record_id.to_bytes(8, "little"), digest_size=8).digest()
    size = int.from_bytes(seed[:2], "little") % 3001
    stream = hashlib.shake_128(seed)
    if record_id % 3 == 0:
        return stream.digest(size)
    motif = bytes(b % 8 for b in stream.digest(64))
    return (motif * (size // 64 + 1))[:size]


def record_of(record_id: int) -> bytes:
    payload = payload_of(record_id)
    return HEADER.pack(record_id, len(payload), zlib.crc32(payload)) + payload


# --- the workers (run in a forked child, never return) ------------------------------------------


class Log:
    """Lines to the parent through a pipe; each os.write of a short line is atomic."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def say(self, *words: object) -> None:
        os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())


def _append_batch(store: Zrecord, log: Log, draw: random.Random, next_id: int, count: int) -> int:
    log.say("A", next_id, count)
    records = [record_of(next_id + k) for k in range(count)]
    store.append(records, codec=draw.choice(["raw", "zstd"]))
    log.say("a")
    return next_id + count


def _delete_some(store: Zrecord, log: Log, draw: random.Random) -> None:
    length = len(store)
    positions = sorted(draw.sample(range(length), min(length, draw.randrange(1, 60))))
    ids = [HEADER.unpack_from(r)[0] for r in store.gather(positions)]
    log.say("D", *ids)
    store.delete(positions)
    log.say("d")


def work_append(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    with Zrecord(path, create=True) as store:
        while True:
            next_id = _append_batch(store, log, draw, next_id, draw.randrange(1, 40))


def work_delete(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    # durable=True a third of the time: its fsyncs between the table and the length widen the
    # window in which a kill lands mid-delete.
    with Zrecord(path, create=True, durable=draw.random() < 0.3) as store:
        while True:
            if len(store) < RECORDS_TARGET:
                next_id = _append_batch(store, log, draw, next_id, draw.randrange(50, 200))
            else:
                _delete_some(store, log, draw)


def work_compact(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    with Zrecord(path, create=True, durable=draw.random() < 0.3) as store:
        while True:
            if len(store) < RECORDS_TARGET:
                next_id = _append_batch(store, log, draw, next_id, draw.randrange(50, 200))
            _delete_some(store, log, draw)
            log.say("C")
            store.compact()
            log.say("c")


def generation_of(generation: int) -> np.ndarray:
    """The array conversion number `generation` writes: distinct in every row and generation."""
    rows = 600 + 97 * (generation % 5)
    base = np.arange(rows * 16, dtype=np.int64).reshape(rows, 16)
    return ((base * 2654435761 + generation * 40503) % 65521).astype(np.int32)


def work_convert(path: str, log: Log, draw: random.Random, generation: int) -> None:
    while True:
        generation += 1
        codecs: list[Codec] = ["raw", "zstd", "zstd", "zstd_dict"]
        codec = draw.choice(codecs)
        # One process or two; shards of the default size or of 53 records (each worker's part
        # then ends in a short shard, which a parallel zstd_dict conversion must handle).
        workers = draw.choice([1, 1, 2])
        shard_records = draw.choice([SHARD_RECORDS_MAX, SHARD_RECORDS])
        log.say("V", generation)
        from_numpy(path, generation_of(generation), codec=codec, dict_size=4096, overwrite=True,
                   workers=workers, shard_records=shard_records)
        log.say("v")


# --- sharded datasets: rows that describe themselves, and their workers ---------------------

# Small shards, so that most appends and every delete of a few dozen rows cross shards.
SHARD_RECORDS: Final = 53
ROW_WIDTH: Final = 6
CODEC: Final[Codec] = "zstd"
APPEND_MAX: Final = 90  # rows per append: most of them span a rollover
DELETE_MAX: Final = 40  # rows per delete
PARALLEL_MAX: Final = 200  # rows per parallel append (two workers, shards of SHARD_RECORDS)
# The delete worker appends below this many rows and deletes above it.
DELETE_TARGET: Final = 1000
# The log tag of each sharded operation's own kind of write.
TESTED_TAG: Final = {"sharded-append": "A", "sharded-delete": "D", "parallel-append": "P"}


def rows_of(ids: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The rows of these ids: column 0 is the id, the others pure functions of it."""
    column = np.asarray(ids, dtype=np.int64).reshape(-1, 1)
    factors = np.arange(ROW_WIDTH, dtype=np.int64) * 2 + 1  # 1, 3, 5, ...: column 0 is the id
    return column * factors + np.arange(ROW_WIDTH, dtype=np.int64) * 7


def shard_lengths(ds: DenseDataset) -> list[int]:
    return [int(found["records"]) for found in ds.shard_stats()]


def _append_rows(ds: DenseDataset, log: Log, next_id: int, count: int) -> int:
    # The tail's room tells whether the append spans shards (then its new shards are pending
    # until the tail's part, the commit point, is in).
    room = max(0, SHARD_RECORDS - shard_lengths(ds)[-1])
    log.say("A", next_id, count, room)
    ds.append(rows_of(range(next_id, next_id + count)))
    log.say("a")
    return next_id + count


def _delete_rows(ds: DenseDataset, log: Log, draw: random.Random) -> None:
    # The ids go to the parent grouped by shard: a killed delete may leave any of the groups
    # deleted and the others not, but never part of one group.
    starts = np.cumsum([0, *shard_lengths(ds)])
    positions = sorted(draw.sample(range(len(ds)), min(len(ds), draw.randint(2, DELETE_MAX))))
    ids = ds[positions][:, 0].tolist()
    owners = (np.searchsorted(starts, positions, side="right") - 1).tolist()
    groups: dict[int, list[str]] = {}
    for owner, record_id in zip(owners, ids):
        groups.setdefault(owner, []).append(str(record_id))
    log.say("D", *(",".join(group) for group in groups.values()))
    ds.delete(positions)
    log.say("d")


def work_sharded_append(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
        while True:
            next_id = _append_rows(ds, log, next_id, draw.randint(1, APPEND_MAX))


def work_sharded_delete(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
        while True:
            if len(ds) < DELETE_TARGET:
                next_id = _append_rows(ds, log, next_id, draw.randint(1, APPEND_MAX))
            else:
                _delete_rows(ds, log, draw)


def parallel_append(path: str, first: int, count: int) -> None:
    from_numpy(path, rows_of(range(first, first + count)), codec=CODEC, workers=2, append=True,
               shard_records=SHARD_RECORDS)


def work_parallel_append(path: str, log: Log, draw: random.Random, next_id: int) -> None:
    # No handle of the dataset stays open here: the commit of each append is its own.
    while True:
        count = draw.randint(2, PARALLEL_MAX)
        log.say("P", next_id, count)
        parallel_append(path, next_id, count)
        log.say("p")
        next_id += count


WORKERS: Final[dict[str, Callable[[str, Log, random.Random, int], None]]] = {
    "append": work_append,
    "delete": work_delete,
    "compact": work_compact,
    "convert": work_convert,
    "sharded-append": work_sharded_append,
    "sharded-delete": work_sharded_delete,
    "parallel-append": work_parallel_append,
}
