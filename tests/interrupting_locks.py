"""A lock whose acquire takes the lock and then raises KeyboardInterrupt: what CPython 3.13 can do
when a signal lands as an acquire returns (loaderx._os.kept_locks). The suite runs on 3.11,
which never does it, so tests that need it make it happen with this lock."""

from __future__ import annotations

import threading
from typing import Any


class TakenThenInterrupted(threading._PyRLock):  # type: ignore[name-defined,misc]
    """threading's Python RLock, taken by acquire() and by `with` alike, which raises
    KeyboardInterrupt after taking the lock on the next `interrupts` acquisitions (-1: every
    one). With `thread` set, only that thread's acquisitions count."""

    def __init__(self, interrupts: int = -1, thread: int | None = None) -> None:
        super().__init__()
        self.interrupts = interrupts
        self.thread = thread

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got: bool = super().acquire(blocking, timeout)
        if got and self.interrupts != 0 and self._counts_here():
            if self.interrupts > 0:
                self.interrupts -= 1
            raise KeyboardInterrupt
        return got

    # threading's RLock binds __enter__ to its own acquire: this one must be used by `with` too.
    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _counts_here(self) -> bool:
        return self.thread is None or self.thread == threading.get_ident()


class ReleasedThenInterrupted(threading._PyRLock):  # type: ignore[name-defined,misc]
    """threading's Python RLock whose release() gives the lock back and then raises
    KeyboardInterrupt, on the next `interrupts` releases by `thread`: what a signal landing as
    a `with` block's release returns does on every CPython (the handler runs after the call)."""

    def __init__(self, interrupts: int = 0, thread: int | None = None) -> None:
        super().__init__()
        self.interrupts = interrupts
        self.thread = thread

    def release(self) -> None:
        super().release()
        if self.interrupts > 0 and (self.thread is None or self.thread == threading.get_ident()):
            self.interrupts -= 1
            raise KeyboardInterrupt

    def __exit__(self, *exc: Any) -> None:
        self.release()
