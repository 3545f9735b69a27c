"""Giving back the levels of a lock that an interrupt left held.

`with lock:` is not proof against Ctrl-C. CPython can run a signal handler, and raise its
KeyboardInterrupt, once the lock is taken but before the with block's cleanup is in force:
`__exit__` then never runs and the lock stays held by a thread that has gone on. Seen with
CPython 3.13.0 in the loader's interrupt test (tests/loading/test_dataloader_threads.py: a
consumer thread interrupted by SIGALRM 300 times): the step maker's lock stayed held and the
next step waited for it forever, in six runs of eight. The 3.11 interpreter runs the handler
only at the first instruction inside the block, where the cleanup is in force.

A re-entrant lock knows how often its owner holds it. Where a thread holds a lock no times by
design, such as an interrupt leaving a loader's next(), every level it still holds is one an
interrupt kept, and release_kept gives them back. `with Entered(lock):` is `with lock:` for a
lock the thread does not hold yet, except that an acquire which raises after taking the lock
gives it back.

The way out has a window on every version: an __exit__ written in Python runs the handler as it
starts, before it releases, and the lock stays held (on 3.11, 891 of 6,265 SIGALRMs raised in a
loop of `with` blocks over a ForkSafeLock). So Entered and ForkSafeLock hand the `with` the
lock's own compiled __exit__ (ExitThroughLock), which releases before any handler runs.

That __exit__ is a descriptor, not a method: the interpreter's `with` asks the instance for it
(the lock's bound C method). Code compiled by mypyc asks the class instead and calls what it
gets with the manager as first argument; a property answered that with itself ("'property'
object is not callable", so every compiled `with` over a ForkSafeLock raised), the descriptor
with a function that releases the manager's lock (a Python function: there the window stays).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol, cast, overload


# A lock's __exit__: (exception type, exception, traceback) -> None.
LockExit = Callable[[type[BaseException] | None, BaseException | None, TracebackType | None], None]


class _HoldsLock(Protocol):
    @property
    def _lock(self) -> threading.RLock: ...


def _exit_through_lock(manager: _HoldsLock, *exception: object) -> None:
    """__exit__ as a function of the manager (what mypyc-compiled code calls)."""
    manager._lock.release()


class ExitThroughLock:
    """The __exit__ of a context manager whose `_lock` it holds: the lock's own C __exit__ for
    an instance (the interpreter's `with`), _exit_through_lock for the class (a compiled one);
    module doc."""

    @overload
    def __get__(self, instance: None, owner: type) -> Callable[..., None]: ...

    @overload
    def __get__(self, instance: _HoldsLock, owner: type) -> LockExit: ...

    def __get__(self, instance: _HoldsLock | None, owner: type) -> Callable[..., None]:
        if instance is None:
            return _exit_through_lock
        return instance._lock.__exit__


def held(lock: threading.RLock) -> bool:
    """Whether the calling thread holds `lock` (any number of times)."""
    return _recursion_count(lock) > 0


def _recursion_count(lock: threading.RLock) -> int:
    # A private method, but one every RLock of 3.11+ has (the C lock and threading's Python
    # one); typeshed does not list it. It counts the calling thread's levels only.
    return cast(Callable[[], int], getattr(lock, "_recursion_count"))()


def release_kept(lock: threading.RLock) -> None:
    """Releases every level of `lock` the calling thread holds. Call it only where the thread
    holds the lock no times by design: what it holds there, an interrupt kept."""
    for _ in range(_recursion_count(lock)):
        lock.release()


def acquire(lock: threading.RLock) -> None:
    """lock.acquire() for a thread that holds no level of `lock`: if the acquire raises after
    taking the lock (an interrupt), the level is given back before the exception goes on."""
    try:
        lock.acquire()
    except BaseException:
        release_kept(lock)
        raise


class Entered:
    """`with Entered(lock):` holds `lock` for the block, taken with acquire() above. For slow
    paths: it makes an object per use, where `with lock:` makes none."""

    __slots__ = ("_lock",)

    def __init__(self, lock: threading.RLock) -> None:
        self._lock = lock

    def __enter__(self) -> None:
        acquire(self._lock)

    # The lock's own __exit__ (compiled: no Ctrl-C lands before it releases), looked up by the
    # `with` before it enters (module doc).
    __exit__ = ExitThroughLock()
