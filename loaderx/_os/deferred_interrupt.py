"""Holding Ctrl-C back for a section that an interrupt would leave broken.

Starting a worker process is such a section: multiprocessing's Process.start() is not proof
against a KeyboardInterrupt. Cut short in the forkserver handshake (the consumer sends its file
descriptors, then reads the child's pid), the forkserver read a half-sent message, raised
EOFError and exited, and every later start failed with BrokenPipeError; cut short after the
fork, a child ran that the consumer did not know of. Seen with SIGINT every 20 ms while loaders
with worker processes were made and closed in a loop.

`with sigint_deferred():` runs its block with a SIGINT handler that only notes the signal, and
once the block is over puts the previous handler back and, if a SIGINT came, gives it to that
handler (Python's default one raises KeyboardInterrupt there). Only in the main thread, where
Python runs signal handlers: in any other thread no handler interrupts the block anyway.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """The block with SIGINT held back, delivered to the previous handler after it."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        # None: a handler installed outside Python, which could not be put back.
        yield
        return
    caught: list[FrameType | None] = []

    def note(signum: int, frame: FrameType | None) -> None:
        caught.append(frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, caught[0])  # Python's default raises KeyboardInterrupt
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)  # the default action: the process ends


__all__ = ["sigint_deferred"]
