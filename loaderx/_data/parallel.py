"""Local parallel conversion: N processes each write their own shard(s); one commit publishes them.

`from_numpy(..., workers=N)` and `from_iterator(path, sources, workers=N)` (loaderx._data.converter)
hand their work to this module. Each worker process converts its part with the ordinary
single-process converter into a private part folder in a hidden staging folder beside the
destination (same file system, so publishing is a rename). Only when every worker has
succeeded are the parts published, in order, as the shards of the destination: a new dataset
moves into place as a whole (the converters' overwrite rules apply), an append adds them with
one atomic manifest commit. A worker that raises or dies (even by SIGKILL) stops the others;
the staging folder is removed and the destination is left exactly as it was.

Processes start with "fork" where the platform has it, so the array and the sources reach the
workers without being pickled; with start_method="spawn" or "forkserver" every source must be
picklable (pass zero-argument callables such as functools.partial objects, not generators).
"""

from __future__ import annotations

import itertools
import multiprocessing
import multiprocessing.connection
import os
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._os import claims
from loaderx.errors import SchemaError, WorkerError
from loaderx._store.schema import Schema, differences, read_schema

# A worker's report travels through a pipe before it exits; a huge message or traceback is cut
# so the send never blocks on a full pipe (64 KiB) while the parent waits for the exit.
_TRACEBACK_CHARS_MAX: Final = 6000
_END: Final = object()

# One written part: its folder and its record count.
Part = tuple[str, int]
Source = Iterable[Any] | Callable[[], Iterable[Any]]


# --- checks -----------------------------------------------------------------------------------


def check_workers(workers: object) -> int:
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)):
        raise TypeError(f"workers must be an int, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return int(workers)


def _context(start_method: str | None) -> Any:
    """The multiprocessing context (typed Any: typeshed's BaseContext lacks Process)."""
    methods = multiprocessing.get_all_start_methods()
    if start_method is None:
        start_method = "fork" if "fork" in methods else "spawn"
    if start_method not in methods:
        raise ValueError(f"start_method must be one of {methods}, got {start_method!r}")
    return multiprocessing.get_context(start_method)


# --- running workers --------------------------------------------------------------------------


def _worker_main(conn: multiprocessing.connection.Connection, job: Callable[[], Any]) -> None:
    """Runs one job in a worker process and reports its result or its error through conn."""
    try:
        result = job()
    except ShardLimitReached as exc:  # a refusal, not a failure: its message says it all
        conn.send(("refused", str(exc)[:_TRACEBACK_CHARS_MAX], ""))
        conn.close()
        os._exit(1)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, then exits non-zero
        text = traceback.format_exc()[-_TRACEBACK_CHARS_MAX:]
        cause = f"{type(exc).__name__}: {_message(exc)}"[:_TRACEBACK_CHARS_MAX]
        conn.send(("error", cause, text))
        conn.close()
        os._exit(1)
    conn.send(("ok", result, ""))
    conn.close()


def _message(exc: BaseException) -> str:
    """str(exc), or a stand-in when the exception's own __str__ raises: the report must still
    reach the parent (a raise here ended the worker with no report at all)."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - any failure of a user's __str__
        return "(its str() raised)"


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode} without reporting a result"


class _Running:
    """One live worker process and the read end of its report pipe."""

    index: int
    process: multiprocessing.process.BaseProcess
    conn: multiprocessing.connection.Connection
    received: bool
    report: Any

    def __init__(self, index: int, process: multiprocessing.process.BaseProcess,
                 conn: multiprocessing.connection.Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn
        self.received = False
        self.report = None

    def receive(self) -> None:
        """Reads the report once the pipe has one (or says it closed). Read as soon as it
        arrives, not after the worker exits: a report larger than the pipe's buffer (a part of
        many shards) blocks its sender until it is read, so the worker could never exit."""
        try:
            self.report = self.conn.recv()
        except EOFError:  # it died before reporting: the pipe only says it closed
            self.report = None
        self.received = True

    def outcome(self, count: int, describe: Callable[[int], str]) -> Any:
        """The result of a finished worker; WorkerError when it failed or died."""
        self.process.join()
        if not self.received and self.conn.poll():
            self.receive()
        report = self.report
        self.conn.close()
        what = f"worker {self.index} of {count} ({describe(self.index)})"
        if report is not None and report[0] == "ok" and self.process.exitcode == 0:
            return report[1]
        if report is not None and report[0] == "refused":
            raise ValueError(report[1])
        if report is not None and report[0] == "error":
            raise WorkerError(self.index, f"{what} failed: {report[1]}\n{report[2]}")
        raise WorkerError(self.index, f"{what} {_death(self.process.exitcode)}")

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def run_workers(jobs: Sequence[Callable[[], Any]], workers: int, start_method: str | None,
                describe: Callable[[int], str]) -> list[Any]:
    """Runs every job in its own process, at most `workers` at once; results in job order.

    The first failure (an exception or a death) kills the workers still running and raises
    WorkerError naming the job and its cause; the caller cleans up what the jobs wrote. A job
    that raises ShardLimitReached is refused the same way, as a ValueError with its message.
    """
    workers = check_workers(workers)  # 0 would start nothing and wait for ever
    ctx = _context(start_method)
    results: list[Any] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    running: dict[int, _Running] = {}
    try:
        while pending or running:
            while pending and len(running) < workers:
                index = pending.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_worker_main, args=(send, jobs[index]),
                                      name=f"loaderx-worker-{index}", daemon=True)
                process.start()
                send.close()
                running[process.sentinel] = _Running(index, process, receive)
            # Reports are read as they arrive (see _Running.receive), exits handled as they come.
            reports: dict[object, _Running] = {
                w.conn: w for w in running.values() if not w.received
            }
            waited: list[Any] = [*running, *(w.conn for w in reports.values())]
            for ready in multiprocessing.connection.wait(waited):
                if isinstance(ready, int):
                    done = running.pop(ready)
                    results[done.index] = done.outcome(len(jobs), describe)
                elif not reports[ready].received:
                    reports[ready].receive()
    finally:
        for left in running.values():
            left.stop()
    return results


# --- staging and publishing -------------------------------------------------------------------


def _parts_prefix(final: str) -> str:
    return f".{os.path.basename(final)}.loaderx-parts-"


def _claim_prefix(final: str) -> str:
    return f".{os.path.basename(final)}.loaderx-claim-"


def make_staging(final: str) -> str:
    """A private folder beside final (same file system) for the parts of one conversion,
    claimed (loaderx._os.claims) until the conversion ends: end it with claims.discard.

    The parts folders of conversions that were killed (their claim died with them) are removed
    first: nothing else ever would."""
    parent = os.path.dirname(final)
    remove_dead_staging(final)
    return claims.claim_folder(parent, _parts_prefix(final), _claim_prefix(final))


def remove_dead_staging(final: str) -> int:
    """Removes the parts folders beside final whose conversion is gone; returns how many.
    Where file locks do not exist (Windows) a live folder looks the same: none is removed."""
    return claims.remove_dead(os.path.dirname(final), _parts_prefix(final), _claim_prefix(final))


def part_folder(staging: str, job: int, piece: int) -> str:
    return os.path.join(staging, f"part-{job:06d}-{piece:06d}")


def common_schema(parts: Sequence[Part], owner: Callable[[int], str]) -> Schema:
    """The schema every part shares; SchemaError naming the first part that differs."""
    first = read_schema(parts[0][0])
    for position, (folder, _) in enumerate(parts[1:], start=1):
        lines = differences(read_schema(folder), first)
        if lines:
            raise SchemaError(
                f"{owner(position)} wrote records of another schema than {owner(0)} ("
                + "; ".join(lines).replace("store has", "it has") + "): every part of one "
                "dataset must have the same dtype and item shape"
            )
    return first


def publish(final: str, parts: Sequence[Part], schema: Schema, overwrite: bool,
            append: bool) -> None:
    """Makes the parts the shards of final, all at once.

    append=True adds them to the dataset at final (creating it if absent) in one manifest
    commit. Otherwise the complete sharded dataset is built in the converters' staging folder
    and moved into place the way every converter does (an old store is replaced only with
    overwrite=True, and a failure leaves it as it was).
    """
    from loaderx._data.converter import _commit, _stage
    from loaderx._store.shard_commit import commit_shards

    folders = [folder for folder, _ in parts]
    if append:
        if not folders and os.path.exists(os.path.join(final, "schema.msgpack")):
            return  # nothing to add: a single store stays one (a commit would seal it as '.')
        commit_shards(final, folders, schema)
        return
    staging, replace = _stage(final, overwrite)
    try:
        commit_shards(staging.path, folders, schema)
        _commit(staging, replace)
    except BaseException:
        staging.abort()
        raise


def check_append_target(final: str, schema: Schema | None) -> None:
    """Before any work: an append target must be absent or a dataset of the same schema."""
    if schema is None or not os.path.exists(os.path.join(final, "schema.msgpack")):
        return
    lines = differences(read_schema(final), schema)
    if lines:
        raise SchemaError(
            f"cannot append to {final!r}: it holds a dataset of another schema ("
            + "; ".join(lines) + ")"
        )


# --- from_numpy -------------------------------------------------------------------------------


def split_ranges(count: int, parts: int) -> list[tuple[int, int]]:
    """count records cut into `parts` contiguous ranges whose sizes differ by at most one."""
    bounds = [count * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i] < bounds[i + 1]]


def pieces(start: int, stop: int, shard_records: int) -> list[tuple[int, int]]:
    return [(a, min(stop, a + shard_records)) for a in range(start, stop, shard_records)]


def _shards_held(final: str, append: bool) -> int:
    """The shards an append target holds already (a single store is shard 0); 0 otherwise."""
    from loaderx._store.manifest import read_manifest

    if not append or not os.path.exists(os.path.join(final, "schema.msgpack")):
        return 0
    manifest = read_manifest(final)
    return 1 if manifest is None else len(manifest.shards)


def _over_the_limit(final: str, made: str, have: int) -> str:
    from loaderx._store.layout import SHARD_COUNT_MAX

    held = f" on top of the {have} that {final!r} holds" if have else ""
    return (f"{made}{held}, over a dataset's limit of {SHARD_COUNT_MAX}; pass a larger "
            "shard_records")


def check_shard_count(final: str, ranges: Sequence[tuple[int, int]], shard_records: int,
                      append: bool) -> None:
    """Before any work: the shards the workers will write (with an append target's own) must
    fit a dataset; the commit would refuse them only once every one of them was written."""
    from loaderx._store.layout import SHARD_COUNT_MAX

    new = sum(-(-(b - a) // shard_records) for a, b in ranges)
    have = _shards_held(final, append)
    if have + new > SHARD_COUNT_MAX:
        records = ranges[-1][1] - ranges[0][0] if ranges else 0
        raise ValueError(_over_the_limit(
            final, f"{records} records in shards of at most {shard_records} make {new} shards",
            have))


class ShardLimitReached(ValueError):
    """Raised in a worker that needs a shard when the conversion has none left to write."""


class ShardBudget:
    """The shards the workers of one from_iterator may still write between them, in shared
    memory. How many shards iterators make is known only as they run: each worker takes one
    before it writes a shard, so the first shard past a dataset's limit stops the conversion
    at once (the commit would refuse it only after every worker had written all of its own)."""

    def __init__(self, ctx: Any, final: str, shard_records: int, have: int) -> None:
        from loaderx._store.layout import SHARD_COUNT_MAX

        self.left = ctx.Value("q", max(0, SHARD_COUNT_MAX - have))  # passed to the workers
        self.refusal = _over_the_limit(
            final, f"the sources' records in shards of at most {shard_records} make more than "
            f"{SHARD_COUNT_MAX - have} shards", have)

    def take(self) -> None:
        with self.left.get_lock():
            if self.left.value <= 0:
                raise ShardLimitReached(self.refusal)
            self.left.value -= 1


class _NumpyJob:
    """One worker's share of from_numpy: its contiguous rows, in shards of shard_records."""

    def __init__(self, staging: str, index: int, rows: npt.NDArray[Any], shard_records: int,
                 options: dict[str, Any]) -> None:
        self.staging = staging
        self.index = index
        self.rows = rows  # a view (fork) or the pickled rows themselves (spawn, forkserver)
        # Kept apart: NumPy may unpickle an array of non-native byte order as native order
        # (same values), which would write shards of another dtype than the schema's.
        self.dtype = rows.dtype
        self.options = options
        self.shard_records = shard_records

    def __call__(self) -> list[Part]:
        from loaderx._data.converter import from_numpy

        rows = self.rows if self.rows.dtype == self.dtype else self.rows.astype(self.dtype)
        written: list[Part] = []
        for piece, (a, b) in enumerate(pieces(0, len(rows), self.shard_records)):
            folder = part_folder(self.staging, self.index, piece)
            written.append((folder, from_numpy(folder, rows[a:b], **self.options)))
        return written


def convert_numpy(path: str, data: npt.NDArray[Any], schema: Schema, workers: int,
                  options: dict[str, Any], overwrite: bool, append: bool,
                  shard_records: int, start_method: str | None) -> int:
    """from_numpy with `workers` processes, each writing contiguous rows as its own shard(s)."""
    from loaderx._data.converter import _check_destination

    final = os.path.abspath(path)
    if append:
        check_append_target(final, schema)
    else:
        _check_destination(final, overwrite)
    count = int(data.shape[0])
    ranges = split_ranges(count, workers)
    check_shard_count(final, ranges, shard_records, append)
    staging = make_staging(final)
    try:
        jobs = [_NumpyJob(staging, i, data[a:b], shard_records, options)
                for i, (a, b) in enumerate(ranges)]
        results = run_workers(jobs, workers, start_method,
                              lambda i: f"records {ranges[i][0]} to {ranges[i][1] - 1}")
        parts: list[Part] = [part for written in results for part in written]
        publish(final, parts, schema, overwrite, append)
    finally:
        claims.discard(staging)
    return count


# --- from_iterator ----------------------------------------------------------------------------


def _records_of(source: Source) -> Iterator[Any]:
    """A source is an iterable of records, or a zero-argument callable that returns one."""
    if callable(source):
        return iter(source())
    return iter(source)


class _IteratorJob:
    """One worker's share of a parallel from_iterator: one source, rolled into shards."""

    def __init__(self, staging: str, index: int, source: Source, dtype: DTypeLike | None,
                 item_shape: SupportsIndex | Sequence[SupportsIndex] | None,
                 options: dict[str, Any], shard_records: int, budget: ShardBudget) -> None:
        self.staging = staging
        self.budget = budget
        self.index = index
        self.source = source
        self.dtype = dtype
        self.item_shape = item_shape
        self.options = options
        self.shard_records = shard_records

    def __call__(self) -> list[Part]:
        from loaderx._data.converter import from_iterator

        records = _records_of(self.source)
        dtype, item_shape = self.dtype, self.item_shape
        written: list[Part] = []
        for piece in itertools.count():
            first = next(records, _END)
            if first is _END:
                return written
            self.budget.take()  # before the shard's first byte
            block = itertools.chain([first], itertools.islice(records, self.shard_records - 1))
            folder = part_folder(self.staging, self.index, piece)
            count = from_iterator(folder, block, dtype=dtype, item_shape=item_shape,
                                  **self.options)
            written.append((folder, count))
            if dtype is None:  # later pieces keep the first piece's inferred schema
                found = read_schema(folder)
                dtype, item_shape = found.dtype, found.item_shape
        raise AssertionError("unreachable")


def convert_iterables(path: str, sources: Sequence[Source], workers: int,
                      dtype: DTypeLike | None,
                      item_shape: SupportsIndex | Sequence[SupportsIndex] | None,
                      options: dict[str, Any], overwrite: bool, append: bool,
                      shard_records: int, start_method: str | None) -> int:
    """from_iterator over several sources, one process per source (at most `workers` at once).

    The records of source k come after those of source k-1 in the result, whatever order the
    workers finish in. A source that yields nothing contributes no shard.
    """
    from loaderx._data.converter import _check_destination, from_iterator

    final = os.path.abspath(path)
    if not append:
        _check_destination(final, overwrite)
    budget = ShardBudget(_context(start_method), final, shard_records,
                         _shards_held(final, append))
    staging = make_staging(final)
    try:
        jobs = [_IteratorJob(staging, i, s, dtype, item_shape, options, shard_records, budget)
                for i, s in enumerate(sources)]
        results = run_workers(jobs, workers, start_method, lambda i: f"source {i}")
        parts: list[Part] = [part for written in results for part in written]
        owners = [i for i, written in enumerate(results) for _ in written]
        if not parts:
            if append:
                return 0
            if dtype is None:
                raise ValueError("from_iterator's sources gave no records and no dtype; pass "
                                 "dtype= for an empty store")
            return from_iterator(final, [], dtype=dtype, item_shape=item_shape,
                                 overwrite=overwrite, **options)
        schema = common_schema(parts, lambda p: f"source {owners[p]}")
        if append:
            check_append_target(final, schema)
        publish(final, parts, schema, overwrite, append)
        return sum(count for _, count in parts)
    finally:
        claims.discard(staging)


__all__ = ["check_workers", "convert_iterables", "convert_numpy",
           "publish", "run_workers", "split_ranges"]
