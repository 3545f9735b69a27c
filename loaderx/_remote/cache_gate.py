"""The cache's gate: many readers and writers of present records, or one evictor, across every
thread and process that shares a cache folder.

A gather reads records that the fetcher marked present; eviction marks records absent and
punches their blocks out of the sparse chunk files. Those must never overlap: a gather would
copy zeros, and a fetcher writing a record into a block being punched would mark zeros present.
So gathers and fetchers' writes pass the gate shared, eviction exclusively.

Between processes the gate is an flock on `gate.lock`. Within a process, threads share one
shared flock (flock has one lock per open file description, so a second LOCK_SH from another
thread would not add a hold, and its LOCK_UN would drop the first thread's): the first reader
in takes it, the last one out releases it, and the evictor waits for no reader of its own
before taking LOCK_EX on a second descriptor. A forked child makes its own gate (its copies of
the parent's descriptors are closed by loaderx._os.lock_descriptors).

close() (the dataset's) refuses new entries and waits for the threads inside to leave before it
closes the descriptors: closed under a holder, that holder's release would unlock whatever file
the process had given the descriptor's number to since.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.kept_locks import Entered, release_kept
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor


# How long a wait for the gate goes before it looks at its state again unwoken: a Ctrl-C can
# cut a notify_all short (Condition.notify wakes its waiters one by one), and a waiter it
# skipped waited for good, taking every later entry with it.
_RECHECK_SECONDS: Final = 0.05


class _ProcessGate:
    def __init__(self, path: str) -> None:
        self._shared_fd = open_descriptor(path, os.O_RDWR | os.O_CREAT)
        self._exclusive_fd = open_descriptor(path, os.O_RDWR | os.O_CREAT)
        # Re-entrant only so that Entered can give back a level a Ctrl-C kept as it was taken
        # (loaderx._os.kept_locks); nothing here takes it twice.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._readers = 0
        self._evicting = False
        # Evictors waiting for the readers to leave: new readers wait behind them, or a loader
        # whose workers always have a gather running would never let eviction in.
        self._evictors_waiting = 0
        # Set by close(): nobody enters any more, and the descriptors close once the threads
        # inside have left (closed under a holder, its release would act on a number the
        # process may have given to another file meanwhile).
        self._closing = False

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise ValueError("the cache gate is closed (its dataset was closed)")

    def enter_shared(self) -> None:
        counted = False
        try:
            with Entered(self._lock):
                while (self._evicting or self._evictors_waiting) and not self._closing:
                    self._changed.wait(_RECHECK_SECONDS)
                self._refuse_if_closing()
                if self._readers == 0:
                    # Held with the condition's lock, so no other thread of ours can see
                    # readers > 0 before the process really holds the shared lock.
                    fcntl.flock(self._shared_fd, fcntl.LOCK_SH)
                self._readers += 1
                counted = True  # no call since the count: nothing can be raised in between
        except BaseException:
            # A Ctrl-C as the lock is given back (the with's exit) comes after the count: the
            # caller never entered, and never leaves. Counted for good, every evictor and
            # close() waited for this reader for ever. A level of the lock that exit kept
            # (kept_locks) is given back first: here this thread holds it no times by design.
            release_kept(self._lock)
            if counted:
                self.leave_shared()
            raise

    def leave_shared(self) -> None:
        with Entered(self._lock):
            self._readers -= 1
            if self._readers == 0:
                try:
                    fcntl.flock(self._shared_fd, fcntl.LOCK_UN)
                finally:
                    self._changed.notify_all()  # also after a Ctrl-C as the unlock returned

    def enter_exclusive(self) -> None:
        marked = False
        try:
            with Entered(self._lock):
                self._evictors_waiting += 1
                try:
                    while (self._evicting or self._readers) and not self._closing:
                        self._changed.wait(_RECHECK_SECONDS)
                finally:
                    self._evictors_waiting -= 1
                self._refuse_if_closing()
                self._evicting = True
                marked = True  # no call since the mark: nothing can be raised in between
            fcntl.flock(self._exclusive_fd, fcntl.LOCK_EX)
        except BaseException:
            # As in enter_shared: a Ctrl-C after the mark (the with's exit, or as the flock
            # returned) left every reader, evictor and close() waiting for this eviction.
            release_kept(self._lock)
            if marked:
                try:
                    fcntl.flock(self._exclusive_fd, fcntl.LOCK_UN)
                finally:
                    self._end_eviction()
            raise

    def leave_exclusive(self) -> None:
        try:
            fcntl.flock(self._exclusive_fd, fcntl.LOCK_UN)
        finally:
            self._end_eviction()  # also after a Ctrl-C as the unlock returned

    def _end_eviction(self) -> None:
        with Entered(self._lock):
            self._evicting = False
            self._changed.notify_all()

    def close(self) -> None:
        """Refuses new entries, waits for the threads inside to leave, closes the descriptors."""
        with Entered(self._lock):
            self._closing = True
            self._changed.notify_all()  # waiting entries give up
            while self._readers or self._evicting:
                self._changed.wait(_RECHECK_SECONDS)
        close_descriptor(self._shared_fd)
        close_descriptor(self._exclusive_fd)


class CacheGate:
    """Shared (gathers, fetch writes) or exclusive (eviction) passage; see the module doc."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._made = ForkSafeLock()
        self._pid = os.getpid()
        self._gate: _ProcessGate | None = _ProcessGate(path)
        self._closed = False

    def _current(self) -> _ProcessGate:
        gate = self._gate
        if gate is not None and self._pid == os.getpid():
            return gate
        with self._made:
            if self._closed:
                # A closed gate opens no descriptor again (the dataset released the folder).
                raise ValueError(f"the cache gate {self._path!r} is closed")
            if self._gate is None or self._pid != os.getpid():
                # The parent's descriptors are closed in the child; a new pair is ours.
                self._gate = _ProcessGate(self._path)
                self._pid = os.getpid()
            return self._gate

    @contextmanager
    def shared(self) -> Iterator[None]:
        gate = self._current()
        gate.enter_shared()
        try:
            yield
        finally:
            gate.leave_shared()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        gate = self._current()
        gate.enter_exclusive()
        try:
            yield
        finally:
            gate.leave_exclusive()

    def close(self) -> None:
        with self._made:
            gate, self._gate = self._gate, None
            self._closed = True
        if gate is not None and self._pid == os.getpid():
            gate.close()


__all__ = ["CacheGate"]
