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
