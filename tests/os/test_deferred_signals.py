"""signals_deferred: every signal with a Python handler waits for the end of the block, then
runs its own handler; the handlers are back after it, also when one raises. Real signals."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from loaderx._os.deferred_interrupt import signals_deferred  # private: the helper itself


class Raised(Exception):
    pass


@pytest.fixture
def handlers() -> Iterator[None]:
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGUSR1, signal.SIGUSR2)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


def test_signals_run_their_handlers_after_the_block(handlers: None) -> None:
    seen: list[str] = []

    def first(signum: int, frame: object) -> None:
        seen.append("usr1")

    def second(signum: int, frame: object) -> None:
        seen.append("usr2")

    signal.signal(signal.SIGUSR1, first)
    signal.signal(signal.SIGUSR2, second)
    with signals_deferred():
        signal.raise_signal(signal.SIGUSR2)
        signal.raise_signal(signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR2)  # pending twice: delivered once, as by the kernel
        seen.append("block")
    assert seen == ["block", "usr2", "usr1"]
    assert signal.getsignal(signal.SIGUSR1) is first and signal.getsignal(signal.SIGUSR2) is second


def test_a_raising_handler_raises_after_the_block_and_the_rest_still_come(handlers: None) -> None:
    seen: list[str] = []

    def raises(signum: int, frame: object) -> None:
        raise Raised

    def notes(signum: int, frame: object) -> None:
        seen.append("usr2")

    signal.signal(signal.SIGUSR1, raises)
    signal.signal(signal.SIGUSR2, notes)
    with pytest.raises(Raised):
        with signals_deferred():
            signal.raise_signal(signal.SIGUSR1)
            signal.raise_signal(signal.SIGUSR2)
            seen.append("block")
    signal.raise_signal(signal.SIGUSR2)  # handlers back: this one runs at once
    assert seen[0] == "block" and seen.count("usr2") == 2
    assert signal.getsignal(signal.SIGUSR1) is raises


def test_ctrl_c_raises_keyboard_interrupt_after_the_block() -> None:
    done: list[bool] = []
    with pytest.raises(KeyboardInterrupt):
        with signals_deferred():
            signal.raise_signal(signal.SIGINT)
            done.append(True)
    assert done == [True] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_signals_left_to_the_system_are_not_touched(handlers: None) -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    with signals_deferred():
        signal.raise_signal(signal.SIGUSR1)  # ignored, now as before
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN


def test_a_handler_that_raises_as_the_deferral_begins_raises_after_the_block(
        handlers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A signal whose handler is not yet replaced when it comes (it raises on the way in):
    the block still runs, and the exception goes up after it. Raised on the way in, it skipped
    the block, a ring's release, which nothing ran again (a SIGINT storm left 4 slot files)."""
    from loaderx._os import deferred_interrupt  # private: a signal at a chosen point inside

    def raises(signum: int, frame: object) -> None:
        raise Raised

    signal.signal(signal.SIGUSR1, raises)
    deferrable = deferred_interrupt._deferrable
    interrupts = [signal.SIGUSR1]

    def signalled_first(signum: int) -> object:
        if interrupts and signum == signal.SIGUSR1:
            signal.raise_signal(interrupts.pop())  # its own handler, not yet replaced
        return deferrable(signum)

    monkeypatch.setattr(deferred_interrupt, "_deferrable", signalled_first)
    ran: list[bool] = []
    with pytest.raises(Raised):
        with signals_deferred():
            ran.append(True)
    assert ran == [True] and not interrupts
    assert signal.getsignal(signal.SIGUSR1) is raises


def test_call_deferred_runs_its_action_when_the_deferral_was_cut_short_on_the_way_in(
        handlers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from loaderx._os import deferred_interrupt  # private: a signal at a chosen point inside

    def raises(signum: int, frame: object) -> None:
        raise Raised

    signal.signal(signal.SIGUSR1, raises)
    deferring = deferred_interrupt.signals_deferred
    interrupts = [signal.SIGUSR1]

    @contextmanager
    def interrupted_on_the_way_in() -> Iterator[None]:
        if interrupts:
            signal.raise_signal(interrupts.pop())  # before anything is held back
        with deferring():
            yield

    monkeypatch.setattr(deferred_interrupt, "signals_deferred", interrupted_on_the_way_in)
    ran: list[bool] = []
    with pytest.raises(Raised):
        deferred_interrupt.call_deferred(lambda: ran.append(True))
    assert ran == [True] and not interrupts
