"""A command run in a thread of its own, so that Ctrl-C reaches the main thread at once.

Python raises KeyboardInterrupt in the main thread only, and only between bytecodes: a command
inside one long native call (training a dictionary, verifying every record) would keep the
user waiting until it returned. The main thread therefore only waits for the command's thread.
On Ctrl-C it raises KeyboardInterrupt inside that thread too (asynchronously: Python delivers
it at the thread's next bytecode), so that a command running Python code unwinds as it always
did (a conversion removes its staging folder), and waits for it a moment. A command still
inside a native call after that is abandoned: the console script then ends the process at
once, as a kill would. Every writing command is safe against a kill (its writes are staged,
compaction moves one record at a time), so the store is as it was; a conversion's staging
folder is removed by the next conversion to that destination.
"""

from __future__ import annotations

import argparse
import ctypes
import threading
from typing import Final, TextIO

from loaderx._os.event_flag import EventFlag

# How long a command may take to unwind after Ctrl-C before it is abandoned.
UNWIND_S: Final = 0.5
# How often the waiting main thread wakes (a signal interrupts the wait in any case).
_WAIT_S: Final = 0.25


class Job:
    """args.run(args, out) on a daemon thread: its status, or the exception it raised."""

    status: int | None
    error: BaseException | None
    done: EventFlag

    def __init__(self, args: argparse.Namespace, out: TextIO) -> None:
        self.status = None
        self.error = None
        self.done = EventFlag()  # not an Event: Ctrl-C can leave an Event locked (event_flag)
        self._args = args
        self._out = out
        self._thread = threading.Thread(target=self._run, name=f"loaderx {args.command}",
                                        daemon=True)

    def _run(self) -> None:
        try:
            self.status = self._args.run(self._args, self._out)
        except BaseException as error:  # handed to the main thread, which reports it
            self.error = error
        finally:
            self.done.set()

    def interrupt(self) -> None:
        """KeyboardInterrupt raised inside the command's thread at its next bytecode."""
        ident = self._thread.ident
        if ident is not None and not self.done.is_set():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt)
            )

    def result(self) -> int:
        """Starts the command and waits for it: its status, or what it raised, raised here.
        Ctrl-C while waiting interrupts the command (interrupt), waits UNWIND_S for it to
        unwind, and raises KeyboardInterrupt here whether it did or not (see abandoned)."""
        self._thread.start()
        try:
            while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                if self.done.wait(_WAIT_S):
                    break
        except KeyboardInterrupt:
            self.interrupt()
            self.done.wait(UNWIND_S)
            if not self.finished:
                raise
            # The command had finished all the same (Ctrl-C came as it ended): its result.
        if self.error is not None:
            raise self.error
        assert self.status is not None
        return self.status

    @property
    def finished(self) -> bool:
        """Whether the command ran to its end (a status, or an error other than Ctrl-C)."""
        return self.done.is_set() and not isinstance(self.error, KeyboardInterrupt)

    @property
    def abandoned(self) -> bool:
        """Whether the command is still running (inside a native call) after Ctrl-C."""
        return not self.done.is_set()
