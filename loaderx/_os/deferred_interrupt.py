"""Holding signals back for a section that a signal handler would leave broken.

Starting a worker process is such a section: multiprocessing's Process.start() is not proof
against an exception. Cut short in the forkserver handshake (the consumer sends its file
descriptors, then reads the child's pid), the forkserver read a half-sent message, raised
EOFError and exited, and every later start failed with BrokenPipeError; cut short after the
fork, a child ran that the consumer did not know of. Seen with SIGINT every 20 ms while loaders
with worker processes were made and closed in a loop; and the same with any other signal whose
Python handler raises (a SIGUSR1 handler raising every 10 ms left 50 worker processes and 37
/dev/shm slot files behind in 8 s, and killed the forkserver), or that closes the loader
whose workers are starting.

`with signals_deferred():` runs its block with every signal that has a Python handler (Ctrl-C's
default one included, and SIGINT with no handler at all) handled by one that only notes the
signal; once the block is over it puts the previous handlers back and raises each noted signal
again (signal.raise_signal), so its own handler runs there, as if it had come then: Python's
default SIGINT handler raises KeyboardInterrupt, SIGINT's default action ends the process.
Signals whose action is the system's (SIG_DFL, SIG_IGN) are left alone: no Python code runs for
them. Only in the main thread, where Python runs signal handlers: in any other thread no handler
interrupts the block anyway.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Final

# Every signal a handler can be set for (SIGKILL and SIGSTOP cannot have one).
_SIGNALS: Final = sorted(set(signal.valid_signals()) - {
    getattr(signal, "SIGKILL", -1), getattr(signal, "SIGSTOP", -1)})


def _deferrable(signum: int) -> Any:
    """The handler to put back after the block, or None when signum is left alone."""
    try:
        handler = signal.getsignal(signum)
    except (OSError, ValueError):
        return None
    if callable(handler) or (signum == signal.SIGINT and handler == signal.SIG_DFL):
        return handler
    return None  # SIG_IGN, SIG_DFL, or a handler installed outside Python (None)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """The block with every Python-handled signal held back, each raised again after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        if signum not in caught:  # a signal pending twice is delivered once, as by the kernel
            caught.append(signum)

    replaced: dict[int, Callable[[int, FrameType | None], Any] | int] = {}
    early: BaseException | None = None
    try:
        early = _replace(replaced, note)
        yield
    finally:
        try:
            _put_back(replaced)
        finally:
            _deliver(caught)
    if early is not None:
        raise early


def _replace(replaced: dict[int, Any], note: Callable[[int, FrameType | None], None]
             ) -> BaseException | None:
    """Puts `note` in place of every deferrable handler, recording the previous ones; returns
    what a handler not yet replaced raised meanwhile (a signal just before its turn), which
    goes up after the block like one that came during it. Raised here, it skipped the block:
    the release of a ring's processes and files, which then nothing ran again."""
    raised: BaseException | None = None
    for signum in _SIGNALS:
        while True:
            try:
                if signum not in replaced:
                    previous = _deferrable(signum)
                    if previous is None:
                        break
                    replaced[signum] = previous  # first: put back whatever happens next
                signal.signal(signum, note)
                break
            except BaseException as error:  # its handler ran and raised: noted, then again
                raised = raised or error
    return raised


def _put_back(replaced: dict[int, Any]) -> None:
    """The previous handlers, every one of them also when a handler put back first raises (a
    signal that came meanwhile): its exception is raised once all are back."""
    raised: BaseException | None = None
    for signum, previous in replaced.items():
        while True:
            try:
                signal.signal(signum, previous)
                break
            except BaseException as error:  # its handler, just put back, ran and raised
                raised = raised or error
    if raised is not None:
        raise raised


def _deliver(caught: list[int]) -> None:
    """Raises each noted signal again, its own handler running in raise_signal. When one
    raises, the rest are sent to this process (the kernel delivers them at once: their
    handlers run wherever Python next checks), and that exception goes up."""
    for index, signum in enumerate(caught):
        try:
            signal.raise_signal(signum)
        except BaseException:
            for later in caught[index + 1:]:
                os.kill(os.getpid(), later)
            raise


def call_deferred(action: Callable[[], None]) -> None:
    """action() inside signals_deferred, for a release that nothing runs again: also when a
    handler raised as the deferral began, before action could start (Python runs handlers at
    the calls on the way in); then action runs on a second try and that exception goes up
    after it."""
    early: BaseException | None = None
    for _ in range(3):  # a third signal on the way in is as unlikely as it gets
        begun = False
        try:
            with signals_deferred():
                begun = True
                action()
        except BaseException as error:
            if begun:
                raise
            early = early or error
            continue
        break
    if early is not None:
        raise early


def default_handlers() -> None:
    """In a forked child (a worker process started with fork, maybe inside signals_deferred):
    the system's action for every signal that has a Python handler, as a spawned child has,
    instead of the parent's handlers or the block's noting one, which would swallow them."""
    for signum in _SIGNALS:
        if _deferrable(signum) is not None:
            signal.signal(signum, signal.SIG_DFL)


__all__ = ["call_deferred", "default_handlers", "signals_deferred"]
