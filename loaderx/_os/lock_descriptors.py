"""Descriptors that hold an flock, closed in a forked child so the lock stays the parent's.

An flock belongs to the open file description, and fork() gives the child a copy of every
descriptor. If a parent thread holds such a lock when another thread forks, the lock then
outlives that thread's close() for as long as the child lives: the parent's next attempt waits
for the child, and the child's own attempt waits forever (the thread that held the lock does
not exist there, so nothing in the child ever releases it). So every lock descriptor is opened
here, and the child closes its copies right after fork; closing a copy never releases the
parent's lock, which ends with the parent's own close as it should.

The registry's lock is held across fork (taken before, released after in the parent, renewed in
the child), so a descriptor is never half-registered when the child takes stock. The parent's
two handlers are the lock's own C methods, not Python functions: a Ctrl-C raises only where
Python code runs, and one raised in a Python handler between the fork and the release (CPython
drops exceptions of fork handlers) left the lock held for good, so every later FolderLock
blocked. It is an RLock so that a release without the acquire (an acquire a Ctrl-C broke off
while another thread held the lock) raises, dropped, instead of releasing that thread's hold,
and so that an acquire a Ctrl-C raised through after taking the lock can give it back
(loaderx._os.kept_locks).

Left interpreted: it runs once per lock taken.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Final

from loaderx._os import descriptors
from loaderx._os.kept_locks import Entered

_registry_lock: Final = threading.RLock()
_open_descriptors: set[int] = set()


def open_descriptor(path: str, flags: int, mode: int = 0o666) -> int:
    """os.open(path, flags, mode), registered until close_descriptor. A file it creates takes
    the umask's mode by default, as every file loaderx makes (decisions.md): a fixed 0o644
    kept the other members of a group sharing a cache or dataset (umask 002) from opening a
    lock file for writing."""
    with Entered(_registry_lock):
        # Out of descriptors, the soft limit rises towards the hard one (descriptors.py).
        fd = descriptors.os_open(path, flags, mode)
        _open_descriptors.add(fd)
    return fd


def close_descriptor(fd: int) -> None:
    """Closes a descriptor of open_descriptor (releasing its flock when it is the last copy)."""
    with Entered(_registry_lock):
        _open_descriptors.discard(fd)
        os.close(fd)


def close_when_dropped(owner: object, *fds: int) -> Callable[[], object]:
    """A call that closes fds (descriptors of open_descriptor) once: the owner's close() makes
    it, or the collection of an owner dropped unclosed does. Without it, a remote dataset
    that was dropped kept its flocks (the version's in-use lock, its published hints) for as
    long as the process lived. Not run at interpreter exit, where daemon threads may still
    hold the locks (the kernel releases them then), nor in a forked child (its copies were
    closed at the fork, and the numbers may name other files since)."""
    closer = weakref.finalize(owner, _close_owned, os.getpid(), fds)
    closer.atexit = False
    return closer


def _close_owned(pid: int, fds: tuple[int, ...]) -> None:
    if os.getpid() == pid:
        for fd in fds:
            close_descriptor(fd)


def open_count() -> int:
    """How many lock descriptors this process holds (for tests)."""
    with Entered(_registry_lock):
        return len(_open_descriptors)


def _close_copies_in_child() -> None:
    # Renew the lock first: a parent thread may have held it, and it does not exist here.
    _renew_registry_lock()
    for fd in _open_descriptors:
        try:
            os.close(fd)
        except OSError:
            pass  # already closed by other fork handling: nothing of ours to release
    _open_descriptors.clear()


# RLock._at_fork_reinit is what threading itself uses to renew its locks in a forked child
# (CPython 3.9 and later; not in typeshed).
_renew_registry_lock: Final[Callable[[], None]] = getattr(_registry_lock, "_at_fork_reinit")

if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_registry_lock.acquire,
        after_in_parent=_registry_lock.release,
        after_in_child=_close_copies_in_child,
    )
