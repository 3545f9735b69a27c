"""Kill loop: SIGKILL a worker at random moments in append, delete, compact and conversion, and
in appends, deletes and parallel appends of a sharded dataset.

    python3 tests/stress/kill_loop.py --kills 1000               every operation, 1,000 kills each
    python3 tests/stress/kill_loop.py --kills 200 --ops convert  one operation (the CI size is 200)
    python3 tests/stress/kill_loop.py --kills 300 --ops sharded-append,sharded-delete,parallel-append

Each round forks a worker from this process (already holding numpy and the library, so a round
costs milliseconds, not an interpreter start), lets it run its operation in a loop for a random
few milliseconds, and SIGKILLs it together with the processes it forked (its process group,
as when a job is killed). The worker writes a line to a pipe before each operation
(what it is about to do) and one after it returns (acknowledged). After each kill this process
reopens the store and checks that:
- it opens, and every record in it is exact (records describe themselves: id, size, CRC, and
  bytes that are a pure function of the id);
- its set of ids is the acknowledged one, or that one with the interrupted operation applied
  whole (an operation is all or nothing);
- for conversion with overwrite=True: the destination holds the old or the new dataset,
  complete, and recovery leaves no hidden folder behind.
The sharded operations work on a DenseDataset of small shards (shard_records=53), whose rows are
int64 columns computed from a unique id. After each kill the dataset opens writable, verify()
finds nothing, every row is exact, and the ids are what the README allows: an append that fits
the last shard, an append past the last shard's room (new shards plus the tail's part) and a
parallel append are all or nothing; so is a delete over several shards, once the writable open
that reads the dataset here has finished one that a kill cut between shards
(loaderx._store.delete_journal). Then this process appends (a commit) and no staging, claim, parts or
unlisted shard folder of the killed worker survives it.
Exit status 0 when every round passed; otherwise the first failure is printed and it is 1.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import random
import select
import shutil
import signal
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Final

# The repository root (this file is two folders down), for loaderx from the working tree.
ROOT: Final = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402

from loaderx._os import folder_swap as commit  # noqa: E402
from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._store.delete_journal import JOURNAL_FILE  # noqa: E402
from loaderx._store.schema import Codec  # noqa: E402
from loaderx._store.layout import STAGING_PREFIX, shard_number  # noqa: E402
from loaderx._store.manifest import read_manifest  # noqa: E402
from loaderx._store.zrecord import Zrecord  # noqa: E402

SHARDED_OPERATIONS: Final = ("sharded-append", "sharded-delete", "parallel-append")
OPERATIONS: Final = ("append", "delete", "compact", "convert", *SHARDED_OPERATIONS)
HEADER: Final = struct.Struct("<QII")  # own id, payload size, crc32 of the payload
# Kill delays, in seconds, drawn uniformly from [0, DELAY_MAX): long enough for a worker to be
# deep inside several operations, short enough that a round stays cheap.
DELAY_MAX: Final = {
    "append": 0.03,
    "delete": 0.03,
    "compact": 0.04,
    "convert": 0.25,
    "sharded-append": 0.08,
    "sharded-delete": 0.1,
    "parallel-append": 0.3,
}
# Stores are kept near this many records so that checking one stays cheap.
RECORDS_TARGET: Final = 1500


class KillLoopFailure(AssertionError):
    """A round whose store did not survive the kill as promised."""


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


def ids_in(path: str) -> list[int]:
    """Opens the store and returns its record ids in index order, checking every record exactly."""
    with Zrecord(path, create=False) as store:
        data, offsets = store.gather_ragged(slice(None))
    view = data.tobytes()
    bounds = offsets.tolist()
    found: list[int] = []
    for index in range(len(bounds) - 1):
        record = view[bounds[index] : bounds[index + 1]]
        if len(record) < HEADER.size:
            raise KillLoopFailure(f"record {index} is {len(record)} bytes, shorter than a header")
        record_id = HEADER.unpack_from(record)[0]
        if record != record_of(record_id):
            raise KillLoopFailure(f"record {index} (id {record_id}) is not the bytes written")
        found.append(record_id)
    if len(set(found)) != len(found):
        twice = sorted({i for i in found if found.count(i) > 1})[:10]
        raise KillLoopFailure(f"ids stored twice: {twice}")
    return found


# --- the workers (run in a forked child, never return) ------------------------------------------


class Log:
    """Lines to the parent through a pipe; each os.write of a short line is atomic."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def say(self, *words: object) -> None:
        os.write(self.fd, (" ".join(str(w) for w in words) + "\n").encode())


def _append_batch(store: Zrecord, log: Log, draw: random.Random, next_id: int, count: int) -> int:
    log.say("A", next_id, count)
    store.append([record_of(next_id + k) for k in range(count)], codec=draw.choice(["raw", "zstd"]))
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
        log.say("V", generation)
        from_numpy(path, generation_of(generation), codec=codec, dict_size=4096, overwrite=True)
        log.say("v")


# --- sharded datasets: rows that describe themselves, and their workers ---------------------

# Small shards, so that most appends and every delete of a few dozen rows cross shards.
SHARD_RECORDS: Final = 53
ROW_WIDTH: Final = 6
CODEC: Final[Codec] = "zstd"
# A fresh dataset starts with this many rows: a single store rolled over into six shards.
SEED_ROWS: Final = 300
APPEND_MAX: Final = 90  # rows per append: most of them span a rollover
DELETE_MAX: Final = 40  # rows per delete
PARALLEL_MAX: Final = 200  # rows per parallel append (two workers, shards of SHARD_RECORDS)
# The delete worker appends below this many rows and deletes above it.
DELETE_TARGET: Final = 1000
# Past either bound the dataset is made anew, so that opening and checking it stays cheap.
ROWS_MAX: Final = 2000
SHARDS_MAX: Final = 80
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


# --- one round --------------------------------------------------------------------------------


PR_SET_CHILD_SUBREAPER: Final = 36  # linux/prctl.h


def adopt_orphans() -> None:
    """Makes this process (on Linux) the parent of every process its workers forked, once the
    worker dies: a parallel append's own workers then become ours to wait for."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def kill_group(pid: int) -> int:
    """SIGKILLs the worker's process group (it and the processes it forked, as when a job is
    killed) and waits until every one of them is gone; returns the worker's wait status.

    Otherwise a parallel append's workers would outlive it and go on writing into their parts
    folder while the checks run, or make it again after recovery removed it."""
    with suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    with suppress(ChildProcessError):
        while True:  # the orphans adopt_orphans gave us
            os.waitpid(-pid, 0)
    deadline = time.monotonic() + 10.0
    while True:  # where nobody adopts them for us: wait for init to reap them
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return status
        if time.monotonic() > deadline:
            raise KillLoopFailure(f"processes of worker {pid} outlived SIGKILL for 10 s")
        time.sleep(0.001)


def run_worker(operation: str, path: str, seed: int, start: int, delay: float) -> list[list[str]]:
    """Forks a worker, kills it after `delay` seconds, and returns its log lines as words."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 3
        try:
            os.setpgid(0, 0)
            os.close(read_fd)
            WORKERS[operation](path, Log(write_fd), random.Random(seed), start)
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent, then exit
            os.write(write_fd, f"E {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
    with suppress(ProcessLookupError, PermissionError):
        os.setpgid(pid, pid)  # as the worker does: the group exists whichever runs first
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + delay
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    status = kill_group(pid)
    while chunk := os.read(read_fd, 1 << 16):
        chunks.append(chunk)
    os.close(read_fd)
    lines = [line.split() for line in b"".join(chunks).decode().splitlines()]
    errors = [" ".join(line) for line in lines if line and line[0] == "E"]
    if errors:
        raise KillLoopFailure(f"the {operation} worker failed by itself: {errors[0]}")
    if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise KillLoopFailure(f"the {operation} worker ended without the kill (status {status})")
    return lines


@dataclass
class StoreModel:
    """The acknowledged ids of a store, and the operation a kill interrupted (if any)."""

    live: set[int] = field(default_factory=set)
    next_id: int = 0

    def replay(self, lines: list[list[str]]) -> set[int] | None:
        """Applies acknowledged operations; returns the ids if the interrupted one had finished."""
        pending: set[int] | None = None
        for words in lines:
            tag = words[0]
            if tag == "A":
                first, count = int(words[1]), int(words[2])
                pending = self.live | set(range(first, first + count))
                self.next_id = max(self.next_id, first + count)
            elif tag == "D":
                pending = self.live - {int(w) for w in words[1:]}
            elif tag == "C":
                pending = set(self.live)
            elif tag in ("a", "d", "c"):
                assert pending is not None, f"acknowledgement {tag!r} without an operation"
                self.live = pending
                pending = None
        return pending

    def check(self, path: str, lines: list[list[str]]) -> None:
        interrupted = self.replay(lines)
        if not self.live and not os.path.exists(os.path.join(path, "meta.zr")):
            found: set[int] = set()  # killed before it created the store
        else:
            found = set(ids_in(path))
        if found == self.live:
            return
        if interrupted is not None and found == interrupted:
            self.live = found
            return
        lost = sorted(self.live - found)[:10]
        extra = sorted(found - self.live - (interrupted or set()))[:10]
        raise KillLoopFailure(
            f"after the kill the store holds {len(found)} records, not the {len(self.live)} "
            f"acknowledged (or the interrupted operation applied whole); lost {lost}, "
            f"unexpected {extra}"
        )


def check_conversion(path: str, acknowledged: int, lines: list[list[str]]) -> int:
    """The destination holds generation `acknowledged` or the interrupted one, complete."""
    started = [int(w[1]) for w in lines if w[0] == "V"]
    finished = len([w for w in lines if w[0] == "v"])
    if finished:
        acknowledged = started[finished - 1]
    allowed = {acknowledged}
    if len(started) > finished:
        allowed.add(started[-1])
    try:
        with DenseDataset(path) as ds:
            values = ds[:]
    except FileNotFoundError as exc:
        raise KillLoopFailure(f"the destination is gone after a kill: {exc}") from exc
    for generation in allowed:
        expected = generation_of(generation)
        if values.shape == expected.shape and (values == expected).all():
            commit.recover(path)
            parent = os.path.dirname(os.path.abspath(path))
            hidden = [n for n in os.listdir(parent) if ".loaderx-" in n]
            if hidden:
                raise KillLoopFailure(f"recovery left hidden folders: {hidden}")
            return generation
    raise KillLoopFailure(
        f"the destination holds neither generation {sorted(allowed)} complete "
        f"(shape {values.shape})"
    )


# --- sharded datasets: what a kill may leave --------------------------------------------------


@dataclass
class Pending:
    """An operation a worker announced: the ids it adds (in order) or removes (shard by shard)."""

    added: list[int] = field(default_factory=list)
    # How many of the added ids, a prefix, a kill may leave: 0 or all.
    keeps: set[int] = field(default_factory=set)
    removed: list[set[int]] = field(default_factory=list)
    spans: bool = False  # it writes or deletes in more than one shard
    tag: str = ""  # the line's: "A", "P" or "D"


def announced(words: list[str]) -> Pending:
    """The operation of an "A first count room", "P first count" or "D ids,... ids,..." line."""
    tag = words[0]
    if tag == "D":
        removed = [{int(i) for i in group.split(",")} for group in words[1:]]
        return Pending(removed=removed, spans=len(removed) > 1, tag=tag)
    first, count = int(words[1]), int(words[2])
    added = list(range(first, first + count))
    if tag == "P":  # every worker of the two writes its own shards: always several
        return Pending(added, {0, count}, spans=True, tag=tag)
    room = int(words[3])
    return Pending(added, {0, count}, spans=count > room, tag=tag)


@dataclass
class DatasetModel:
    """The acknowledged ids of a sharded dataset. While only appends change it (`ordered`), its
    ids are also in index order, since every append takes ids above all earlier ones."""

    ordered: bool
    tested: str  # the tag of the operation under test (the delete worker also appends)
    live: set[int] = field(default_factory=set)
    next_id: int = 0
    spanning: int = 0  # acknowledged operations under test that wrote or deleted in several shards

    def replay(self, lines: list[list[str]]) -> Pending | None:
        """Applies acknowledged operations; returns the one the kill interrupted, if any."""
        pending: Pending | None = None
        for words in lines:
            if words[0] in ("A", "P", "D"):
                pending = announced(words)
                if pending.added:
                    self.next_id = max(self.next_id, pending.added[-1] + 1)
            elif words[0] in ("a", "p", "d"):
                assert pending is not None, f"acknowledgement {words[0]!r} without an operation"
                self.live = (self.live | set(pending.added)).difference(*pending.removed)
                self.spanning += pending.spans and pending.tag == self.tested
                pending = None
        return pending

    def check(self, ids: list[int], lines: list[list[str]]) -> str:
        """Checks the ids found after a kill; returns whether the interrupted operation was
        found applied "whole", in "part" (as allowed), or not at all ("none")."""
        interrupted = self.replay(lines)
        if self.ordered and any(a > b for a, b in zip(ids, ids[1:])):
            raise KillLoopFailure("the rows are no longer in the order they were appended")
        found = set(ids)
        extra, lost = found - self.live, self.live - found
        if not extra and not lost:
            return "none"
        if interrupted is None:
            raise KillLoopFailure(
                f"no operation was interrupted, yet {len(lost)} acknowledged ids are lost "
                f"({sorted(lost)[:10]}) and {len(extra)} others appeared ({sorted(extra)[:10]})"
            )
        if interrupted.added:
            outcome = applied_append(interrupted, extra, lost)
        else:
            outcome = applied_delete(interrupted, extra, lost)
        self.live = found
        return outcome


def applied_append(append: Pending, extra: set[int], lost: set[int]) -> str:
    if lost:
        raise KillLoopFailure(f"an interrupted append lost acknowledged ids {sorted(lost)[:10]}")
    unknown = extra - set(append.added)
    if unknown:
        raise KillLoopFailure(f"ids that no operation added appeared: {sorted(unknown)[:10]}")
    kept = len(extra)
    if kept not in append.keeps or extra != set(append.added[:kept]):
        raise KillLoopFailure(
            f"an interrupted append of {len(append.added)} rows (ids {append.added[0]}..) left "
            f"{kept} of them ({sorted(extra)[:10]}); allowed: the first {sorted(append.keeps)}"
        )
    return "whole" if kept == len(append.added) else "part"


def applied_delete(delete: Pending, extra: set[int], lost: set[int]) -> str:
    if extra:
        raise KillLoopFailure(f"an interrupted delete added ids {sorted(extra)[:10]}")
    done = [group for group in delete.removed if group & lost]
    halves = [sorted(group - lost)[:10] for group in done if not group <= lost]
    if halves:
        raise KillLoopFailure(f"an interrupted delete kept ids {halves} of a shard it deleted in")
    strays = sorted(lost.difference(*done))
    if strays:
        raise KillLoopFailure(f"an interrupted delete lost ids it did not name: {strays[:10]}")
    if len(done) != len(delete.removed):
        # The writable open that read the dataset finishes a delete a kill cut between shards
        # (loaderx._store.delete_journal), so a part means that did not happen.
        raise KillLoopFailure(
            f"an interrupted delete over {len(delete.removed)} shards was applied to only "
            f"{len(done)} of them"
        )
    return "whole"


def read_dataset(path: str) -> tuple[list[int], int]:
    """Opens the dataset writable and returns its ids in index order and its shard count, after
    checking that verify() finds nothing and that every row is exact and its id unique."""
    with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
        report = ds.verify()
        rows = ds[:]
        shards = len(ds.shard_stats())
    if not report.ok:
        raise KillLoopFailure(f"verify() finds bad records: {report!r}")
    wrong = np.flatnonzero((rows != rows_of(rows[:, 0])).any(axis=1))
    if len(wrong):
        raise KillLoopFailure(f"rows {wrong[:10].tolist()} are not the rows written")
    ids: list[int] = rows[:, 0].tolist()
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})[:10]
        raise KillLoopFailure(f"ids stored twice: {twice}")
    return ids, shards


def leftovers(path: str) -> list[str]:
    """What killed writers leave that the next commit removes: staging folders, their markers
    and claim files, shard folders the manifest does not list, and parts folders (with theirs)
    beside the dataset."""
    manifest = read_manifest(path)
    listed = set() if manifest is None else set(manifest.names)
    inside = [
        name for name in os.listdir(path)
        if name.startswith((STAGING_PREFIX, ".claim-"))
        or (shard_number(name) is not None and name not in listed)
    ]
    hidden = (f".{os.path.basename(path)}.loaderx-parts-",
              f".{os.path.basename(path)}.loaderx-claim-")
    beside = [name for name in os.listdir(os.path.dirname(path)) if name.startswith(hidden)]
    return sorted(inside) + sorted(beside)


def has_redo_log(path: str) -> bool:
    """Whether a shard holds a delete's redo log, or the dataset a delete journal over several
    shards (the next writable open finishes that delete)."""
    folders = [path] + [
        os.path.join(path, name) for name in os.listdir(path) if shard_number(name) is not None
    ]
    return os.path.exists(os.path.join(path, JOURNAL_FILE)) or any(
        os.path.exists(os.path.join(folder, "redo.zr")) for folder in folders
    )


def recover(operation: str, path: str, model: DatasetModel) -> None:
    """The next commit, by this process. Parts folders are removed only by the next parallel
    conversion, so parallel-append recovers with one; the others append one row more than the
    tail has room for, which commits a new shard."""
    first = model.next_id
    if operation == "parallel-append":
        count = SHARD_RECORDS + 7
        parallel_append(path, first, count)
    else:
        with DenseDataset(path, shard_records=SHARD_RECORDS) as ds:
            count = max(0, SHARD_RECORDS - shard_lengths(ds)[-1]) + 1
            ds.append(rows_of(range(first, first + count)))
    model.live.update(range(first, first + count))
    model.next_id = first + count


def check_sharded(operation: str, path: str, model: DatasetModel,
                  lines: list[list[str]]) -> tuple[str, int, bool]:
    """One round's checks (see the module doc); returns the interrupted operation's outcome
    (as DatasetModel.check), the shard count, and whether the kill left folders to remove."""
    ids, shards = read_dataset(path)
    outcome = model.check(ids, lines)
    left = leftovers(path)
    recover(operation, path, model)
    survivors = leftovers(path)
    if survivors:
        raise KillLoopFailure(f"the next commit left what killed writers left: {survivors}")
    return outcome, shards, bool(left)


def seed_dataset(path: str, model: DatasetModel, count: int) -> None:
    """A fresh dataset of `count` rows: one store that rolls over, so "." is its shard 0."""
    shutil.rmtree(path, ignore_errors=True)
    first = model.next_id
    with DenseDataset(path, dtype=np.int64, item_shape=(ROW_WIDTH,), codec=CODEC,
                      shard_records=SHARD_RECORDS) as ds:
        ds.append(rows_of(range(first, first + count)))
    model.live = set(range(first, first + count))
    model.next_id = first + count


# --- the loop ---------------------------------------------------------------------------------


@dataclass
class Result:
    operation: str
    kills: int
    acknowledged: int  # operations acknowledged in all rounds
    interrupted_applied: int  # rounds whose interrupted operation turned out complete
    redo_logs: int  # rounds that left a delete's redo log for the next open
    seconds: float
    # Sharded operations only:
    partly_applied: int = 0  # rounds whose interrupted operation was found partly applied
    leftovers_removed: int = 0  # rounds whose kill left folders that the next commit removed
    # Acknowledged operations under test that crossed shards: appends past the last shard's
    # room, deletes in several shards, parallel appends (their two workers write a shard each).
    spanning: int = 0


def loop(operation: str, kills: int, seed: int, folder: str) -> Result:
    if operation in SHARDED_OPERATIONS:
        return loop_sharded(operation, kills, seed, folder)
    draw = random.Random(seed)
    path = os.path.join(folder, operation)
    started = time.monotonic()
    model = StoreModel()
    generation = 0
    acknowledged = applied = redo_logs = 0
    if operation == "convert":
        from_numpy(path, generation_of(0), codec="zstd")
    for round_index in range(kills):
        delay = draw.uniform(0.0, DELAY_MAX[operation])
        start = generation if operation == "convert" else model.next_id
        lines = run_worker(operation, path, draw.randrange(1 << 30), start, delay)
        redo_logs += os.path.exists(os.path.join(path, "redo.zr"))
        acknowledged += sum(1 for w in lines if w[0] in ("a", "d", "c", "v"))
        try:
            if operation == "convert":
                before = generation
                generation = check_conversion(path, generation, lines)
                finished = [w for w in lines if w[0] == "v"]
                applied += generation != before and not finished
            else:
                before_live = set(model.live)
                model.check(path, lines)
                applied += bool(lines) and model.live != before_live and lines[-1][0] in ("A", "D")
        except KillLoopFailure as exc:
            raise KillLoopFailure(f"{operation}, round {round_index + 1}: {exc}") from exc
        if operation == "append" and len(model.live) > 2 * RECORDS_TARGET:
            shutil.rmtree(path)  # a fresh store keeps each check cheap
            model.live.clear()
    return Result(operation, kills, acknowledged, applied, redo_logs, time.monotonic() - started)


def loop_sharded(operation: str, kills: int, seed: int, folder: str) -> Result:
    draw = random.Random(seed)
    path = os.path.join(folder, operation)
    started = time.monotonic()
    model = DatasetModel(ordered=operation != "sharded-delete", tested=TESTED_TAG[operation])
    # The delete worker starts deleting at once.
    seed_rows = DELETE_TARGET if operation == "sharded-delete" else SEED_ROWS
    seed_dataset(path, model, seed_rows)
    acknowledged = applied = partly = left = redo_logs = 0
    for round_index in range(kills):
        delay = draw.uniform(0.0, DELAY_MAX[operation])
        lines = run_worker(operation, path, draw.randrange(1 << 30), model.next_id, delay)
        acknowledged += sum(1 for w in lines if w[0] in ("a", "d", "p"))
        redo_logs += has_redo_log(path)
        try:
            outcome, shards, had_leftovers = check_sharded(operation, path, model, lines)
        except KillLoopFailure as exc:
            raise KillLoopFailure(f"{operation}, round {round_index + 1}: {exc}") from exc
        applied += outcome == "whole"
        partly += outcome == "part"
        left += had_leftovers
        if len(model.live) > ROWS_MAX or shards > SHARDS_MAX:
            seed_dataset(path, model, seed_rows)  # a fresh dataset keeps each check cheap
    # The last recovery's rows, which no later round reads.
    if set(read_dataset(path)[0]) != model.live:
        raise KillLoopFailure(f"{operation}: the last recovery append is not what it wrote")
    return Result(operation, kills, acknowledged, applied, redo_logs, time.monotonic() - started,
                  partly, left, model.spanning)


def describe(result: Result) -> str:
    """The one-line summary of an operation's rounds."""
    text = (
        f"{result.operation:15} {result.kills} kills, {result.acknowledged} acknowledged "
        f"operations"
    )
    if result.operation in SHARDED_OPERATIONS:
        text += (
            f" ({result.spanning} across shards), {result.interrupted_applied} interrupted ones "
            f"found complete and {result.partly_applied} partly applied as allowed, "
            f"{result.leftovers_removed} rounds left folders that the next commit removed"
        )
    else:
        text += f", {result.interrupted_applied} interrupted ones found complete"
    return (
        f"{text}, {result.redo_logs} delete logs found at open, all intact "
        f"({result.seconds:.1f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000, help="kills per operation")
    parser.add_argument("--ops", default=",".join(OPERATIONS), help="comma-separated operations")
    parser.add_argument("--seed", type=int, default=20261130)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    operations = [op for op in args.ops.split(",") if op]
    unknown = sorted(set(operations) - set(OPERATIONS))
    if unknown:
        parser.error(f"unknown operations {unknown}; choose from {list(OPERATIONS)}")
    results = []
    adopt_orphans()
    with tempfile.TemporaryDirectory(prefix="loaderx-kill-loop-") as folder:
        for operation in operations:
            try:
                result = loop(operation, args.kills, args.seed, folder)
            except KillLoopFailure as exc:
                print(f"FAILED: {exc}", file=sys.stderr)
                return 1
            results.append(result)
            if not args.json:
                print(describe(result), flush=True)
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
