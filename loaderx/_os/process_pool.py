"""A pool of worker processes that runs jobs, reports each one's result or failure, and stops.

Each job runs in a process of its own (at most `workers` at once) and sends its result back
through a pipe; the first job that raises or dies (even by SIGKILL) stops the others. The pool
knows nothing of what the jobs do: its callers clean up whatever a failed run left behind.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from loaderx.errors import WorkerError

# A worker's report travels through a pipe before it exits; a huge message or traceback is cut
# so the send never blocks on a full pipe (64 KiB) while the parent waits for the exit.
_TRACEBACK_CHARS_MAX: Final = 6000


class JobRefused(ValueError):
    """Raised by a job that refuses its work: the pool reports it as a ValueError with this
    message (a refusal says all there is to say), not as a failed worker."""


def check_workers(workers: object) -> int:
    """workers as an int of at least 1; TypeError or ValueError otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)):
        raise TypeError(f"workers must be an int, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    return int(workers)


def pool_context(start_method: str | None) -> Any:
    """The multiprocessing context (typed Any: typeshed's BaseContext lacks Process).
    start_method is already one of the choices or None: the converters check it, with the
    loaders' rule and message (loaderx._store.choices, a layer above this one)."""
    methods = multiprocessing.get_all_start_methods()
    method = start_method
    if method is None:
        method = "fork" if "fork" in methods else "spawn"
    if method not in methods:
        raise ValueError(f"start_method {method!r} is not available here (this platform has "
                         f"{', '.join(methods)})")
    return multiprocessing.get_context(method)


def _worker_main(conn: multiprocessing.connection.Connection, job: Callable[[], Any]) -> None:
    """Runs one job in a worker process and reports its result or its error through conn."""
    try:
        result = job()
    except JobRefused as exc:  # a refusal, not a failure: its message says it all
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
    that raises JobRefused is refused the same way, as a ValueError with its message.
    """
    workers = check_workers(workers)  # 0 would start nothing and wait for ever
    ctx = pool_context(start_method)
    results: list[Any] = [None] * len(jobs)
    pending = list(range(len(jobs)))
    running: dict[int, _Running] = {}
    try:
        while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
            if not (pending or running):
                break
            while True:
                if not (pending and len(running) < workers):
                    break
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


__all__ = ["JobRefused", "check_workers", "pool_context", "run_workers"]
