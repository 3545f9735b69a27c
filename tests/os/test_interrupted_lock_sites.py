"""Locks that a Ctrl-C can reach on the main thread keep no level when the interrupt lands as
their acquire returns (loaderx._os.kept_locks): the lock descriptors' registry, the remote
cache's gate, and every other lock, which is a ForkSafeLock or taken with Entered. On CPython
3.13 an acquire can raise after taking the lock; tests/interrupting_locks.py makes it happen."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from loaderx._os import lock_descriptors
from loaderx._os.event_flag import EventFlag
from loaderx._os.kept_locks import Entered, held
from loaderx._remote.cache_gate import _ProcessGate  # private: its lock is swapped

from interrupting_locks import TakenThenInterrupted

PACKAGE = Path(__file__).resolve().parents[2] / "loaderx"
JOIN_SECONDS = 10.0


def test_entered_gives_back_a_level_the_interrupt_kept() -> None:
    lock = TakenThenInterrupted(interrupts=1)
    with pytest.raises(KeyboardInterrupt):
        with Entered(lock):
            pytest.fail("the block ran after its acquire raised")
    assert not held(lock)
    with Entered(lock):
        assert held(lock)
    assert not held(lock)


def test_an_exception_in_the_block_releases_the_lock_once() -> None:
    lock = threading.RLock()
    with pytest.raises(ValueError):
        with Entered(lock):
            raise ValueError("in the block")
    assert not held(lock)


def test_the_descriptor_registry_keeps_no_level(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    lock = TakenThenInterrupted(interrupts=0)
    monkeypatch.setattr(lock_descriptors, "_registry_lock", lock)
    before = lock_descriptors.open_count()
    lock.interrupts = 1
    with pytest.raises(KeyboardInterrupt):
        lock_descriptors.open_descriptor(str(tmp_path / "a.lock"), os.O_RDWR | os.O_CREAT)
    assert not held(lock)
    assert lock_descriptors.open_count() == before  # the interrupt came before the open

    # Another thread can register and close a descriptor: no level was left held.
    opened: list[int] = []

    def open_and_close() -> None:
        fd = lock_descriptors.open_descriptor(str(tmp_path / "b.lock"), os.O_RDWR | os.O_CREAT)
        opened.append(fd)
        lock_descriptors.close_descriptor(fd)

    other = threading.Thread(target=open_and_close)
    other.start()
    other.join(JOIN_SECONDS)
    assert not other.is_alive(), "the registry's lock was left held"
    assert len(opened) == 1
    assert lock_descriptors.open_count() == before


def test_the_cache_gate_keeps_no_level(tmp_path: Path) -> None:
    gate = _ProcessGate(str(tmp_path / "gate.lock"))
    try:
        lock = TakenThenInterrupted(interrupts=0)
        gate._lock = lock
        gate._changed = threading.Condition(lock)
        for enter in (gate.enter_shared, gate.enter_exclusive):
            lock.interrupts = 1
            with pytest.raises(KeyboardInterrupt):
                enter(threading.get_ident(), object())
            assert not held(lock)

        # Neither interrupt let anyone in or left a count behind: a reader on another thread
        # and then an evictor pass.
        passed: list[str] = []

        def read_then_evict() -> None:
            me, mark = threading.get_ident(), object()
            gate.enter_shared(me, mark)
            gate.leave_shared(me, mark)
            passed.append("shared")
            gate.enter_exclusive(me, mark)
            gate.leave_exclusive(me, mark)
            passed.append("exclusive")

        other = threading.Thread(target=read_then_evict)
        other.start()
        other.join(JOIN_SECONDS)
        assert not other.is_alive(), "the gate's lock was left held"
        assert passed == ["shared", "exclusive"]
        assert (gate._inside, gate._evictor, gate._evictors_waiting) == ({}, None, 0)
    finally:
        gate.close()


def test_an_event_flag_waits_times_out_and_wakes() -> None:
    flag = EventFlag()
    assert not flag.is_set() and flag.wait(0.01) is False
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(flag.wait(JOIN_SECONDS)))
    waiter.start()
    flag.set()
    waiter.join(JOIN_SECONDS)
    assert woken == [True] and flag.is_set() and flag.wait() is True


def test_an_event_flag_keeps_no_level() -> None:
    flag = EventFlag()
    lock = TakenThenInterrupted(interrupts=1)
    flag._lock = lock
    flag._changed = threading.Condition(lock)
    with pytest.raises(KeyboardInterrupt):
        flag.set()  # what a loader's close() or the command line's job does as Ctrl-C lands
    assert not held(lock) and not flag.is_set()
    woken: list[bool] = []
    waiter = threading.Thread(target=lambda: woken.append(flag.wait(JOIN_SECONDS)))
    waiter.start()
    flag.set()
    waiter.join(JOIN_SECONDS)
    assert not waiter.is_alive(), "the flag's lock was left held"
    assert woken == [True]


def test_the_package_makes_no_plain_lock() -> None:
    """A plain threading.Lock cannot tell whether this thread holds it, so a level an interrupt
    kept could never be given back: the package makes ForkSafeLocks and RLocks only, and
    EventFlags where threading.Event would hide a plain lock."""
    plain = re.compile(
        r"threading\.(Lock|Event|Semaphore|BoundedSemaphore|Barrier)\(|allocate_lock\("
    )
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if plain.search(line)
    ]
    assert found == []
