"""Kill loop: SIGKILL a worker at random moments in append, delete, compact and conversion.

    python3 tools/kill_loop.py --kills 1000                 every operation, 1,000 kills each
    python3 tools/kill_loop.py --kills 200 --ops convert    one operation (the CI size is 200)

Each round forks a worker from this process (already holding numpy and the library, so a round
costs milliseconds, not an interpreter start), lets it run its operation in a loop for a random
few milliseconds, and SIGKILLs it. The worker writes a line to a pipe before each operation
(what it is about to do) and one after it returns (acknowledged). After each kill this process
reopens the store and checks that:
- it opens, and every record in it is exact (records describe themselves: id, size, CRC, and
  bytes that are a pure function of the id);
- its set of ids is the acknowledged one, or that one with the interrupted operation applied
  whole (an operation is all or nothing);
- for conversion with overwrite=True: the destination holds the old or the new dataset,
  complete, and recovery leaves no hidden folder behind.
Exit status 0 when every round passed; otherwise the first failure is printed and it is 1.
"""

from __future__ import annotations

import argparse
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from loaderx import commit  # noqa: E402
from loaderx.converter import from_numpy  # noqa: E402
from loaderx.dataset import DenseDataset  # noqa: E402
from loaderx.zrecord import Zrecord  # noqa: E402

OPERATIONS: Final = ("append", "delete", "compact", "convert")
HEADER: Final = struct.Struct("<QII")  # own id, payload size, crc32 of the payload
# Kill delays, in seconds, drawn uniformly from [0, DELAY_MAX): long enough for a worker to be
# deep inside several operations, short enough that a round stays cheap.
DELAY_MAX: Final = {"append": 0.03, "delete": 0.03, "compact": 0.04, "convert": 0.25}
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
        codec = draw.choice(["raw", "zstd", "zstd", "zstd_dict"])
        log.say("V", generation)
        from_numpy(path, generation_of(generation), codec=codec, dict_size=4096, overwrite=True)
        log.say("v")


WORKERS: Final[dict[str, Callable[[str, Log, random.Random, int], None]]] = {
    "append": work_append,
    "delete": work_delete,
    "compact": work_compact,
    "convert": work_convert,
}


# --- one round --------------------------------------------------------------------------------


def run_worker(operation: str, path: str, seed: int, start: int, delay: float) -> list[list[str]]:
    """Forks a worker, kills it after `delay` seconds, and returns its log lines as words."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 3
        try:
            os.close(read_fd)
            WORKERS[operation](path, Log(write_fd), random.Random(seed), start)
        except BaseException as exc:  # noqa: BLE001 -- reported to the parent, then exit
            os.write(write_fd, f"E {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
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
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
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


# --- the loop ---------------------------------------------------------------------------------


@dataclass
class Result:
    operation: str
    kills: int
    acknowledged: int  # operations acknowledged in all rounds
    interrupted_applied: int  # rounds whose interrupted operation turned out complete
    redo_logs: int  # rounds that left a delete's redo log for the next open
    seconds: float


def loop(operation: str, kills: int, seed: int, folder: str) -> Result:
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
    with tempfile.TemporaryDirectory(prefix="loaderx-kill-loop-") as folder:
        for operation in operations:
            try:
                result = loop(operation, args.kills, args.seed, folder)
            except KillLoopFailure as exc:
                print(f"FAILED: {exc}", file=sys.stderr)
                return 1
            results.append(result)
            if not args.json:
                print(
                    f"{operation:8} {result.kills} kills, {result.acknowledged} acknowledged "
                    f"operations, {result.interrupted_applied} interrupted ones found complete, "
                    f"{result.redo_logs} delete logs found at open, all intact "
                    f"({result.seconds:.1f} s)",
                    flush=True,
                )
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
