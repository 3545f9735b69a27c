"""A fetch's claims on its stores (a thread lock and an flock on `<n>.fetch.lock` each) under
Ctrl-C: a second interrupt inside drop(), or one as a claim's descriptor is opened, leaves no
descriptor open and no flock held. Real SIGINTs, raised at a chosen point or by a timer."""

from __future__ import annotations

import fcntl
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

# private: the claims themselves, and the descriptor registry that counts what they hold open
from loaderx._os.lock_descriptors import close_descriptor, open_count
from loaderx._remote import fetch_claims
from loaderx._remote.fetch_claims import StoreClaims

STORES = 4


def _never_refused() -> None:
    pass


def free(state: Path, number: int) -> bool:
    """Whether a new descriptor can take the store's flock now (no wait)."""
    fd = os.open(state / f"{number}.fetch.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_second_ctrl_c_as_a_claim_is_dropped_still_drops_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fetch's finally drops its claims; a Ctrl-C as the first descriptor is closed used to
    lose it (popped, not closed: the thread's next drop did not find it), its flock held for as
    long as the process lived, so the next fetch of that store waited for ever. Now every
    claim goes, and the interrupt is raised after."""
    claims = StoreClaims(str(tmp_path), STORES, _never_refused)
    before = open_count()
    claims.take(range(STORES))
    assert not any(free(tmp_path, n) for n in range(STORES))
    closing = close_descriptor
    interrupts = [signal.SIGINT]

    def interrupted_then_closing(fd: int) -> None:
        if interrupts:
            signal.raise_signal(interrupts.pop())  # Python's handler runs here
        closing(fd)

    monkeypatch.setattr(fetch_claims, "close_descriptor", interrupted_then_closing)
    with pytest.raises(KeyboardInterrupt):
        claims.drop(threading.get_ident())
    assert not interrupts
    monkeypatch.setattr(fetch_claims, "close_descriptor", closing)
    claims.drop(threading.get_ident())  # what the thread's next fetch does first
    assert open_count() == before
    assert all(free(tmp_path, n) for n in range(STORES))


def test_ctrl_c_at_random_moments_of_taking_and_dropping_loses_no_claim(tmp_path: Path) -> None:
    """SIGINT after 10 to 200 µs (SIGALRM's handler raises it), over and over for 3 s, while
    the main thread takes and drops claims on four stores; after each interrupt the thread
    drops what it holds, as its next fetch does. Before, a descriptor was lost within a few
    interrupts (in drop, or as take opened it), and with it, from drop, a flock."""
    claims = StoreClaims(str(tmp_path), STORES, _never_refused)
    me = threading.get_ident()
    before = open_count()
    rng = random.Random(3)
    interrupted = 0
    previous = signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))
    end = time.monotonic() + 3
    try:
        while time.monotonic() < end:
            try:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.00001, 0.0002))
                for _ in range(10_000):  # the timer fires long before
                    claims.take(range(STORES))
                    claims.drop(me)
            except KeyboardInterrupt:
                interrupted += 1
            signal.setitimer(signal.ITIMER_REAL, 0)
            claims.drop(me)
            assert open_count() == before, interrupted
            assert all(free(tmp_path, n) for n in range(STORES)), interrupted
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted > 0
