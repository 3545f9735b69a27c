"""A thread lock that a forked child gets back unlocked.

A child of os.fork() inherits every lock in the state it had at that instant, but not the
threads: a lock another thread held then stays held in the child for good, and the child's
first use of it blocks forever. ForkSafeLock registers each instance (weakly), and a fork
handler gives each a fresh lock in the child. Only for locks that guard state the child may
rebuild on its own (a handle's in-process bookkeeping); the files they protect have their own
cross-process locks.

An interrupt (Ctrl-C) that lands as acquire() returns inside __enter__ would leave the lock
held with no `with` block to release it, and the next user would wait forever. So the lock
inside is re-entrant, which lets __enter__ give back a level an interrupt kept
(loaderx._os.kept_locks); a ForkSafeLock is still meant to be taken once at a time.

This module stays interpreted: compiled (mypyc) classes take no weak references.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Final

from loaderx._os.kept_locks import ExitThroughLock, acquire, held, release_kept


class ForkSafeLock:
    """A lock's with-statement and locked(), given back unlocked to a forked child."""

    __slots__ = ("_lock", "__weakref__")

    def __init__(self) -> None:
        self._lock: threading.RLock = threading.RLock()
        _ALL.add(self)

    def __enter__(self) -> ForkSafeLock:
        acquire(self._lock)  # taken once at a time: any level held there, an interrupt kept
        return self

    # The lock's own (compiled) __exit__, which a `with` looks up before it enters: a Python
    # __exit__ lets a Ctrl-C in as that function starts, before it releases, and the lock then
    # stayed held (kept_locks). Seen once in seven interrupts of a `with` loop, and as a Ctrl-C
    # storm over a remote loader's reads left its state maps' lock held and the next fetch
    # waited for ever. A descriptor, so that mypyc-compiled code gets a callable too.
    __exit__ = ExitThroughLock()

    def locked(self) -> bool:
        """Whether any thread holds the lock now (RLock has locked() only from 3.14)."""
        lock = self._lock
        if held(lock):
            return True
        try:
            if not lock.acquire(blocking=False):
                return True
            lock.release()
        except BaseException:
            release_kept(lock)
            raise
        return False

    def _renew(self) -> None:
        self._lock = threading.RLock()


_ALL: Final[weakref.WeakSet[ForkSafeLock]] = weakref.WeakSet()


def _renew_in_child() -> None:
    for lock in list(_ALL):
        lock._renew()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_in_child)

__all__ = ["ForkSafeLock"]
