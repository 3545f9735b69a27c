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
from loaderx._os.lock_descriptors import close_descriptor, close_when_dropped, open_descriptor


# How long a wait for the gate goes before it looks at its state again unwoken: a Ctrl-C can
# cut a notify_all short (Condition.notify wakes its waiters one by one), and a waiter it
# skipped waited for good, taking every later entry with it.
_RECHECK_SECONDS: Final = 0.05


class _ProcessGate:
    def __init__(self, path: str) -> None:
        self._shared_fd = open_descriptor(path, os.O_RDWR | os.O_CREAT)
        try:
            self._exclusive_fd = open_descriptor(path, os.O_RDWR | os.O_CREAT)
        except BaseException:
            close_descriptor(self._shared_fd)
            raise
        self._release = close_when_dropped(self, self._shared_fd, self._exclusive_fd)
        # Re-entrant only so that Entered can give back a level a Ctrl-C kept as it was taken
        # (loaderx._os.kept_locks); nothing here takes it twice.
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        # The readers inside: thread ident -> the mark of its entry (nothing enters twice on
        # one thread: a reading leaves before it fetches). And the evictor: (ident, mark).
        # By entry, so that a thread that comes back finds what an interrupt left of its last
        # entry (_forget_kept), and a late leave of that entry finds it gone and does nothing.
        self._inside: dict[int, object] = {}
        self._evictor: tuple[int, object] | None = None
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

    def _forget_kept(self, me: int) -> None:
        """Ends an entry of thread `me` that is still here as `me` enters again or closes
        (holding the lock): it nests none, so that entry is one a Ctrl-C kept, whose leave never
        ran (its with block's exit was cut short, or its context manager is waiting in a
        traceback for the collector). Kept, every evictor and close() waited for it for ever."""
        mark = self._inside.get(me)
        if mark is not None:
            self._leave_shared(me, mark)
        evictor = self._evictor
        if evictor is not None and evictor[0] == me:
            self._leave_exclusive(me, evictor[1])

    def enter_shared(self, me: int, mark: object) -> None:
        counted = False
        try:
            with Entered(self._lock):
                self._forget_kept(me)
                while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                    if not (self._evictor or self._evictors_waiting) or self._closing:
                        break
                    self._changed.wait(_RECHECK_SECONDS)
                self._refuse_if_closing()
                if not self._inside:
                    # Held with the condition's lock, so no other thread of ours can see
                    # a reader inside before the process really holds the shared lock.
                    try:
                        fcntl.flock(self._shared_fd, fcntl.LOCK_SH)
                    except BaseException:
                        # A Ctrl-C as it returned: taken, with no reader inside to give it
                        # back, and our own evictor's LOCK_EX waited for it for ever.
                        self._unlock_shared()
                        raise
                self._inside[me] = mark
                counted = True  # no call since the entry: nothing can be raised in between
        except BaseException:
            # A Ctrl-C as the lock is given back (the with's exit) comes after the entry: the
            # caller never entered, and never leaves. A level of the lock that exit kept
            # (kept_locks) is given back first: here this thread holds it no times by design.
            release_kept(self._lock)
            if counted:
                self.leave_shared(me, mark)
            raise

    def _unlock_shared(self) -> None:
        """Drops the process's shared flock (holding the lock, no reader inside)."""
        try:
            fcntl.flock(self._shared_fd, fcntl.LOCK_UN)
        except OSError:
            pass  # not held after all: nothing to give back

    def leave_shared(self, me: int, mark: object) -> None:
        with Entered(self._lock):
            self._leave_shared(me, mark)

    def _leave_shared(self, me: int, mark: object) -> None:
        if self._inside.get(me) is not mark:
            return  # ended already (_forget_kept)
        del self._inside[me]
        if not self._inside:
            try:
                fcntl.flock(self._shared_fd, fcntl.LOCK_UN)
            finally:
                self._changed.notify_all()  # also after a Ctrl-C as the unlock returned

    def enter_exclusive(self, me: int, mark: object) -> None:
        marked = False
        try:
            with Entered(self._lock):
                self._forget_kept(me)
                self._evictors_waiting += 1
                try:
                    while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                        if not (self._evictor or self._inside) or self._closing:
                            break
                        self._changed.wait(_RECHECK_SECONDS)
                finally:
                    self._evictors_waiting -= 1
                self._refuse_if_closing()
                self._evictor = (me, mark)
                marked = True  # no call since the mark: nothing can be raised in between
                # No reader of ours is inside: a shared hold left (enter_shared) is an
                # interrupt's, and the LOCK_EX below would wait for it for ever.
                self._unlock_shared()
            fcntl.flock(self._exclusive_fd, fcntl.LOCK_EX)
        except BaseException:
            # As in enter_shared: a Ctrl-C after the mark (the with's exit, or as the flock
            # returned) left every reader, evictor and close() waiting for this eviction.
            release_kept(self._lock)
            if marked:
                self.leave_exclusive(me, mark)
            raise

    def leave_exclusive(self, me: int, mark: object) -> None:
        with Entered(self._lock):
            self._leave_exclusive(me, mark)

    def _leave_exclusive(self, me: int, mark: object) -> None:
        evictor = self._evictor
        if evictor is None or evictor[0] != me or evictor[1] is not mark:
            return  # ended already (_forget_kept)
        try:
            fcntl.flock(self._exclusive_fd, fcntl.LOCK_UN)
        finally:
            self._evictor = None  # also after a Ctrl-C as the unlock returned
            self._changed.notify_all()

    def close(self) -> None:
        """Refuses new entries, waits for the threads inside to leave, closes the descriptors."""
        with Entered(self._lock):
            self._closing = True
            self._changed.notify_all()  # waiting entries give up
            self._forget_kept(threading.get_ident())
            while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                if not (self._inside or self._evictor):
                    break
                self._changed.wait(_RECHECK_SECONDS)
        self._release()


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
        me, mark = threading.get_ident(), object()
        gate.enter_shared(me, mark)
        try:
            yield
        finally:
            gate.leave_shared(me, mark)  # on a collector's thread, for one kept in a traceback

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        gate = self._current()
        me, mark = threading.get_ident(), object()
        gate.enter_exclusive(me, mark)
        try:
            yield
        finally:
            gate.leave_exclusive(me, mark)

    def close(self) -> None:
        with self._made:
            gate, self._gate = self._gate, None
            self._closed = True
        if gate is not None and self._pid == os.getpid():
            gate.close()


__all__ = ["CacheGate"]
