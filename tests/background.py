"""Test work on a daemon thread whose hang fails the test instead of hanging the suite."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

JOIN_SECONDS = 60.0


class Background(Generic[T]):
    """work() running on a daemon thread; result() waits for it (JOIN_SECONDS, then the test
    fails) and gives what it returned, or the exception it raised."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._work = work
        self._outcome: list[T | BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._outcome.append(self._work())
        except BaseException as error:  # noqa: BLE001 - given to the test by result()
            self._outcome.append(error)

    def result(self) -> T | BaseException:
        self.thread.join(JOIN_SECONDS)
        assert not self.thread.is_alive(), "it waited for ever"
        return self._outcome[0]
