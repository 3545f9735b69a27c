"""ForkSafeLock: an interrupt landing as __enter__'s acquire returns, or as the with block ends,
keeps no lock, and locked() tells whether any thread holds it."""

from __future__ import annotations

import inspect
import sys
import threading
from types import FrameType
from typing import Any

import pytest

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.kept_locks import Entered, held

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


def _interrupt_as_exit_starts(frame: FrameType, event: str, arg: object) -> None:
    """A trace function that raises KeyboardInterrupt where an __exit__ written in Python starts
    (one taking the exception's arguments, not a property's getter): where a signal's handler
    runs on every CPython (the function's first instruction)."""
    code = frame.f_code
    if event == "call" and code.co_name == "__exit__" and (
            code.co_argcount > 1 or code.co_flags & inspect.CO_VARARGS):
        raise KeyboardInterrupt


@pytest.mark.parametrize("kind", ["ForkSafeLock", "Entered"])
def test_an_interrupt_as_the_with_block_ends_keeps_nothing(kind: str) -> None:
    """A Ctrl-C as a `with` block over the lock ends: the lock is given back. With an __exit__
    written in Python the interrupt landed before its release, and the lock stayed held: a
    Ctrl-C storm over a remote loader's reads kept its state maps' lock, and the next fetch's
    request thread waited for it for ever."""
    lock = ForkSafeLock()
    inner = threading.RLock()
    held_in: list[bool] = []
    sys.settrace(_interrupt_as_exit_starts)
    try:
        if kind == "ForkSafeLock":
            with lock:
                held_in.append(held(lock._lock))
        else:
            with Entered(inner):
                held_in.append(held(inner))
    except KeyboardInterrupt:
        pass  # the old __exit__: the interrupt came before the release
    finally:
        sys.settrace(None)
    assert held_in == [True]
    assert not held(lock._lock) and not held(inner)


@pytest.mark.parametrize("kind", ["ForkSafeLock", "Entered"])
def test_a_with_block_as_mypyc_compiles_it_releases(kind: str) -> None:
    """mypyc-compiled code runs `with m:` as type(m).__enter__(m) ... type(m).__exit__(m, ...):
    it looks __exit__ up on the class. A property there was not callable, so every compiled
    `with` over a ForkSafeLock (DatasetBase's rollover lock) raised TypeError."""
    inner = threading.RLock()
    manager: Any = ForkSafeLock() if kind == "ForkSafeLock" else Entered(inner)
    lock = manager._lock if kind == "ForkSafeLock" else inner
    kind_of = type(manager)
    kind_of.__enter__(manager)
    assert held(lock)
    kind_of.__exit__(manager, None, None, None)
    assert not held(lock)
    kind_of.__enter__(manager)
    kind_of.__exit__(manager, KeyError, KeyError("x"), None)  # an exception leaving the block
    assert not held(lock)
