"""Running test code in a forked child: under an alarm (a hang fails it), importing nothing (a
parent thread may have held an import lock at the fork), with its traceback on stderr."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy.testing  # noqa: F401  numpy loads it lazily: import it here, never in a child

CHILD_ALARM_SECONDS = 20


def run_child(body: Callable[[], None]) -> int:
    """Forks; the child runs body under an alarm and exits 0 on success. Returns the pid.

    The child must import nothing: a parent thread may have held a module's import lock at the
    moment of fork, and that lock stays held forever in the child (a lazy `np.testing` hung a
    child this way). So everything a child uses is imported at the top of this file, and a child
    that imported anything fails even when the race did not strike.
    """
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        # Where a hung child was, on stderr, as its alarm kills it. Not dump_traceback_later:
        # that first cancels the watchdog the parent's pytest armed (faulthandler_timeout),
        # waiting for a watchdog thread the fork did not copy, so the child hung right there.
        faulthandler.register(signal.SIGALRM, chain=True)
        signal.alarm(CHILD_ALARM_SECONDS)
        modules_at_fork = set(sys.modules)
        body()
        imported = sorted(set(sys.modules) - modules_at_fork)
        assert not imported, f"the child imported {imported}: import them before forking"
        code = 0
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)


def wait_child(pid: int) -> None:
    """Waits for a child (a hung one has been killed by its alarm) and checks it succeeded."""
    deadline = time.monotonic() + 2 * CHILD_ALARM_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:  # only if the alarm itself failed
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"child {pid} hung")
        time.sleep(0.01)
    if os.WIFSIGNALED(status):
        raise AssertionError(f"child {pid} died of signal {os.WTERMSIG(status)} (SIGALRM = a hang)")
    assert os.WEXITSTATUS(status) == 0, f"child {pid} failed; its traceback is on stderr"


@contextmanager
def held_by_another_thread(lock: AbstractContextManager[object]) -> Iterator[None]:
    """Holds `lock` on a thread of its own for the length of the block, so that a fork inside
    it copies the lock held by a thread the child does not have."""
    holding = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with lock:
            holding.set()
            done.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait()
    try:
        yield
    finally:
        done.set()
        holder.join()
