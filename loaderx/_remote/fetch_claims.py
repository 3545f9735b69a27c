"""The download claims of one Fetcher: per store, a thread lock and an flock on
`<n>.fetch.lock`, so that no two threads or processes download the same records.

A claim is held across a whole fetch (the requests and the writes). Taken in a generator
context manager, a Ctrl-C landing as the fetch's ExitStack took it (the generator was left
suspended, the claim inside, with nothing to give it back but the collector) kept the claim for
good: the lock level stayed with the interrupted thread, and its flock descriptor open, so every
other fetch of that store and the dataset's close() waited for ever (seen under a storm of
interrupts over a remote loader's reads). So the claims a thread holds are recorded here, each
as soon as it is taken, and given back by drop(): at the end of the fetch, and, for a drop that
an interrupt cut short, when the same thread fetches again or closes the dataset (a fetch nests
none, so whatever a thread still holds then is what an interrupt kept).

drop() and the opening of a claim's descriptor run with signals held back (loaderx._os
.deferred_interrupt): a second Ctrl-C in drop(), between popping a claim and closing its
descriptor (or inside close_descriptor, before its os.close), lost that descriptor with the
flock on it, and the next fetch of that store, by any thread or process, waited for ever on
the flock; one as open_descriptor returned lost a descriptor the same way. The wait for the
flock itself stays interruptible.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterable

from loaderx._os.deferred_interrupt import signals_deferred
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor


class StoreClaims:
    """The claims of the stores of one replica (module doc)."""

    def __init__(self, state: str, count: int, refuse: Callable[[], None]) -> None:
        self._state = state
        self._locks = [ForkSafeLock() for _ in range(count)]
        self._refuse = refuse  # raises once the fetcher is closing: no claim starts then
        # Thread ident -> the claims it holds, (store, flock descriptor or -1), in order taken.
        self._held: dict[int, list[tuple[int, int]]] = {}
        self._pid = os.getpid()

    def _mine(self) -> dict[int, list[tuple[int, int]]]:
        if self._pid != os.getpid():  # a forked child: the parent's threads' claims are not its
            self._held, self._pid = {}, os.getpid()
        return self._held

    def take(self, numbers: Iterable[int]) -> None:
        """Claims each store of numbers, in that order (one order for every process: no
        deadlock). The caller gives them back with drop() in a finally."""
        me = threading.get_ident()
        self.drop(me)  # what an interrupt kept of this thread's last fetch
        held = self._mine().setdefault(me, [])
        for number in numbers:
            self._locks[number].__enter__()  # an interrupt as it returns keeps no level
            held.append((number, -1))  # recorded before anything can raise
            self._refuse()
            with signals_deferred():  # the descriptor recorded as soon as it exists
                fd = open_descriptor(os.path.join(self._state, f"{number}.fetch.lock"),
                                     os.O_RDWR | os.O_CREAT)
                held[-1] = (number, fd)
            fcntl.flock(fd, fcntl.LOCK_EX)  # interruptible: the claim is recorded

    def drop(self, me: int) -> None:
        """Gives back every claim thread `me` holds (closing a descriptor drops its flock)."""
        if not self._mine().get(me):
            self._mine().pop(me, None)
            return
        with signals_deferred():  # a second Ctrl-C here lost a held flock (module doc)
            held = self._mine()[me]
            while True:  # not `while held:` inside a with (CPython 3.13, docs/concurrency.md)
                if not held:
                    break
                number, fd = held.pop()  # an error closing one leaves the rest recorded
                try:
                    if fd >= 0:
                        close_descriptor(fd)
                finally:
                    self._locks[number].__exit__(None, None, None)
            self._mine().pop(me, None)

    def wait_idle(self) -> None:
        """Waits for the fetches holding claims (close(): their flock descriptors). The
        calling thread's own, kept by an interrupt, are given back first."""
        self.drop(threading.get_ident())
        for lock in self._locks:
            with lock:
                pass


__all__ = ["StoreClaims"]
