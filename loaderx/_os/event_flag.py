"""A flag threads wait on: threading.Event's set, is_set and wait, on a lock that a Ctrl-C never
leaves held.

threading.Event guards its flag with a plain lock. On CPython 3.13 an acquire can raise the
KeyboardInterrupt of a signal after taking the lock (loaderx._os.kept_locks); inside Event.set
or Event.wait that lock then stays held, and the next set or wait, on any thread, waits for it
forever: a loader's close() that waits for its look-ahead thread, the command line's wait for
its job. This flag's lock is re-entrant and taken with Entered, which gives such a level back.

Left interpreted: it runs when threads start, stop and poll, never per record.
"""

from __future__ import annotations

import threading

from loaderx._os.kept_locks import Entered


class EventFlag:
    """set(), is_set() and wait(timeout) as threading.Event has them (no clear: nothing here
    lowers a flag once raised)."""

    __slots__ = ("_lock", "_changed", "_raised")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._raised = False

    def is_set(self) -> bool:
        return self._raised

    def set(self) -> None:
        with Entered(self._lock):
            self._raised = True
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits until the flag is set or timeout seconds pass; whether it is set."""
        with Entered(self._lock):
            if not self._raised:
                self._changed.wait(timeout)
            return self._raised


__all__ = ["EventFlag"]
