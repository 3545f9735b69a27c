r"""Kill loop: SIGKILL a worker at random moments in append, delete, compact and conversion, and
in appends, deletes and parallel appends of a sharded dataset.

    python3 tests/stress/kill_loop.py --kills 1000               every operation, 1,000 kills each
    python3 tests/stress/kill_loop.py --kills 200 --ops convert  one operation (the CI size is 200)
    python3 tests/stress/kill_loop.py --kills 300 \
        --ops sharded-append,sharded-delete,parallel-append      the sharded ones

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
(loaderx._store.delete_journal). Then this process appends (a commit) and no staging, claim,
parts or unlisted shard folder of the killed worker survives it.
Exit status 0 when every round passed; otherwise the first failure is printed and it is 1.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import select
import shutil
import signal
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

# The repository root (this file is two folders down), for loaderx from the working tree, and
# tests/, for the stress package (run as a script, only this file's own folder is on the path).
TESTS: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT: Final = os.path.dirname(TESTS)
sys.path.insert(0, ROOT)
sys.path.insert(0, TESTS)

# What this file keeps: forking and killing the workers (one round), the loops and the command
# line. What a worker does is in kill_operations.py, what the survivors must show in
# kill_models.py.
from loaderx._data.converter import from_numpy  # noqa: E402
from stress.kill_models import (  # noqa: E402
    DatasetModel,
    KillLoopFailure,
    StoreModel,
    check_conversion,
    check_sharded,
    has_redo_log,
    read_dataset,
    seed_dataset,
)
from stress.kill_operations import (  # noqa: E402
    DELETE_TARGET,
    OPERATIONS,
    RECORDS_TARGET,
    SHARDED_OPERATIONS,
    TESTED_TAG,
    WORKERS,
    Log,
    generation_of,
)

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
# A fresh dataset starts with this many rows: a single store rolled over into six shards.
SEED_ROWS: Final = 300
# Past either bound the dataset is made anew, so that opening and checking it stays cheap.
ROWS_MAX: Final = 2000
SHARDS_MAX: Final = 80


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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
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
