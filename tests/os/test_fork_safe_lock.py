"""ForkSafeLock: an interrupt landing as __enter__'s acquire returns keeps no lock, and locked()
tells whether any thread holds it."""

from __future__ import annotations

import threading

import pytest

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.kept_locks import held

from forked_child import held_by_another_thread
from interrupting_locks import TakenThenInterrupted


def test_an_interrupt_as_enter_takes_the_lock_keeps_nothing() -> None:
    lock = ForkSafeLock()
    inner = TakenThenInterrupted()
    lock._lock = inner
    with pytest.raises(KeyboardInterrupt):
        with lock:
            pass
    assert not held(inner)
    lock._lock = threading.RLock()
    with lock:  # usable as ever
        assert lock.locked()
    assert not lock.locked()


def test_locked_sees_a_holder_on_another_thread() -> None:
    lock = ForkSafeLock()
    with held_by_another_thread(lock):
        assert lock.locked()
    assert not lock.locked()
