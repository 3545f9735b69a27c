"""worker_type="process" under signal handlers other than Ctrl-C's default one: a handler that
closes the loader on the consumer's own thread, and one that raises while workers start or stop.
Real signals throughout (signal.raise_signal at a chosen point, setitimer, kill). Helpers and
fixtures (the datasets, the leak check after every test) are test_process_workers'."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_process_workers import augment, children, no_leaks, shm_files, sleeps, streams

from loaderx._loading import process_workers  # private: a signal raised at a chosen point inside
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

__all__ = ["no_leaks", "streams"]  # fixtures: every test here checks for leaks after it


class Raised(Exception):
    """What the raising handlers raise: an ordinary exception, as a timeout handler's would be."""


@pytest.fixture
def on_sigusr1() -> Iterator[Callable[[Callable[[], None]], None]]:
    """Sets what a SIGUSR1 does (a Python handler) for the test; the old handler comes back."""
    previous = signal.getsignal(signal.SIGUSR1)

    def install(action: Callable[[], None]) -> None:
        signal.signal(signal.SIGUSR1, lambda *_: action())

    yield install
    signal.signal(signal.SIGUSR1, previous)


def _signal_once(target: Any, method: str) -> None:
    """The first call of target.method (patched on the instance) raises SIGUSR1, a real signal
    whose Python handler runs there, before the method itself runs."""
    original = getattr(target, method)
    fired: list[bool] = []

    def signalled(*args: Any) -> Any:
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)
        return original(*args)

    setattr(target, method, signalled)


def _outcome(loader: DataLoader, kept: list[Any] | None) -> str:
    """Reads until the loader ends: 'StopIteration', or the other exception's name; 'never
    ended' after 30 s (a bound, not a check of its length: the close comes within 20 ms)."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            batch = next(loader)
        except StopIteration:
            return "StopIteration"
        except Exception as error:
            return f"{type(error).__name__}: {error}"
        if kept is not None:
            kept.append(batch)  # kept: every step needs a new slot file
    return "never ended"


@pytest.mark.parametrize("where", ["pipe write", "slot file creation"])
def test_a_handler_that_closes_the_loader_as_a_step_is_sent(
        streams: dict[str, DenseDataset], on_sigusr1: Callable[[Callable[[], None]], None],
        where: str) -> None:
    """A handler that calls close() on the consumer's own thread while next() sends a step:
    the ring's lock is re-entrant, so the close went through under the send, which then raised
    TypeError ('NoneType' object cannot be interpreted as an integer: the pipe was closed) or
    IndexError (the slot maps were gone), and a slot file made after the close's unlink stayed
    in /dev/shm for good. Now next() ends with StopIteration and nothing is left. (A SIGALRM
    closing at random moments hit it in 20 of 300 loaders.)"""
    loader = DataLoader(streams, batch_size=10, transform=augment, worker_type="process",
                        workers=2, start_method="fork")
    kept = [next(loader), next(loader)]
    on_sigusr1(loader.close)
    ring = loader._prefetcher._workers  # type: ignore[attr-defined]
    if where == "pipe write":  # past Connection.send's check that the pipe is open
        for pipe in ring.pipes:
            _signal_once(pipe, "_send")
    else:
        _signal_once(ring.files, "create")
    assert _outcome(loader, kept) == "StopIteration"
    assert loader.closed
    assert shm_files() == [] and children() == []


def test_a_handler_that_closes_the_loader_while_next_waits(
        streams: dict[str, DenseDataset]) -> None:
    """The same while next() waits for a worker (busy for 30 s): StopIteration, at once. This
    worked before; a guard for the wait itself."""
    loader = DataLoader(streams, batch_size=10, transform=sleeps, worker_type="process",
                        workers=2, start_method="forkserver")
    next(loader)
    previous = signal.signal(signal.SIGALRM, lambda *_: loader.close())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        started = time.monotonic()
        with pytest.raises(StopIteration):
            next(loader)
        # A hang would be the 30 s sleep; close() itself waits 0.3 s for the workers.
        assert time.monotonic() - started < 15
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert loader.closed


def test_a_handler_that_closes_the_loader_at_random_moments(
        streams: dict[str, DenseDataset]) -> None:
    """SIGALRM after 0.5 to 20 ms, its handler closing the loader, for loaders read as fast as
    they go, for 4 s: every one ends in StopIteration and leaves nothing."""
    rng = random.Random(5)
    outcomes: dict[str, int] = {}
    previous = signal.getsignal(signal.SIGALRM)
    end = time.monotonic() + 4
    try:
        while time.monotonic() < end:
            loader = DataLoader(streams, batch_size=10, transform=augment,
                                worker_type="process", workers=2, start_method="fork",
                                reuse_buffers=rng.random() < 0.5)
            next(loader)
            signal.signal(signal.SIGALRM, lambda *_, closing=loader: closing.close())
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.02))
            outcome = _outcome(loader, None)
            signal.setitimer(signal.ITIMER_REAL, 0)
            loader.close()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            assert shm_files() == [], outcomes
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert list(outcomes) == ["StopIteration"], outcomes


class _SignalOnAdd:
    """process_workers._ALL_WORKERS, whose first add() (a worker just started, not yet booked)
    raises SIGUSR1."""

    def __init__(self, workers: Any) -> None:
        self._workers = workers
        self.fired = False

    def add(self, process: Any) -> None:
        if not self.fired:
            self.fired = True
            signal.raise_signal(signal.SIGUSR1)
        self._workers.add(process)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._workers, name)


def _raise() -> None:
    raise Raised("from the SIGUSR1 handler")


def test_a_raising_handler_while_a_worker_starts_leaves_no_worker(
        streams: dict[str, DenseDataset], on_sigusr1: Callable[[Callable[[], None]], None],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler (not SIGINT's) that raises just after a worker process started: the start
    deferred SIGINT only, so the exception left that worker unbooked, and close() did not stop
    it (it ran on until its pipe was collected). Now every signal with a Python handler waits
    until the worker is booked, and close() stops it."""
    loader = DataLoader(streams, batch_size=10, transform=augment, worker_type="process",
                        workers=2, start_method="fork")
    next(loader)
    on_sigusr1(_raise)
    adding = _SignalOnAdd(process_workers._ALL_WORKERS)
    monkeypatch.setattr(process_workers, "_ALL_WORKERS", adding)
    steps = loader._prefetcher
    steps._unsure = True  # type: ignore[attr-defined]  # as after a Ctrl-C: new workers start
    with pytest.raises(Raised) as raised:
        next(loader)
    assert adding.fired
    loader.close()
    # Checked while `raised` still holds the frames (and so the pipe) of the interrupted start.
    assert children() == [], raised
    assert shm_files() == []


_RAISING_STORM = """
import gc, os, signal, sys, threading, time
import multiprocessing.forkserver, multiprocessing.resource_tracker
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

class Raised(Exception):
    pass

def children():
    return [pid for task in os.listdir(f"/proc/{os.getpid()}/task")
            for pid in open(f"/proc/{os.getpid()}/task/{task}/children").read().split()]

def raise_it(signum, frame):
    raise Raised

if __name__ == "__main__":
    streams = {"label": DenseDataset(sys.argv[1])}
    signal.signal(signal.SIGUSR1, raise_it)
    storming, done = threading.Event(), threading.Event()

    def storm():  # real signals: SIGUSR1 to this process every 10 ms
        storming.wait()
        while not done.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.01)

    thread = threading.Thread(target=storm)
    thread.start()
    raised, end = 0, time.monotonic() + float(sys.argv[2])
    storming.set()
    while True:
        loader = None
        try:
            if time.monotonic() > end:
                break
            loader = DataLoader(streams, batch_size=10, worker_type="process", workers=2,
                                start_method="forkserver")
            next(loader)
            next(loader)
        except Exception:  # Raised, or what a read or a pickling that it cut short raised
            raised += 1
        finally:
            while loader is not None:
                try:
                    loader.close()
                    loader = None
                except Raised:
                    pass
    while True:
        try:
            done.set()
            thread.join()
            break
        except Raised:
            pass
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    gc.collect()
    helpers = {multiprocessing.forkserver._forkserver._forkserver_pid,
               multiprocessing.resource_tracker._resource_tracker._pid}  # they stay (children())
    deadline = time.monotonic() + 30  # a bound on the wait for exits, not a check of its length
    while True:
        left = [pid for pid in children() if int(pid) not in helpers]
        if not left or time.monotonic() > deadline:
            break
        multiprocessing.active_children()  # reaps
        time.sleep(0.05)
    files = [name for name in os.listdir("/dev/shm") if name.startswith(f"loaderx-{os.getpid()}-")]
    for name in files:
        os.unlink("/dev/shm/" + name)  # reported below; no test leaves them behind
    print(raised > 0, left, files)
"""


def test_a_storm_of_a_raising_handler_while_workers_start_and_stop_leaves_nothing(
        streams: dict[str, DenseDataset]) -> None:
    """SIGUSR1 every 10 ms, real signals, its handler raising an exception, while loaders with
    forkserver workers are made, read and closed for 6 s. Workers started and stopped with
    only SIGINT deferred: in 8 s that left 50 worker processes and 37 /dev/shm files, and the
    forkserver died (EOFError in it). Now nothing is left and the forkserver lives."""
    result = subprocess.run([sys.executable, "-c", _RAISING_STORM, streams["label"].path, "6"],
                            capture_output=True, text=True, timeout=240,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BrokenPipeError" not in result.stderr and "EOFError" not in result.stderr, \
        result.stderr[-3000:]
    assert result.stdout == "True [] []\n", result.stderr[-3000:]
