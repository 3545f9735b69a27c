"""A Ctrl-C at any point of the cache gate's entries and exits leaves no reader counted, no
eviction marked and no waiter asleep: a later reader and evictor get in, and close() returns.
Before, a KeyboardInterrupt raised as enter_shared() gave its lock back left a reader counted
that never left (close() and every eviction waited for it for ever); one raised as
enter_exclusive() gave it back, or as leave_exclusive()'s unlock returned, left the gate marked
evicting for good; and one raised as leave_shared()'s unlock returned skipped the wake-up of an
evictor waiting for the last reader, which then waited for ever, and every reader behind it."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from background import Background
from interrupting_locks import ReleasedThenInterrupted

from loaderx._remote.cache_gate import CacheGate  # private: the gate itself is under test


def in_thread(work: Callable[[], None]) -> list[BaseException]:
    """[] when work returned on a daemon thread, [its exception] when it raised (a hang fails
    the test)."""
    outcome = Background(work).result()
    return [outcome] if isinstance(outcome, BaseException) else []


def interrupt_after_flock(monkeypatch: pytest.MonkeyPatch, operation: int) -> None:
    """The next flock with this operation does its work, then raises KeyboardInterrupt (a
    Ctrl-C as it returned)."""
    interrupt = [True]
    flock = fcntl.flock

    def flock_then_interrupt(fd: int, done: int) -> None:
        flock(fd, done)
        if done == operation and interrupt:
            interrupt.clear()
            raise KeyboardInterrupt

    monkeypatch.setattr(fcntl, "flock", flock_then_interrupt)


def noting_evictors_waiting(gate: CacheGate, monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set once a wait on the gate's condition finds an evictor waiting (then the
    evictor is inside enter_exclusive, waiting for the readers to leave)."""
    inner = gate._current()
    evictor_waits = threading.Event()
    changed = inner._changed
    wait = changed.wait

    def noted_wait(timeout: float | None = None) -> bool:
        if inner._evictors_waiting:
            evictor_waits.set()
        return wait(timeout)

    monkeypatch.setattr(changed, "wait", noted_wait)
    return evictor_waits


def interrupting_gate(path: Path) -> tuple[CacheGate, ReleasedThenInterrupted]:
    gate = CacheGate(str(path / "gate.lock"))
    inner = gate._current()
    lock = ReleasedThenInterrupted(thread=threading.get_ident())
    inner._lock = lock
    inner._changed = threading.Condition(lock)
    return gate, lock


def enter_and_pass(enter: Callable[[], object]) -> Callable[[], None]:
    def work() -> None:
        with enter():  # type: ignore[attr-defined]
            pass
    return work


@pytest.mark.parametrize("entry", ["shared", "exclusive"])
def test_an_interrupt_as_an_entry_gives_its_lock_back_leaves_nothing_held(
    tmp_path: Path, entry: str
) -> None:
    gate, lock = interrupting_gate(tmp_path)
    lock.interrupts = 1  # the release that ends the entry's locked section
    with pytest.raises(KeyboardInterrupt):
        enter_and_pass(getattr(gate, entry))()
    assert in_thread(enter_and_pass(gate.exclusive)) == []
    assert in_thread(enter_and_pass(gate.shared)) == []
    assert in_thread(gate.close) == []


def test_an_interrupt_as_an_eviction_unlocks_leaves_nothing_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = CacheGate(str(tmp_path / "gate.lock"))
    interrupt_after_flock(monkeypatch, fcntl.LOCK_UN)
    with pytest.raises(KeyboardInterrupt):
        enter_and_pass(gate.exclusive)()
    assert in_thread(enter_and_pass(gate.shared)) == []
    assert in_thread(gate.close) == []


def test_an_interrupt_as_the_last_reader_unlocks_still_wakes_the_evictor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = CacheGate(str(tmp_path / "gate.lock"))
    interrupt = [True]
    flock = fcntl.flock

    def unlock_then_interrupt(fd: int, operation: int) -> None:
        flock(fd, operation)
        if operation == fcntl.LOCK_UN and interrupt and threading.current_thread() is reader:
            interrupt.clear()
            raise KeyboardInterrupt

    monkeypatch.setattr(fcntl, "flock", unlock_then_interrupt)
    reader = threading.current_thread()
    evictor_waits = noting_evictors_waiting(gate, monkeypatch)
    evicted = threading.Event()

    def evict() -> None:
        with gate.exclusive():
            evicted.set()

    with pytest.raises(KeyboardInterrupt):
        with gate.shared():
            evictor = threading.Thread(target=evict, daemon=True)
            evictor.start()
            assert evictor_waits.wait(60)  # the evictor waits for this reader to leave
    evictor.join(60)
    assert not evictor.is_alive(), "the evictor waited for ever"
    assert evicted.is_set()
    assert in_thread(gate.close) == []


def test_a_reader_entry_an_interrupt_kept_ends_when_its_thread_enters_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader whose leave never ran (its context manager kept alive by an interrupt's
    traceback, or its exit cut short) while an evictor waits for it: the same thread's next
    entry ends it, the evictor gets in and then the reader. Before, the thread's next read
    waited behind the evictor, which waited for that reader: a Ctrl-C storm over a remote
    loader's reads hung there (the look-ahead evicting, the main thread and a worker reading).
    The kept entry's late leave then does nothing."""
    gate = CacheGate(str(tmp_path / "gate.lock"))
    evictor_waits = noting_evictors_waiting(gate, monkeypatch)
    order: list[str] = []
    kept: list[object] = []

    def evict() -> None:
        with gate.exclusive():
            order.append("evicted")

    def reader() -> None:
        entry = gate.shared()
        entry.__enter__()  # never left, as after the interrupt
        kept.append(entry)
        evictor = threading.Thread(target=evict, daemon=True)
        evictor.start()
        assert evictor_waits.wait(60)
        with gate.shared():
            order.append("read")
        evictor.join(60)

    assert in_thread(reader) == []
    assert order == ["evicted", "read"]
    kept.clear()  # the kept entry's generator closes: its leave finds the entry ended
    inner = gate._current()
    assert (inner._inside, inner._evictor) == ({}, None)
    assert in_thread(gate.close) == []


def test_an_interrupt_as_the_first_reader_takes_the_flock_leaves_no_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C as the first reader's LOCK_SH returned: nobody was inside to give the hold
    back, and this process's own evictor waited in LOCK_EX for it for ever (the readers then
    waited behind the evictor: a Ctrl-C storm over a remote loader's reads hung so)."""
    gate = CacheGate(str(tmp_path / "gate.lock"))
    interrupt_after_flock(monkeypatch, fcntl.LOCK_SH)
    with pytest.raises(KeyboardInterrupt):
        enter_and_pass(gate.shared)()
    assert in_thread(enter_and_pass(gate.exclusive)) == []
    assert in_thread(enter_and_pass(gate.shared)) == []
    assert in_thread(gate.close) == []
