"""A lock an interrupt leaves held (loaderx._os.kept_locks) never wedges a loader.

CPython 3.13 can raise a signal handler's KeyboardInterrupt from `with lock:` after taking the
lock, so that the block's `__exit__` never runs. The suite runs on 3.11, whose interpreter does
not do that, so these tests make it happen on purpose: the loader's locks are made (while the
loader is built) as threading's own Python RLock with an `__enter__` that takes the lock and
then raises KeyboardInterrupt on the consumer's n-th acquisition, for many n. After every
interrupt the consumer must hold no level of either lock, and the batches must go on in step
order. Without the fix, the step maker's lock stayed held and the next step waited for good.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loaderx._os.kept_locks import release_kept

from forked_child import held_by_another_thread
from interrupting_locks import TakenThenInterrupted

# Fixtures are found by name in the module: imported, pytest uses them.
from loader_cases import folder

pytestmark = pytest.mark.compiled


def test_release_kept_gives_back_every_level_of_this_thread_only() -> None:
    lock = threading.RLock()
    lock.acquire()
    lock.acquire()
    release_kept(lock)
    assert lock.acquire(blocking=False)  # free now (and taken once by this thread)
    lock.release()

    with held_by_another_thread(lock):
        release_kept(lock)  # this thread holds no level: the other's stays
        results: list[bool] = []
        free = threading.Thread(target=lambda: results.append(lock.acquire(blocking=False)))
        free.start()
        free.join()
        assert results == [False]


_KEPT = """
import sys
import threading

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.sampler import Sampler

consumer = threading.get_ident()


class TakenThenInterrupted(threading._PyRLock):
    '''Takes the lock, then raises KeyboardInterrupt on the consumer's countdown-th acquisition
    of any such lock: what a signal landing there does to `with lock:` on CPython 3.13.'''

    countdown = -1

    def __enter__(self):
        taken = self.acquire()
        if threading.get_ident() == consumer and TakenThenInterrupted.countdown >= 0:
            TakenThenInterrupted.countdown -= 1
            if TakenThenInterrupted.countdown < 0:
                raise KeyboardInterrupt
        return taken


labels = DenseDataset(sys.argv[1])
made = threading.RLock
threading.RLock = TakenThenInterrupted  # while the loader makes its locks
try:
    loader = DataLoader({"label": labels}, batch_size=16, prefetch=2, workers=1, seed=5)
finally:
    threading.RLock = made
locks = {"step maker": loader._maker._lock, "prefetcher": loader._prefetcher._lock}
for name, lock in locks.items():
    assert isinstance(lock, TakenThenInterrupted), (name, type(lock))
sampler = Sampler(len(labels), 16, seed=5)
interrupts = calls = lost = batches = 0
last = -1
while interrupts < 200 or batches < 200:
    calls += 1
    TakenThenInterrupted.countdown = calls % 7
    try:
        try:
            batch = next(loader)["label"]
        finally:
            TakenThenInterrupted.countdown = -1
    except KeyboardInterrupt:
        interrupts += 1
        for name, lock in locks.items():
            assert lock._recursion_count() == 0, f"the consumer kept the {name}'s lock"
        continue
    step = last + 1
    while (batch != sampler.batch(step)).any():
        step += 1
        assert step <= last + 1 + interrupts, f"no step from {last + 1} on matches"
    lost += step - last - 1
    last = step
    batches += 1
loader.close()
labels.close()
print(interrupts >= 200, last >= 199, lost <= interrupts)
"""


def test_a_lock_taken_then_interrupted_never_wedges_the_loader(folder: Path) -> None:
    result = subprocess.run([sys.executable, "-c", _KEPT, str(folder / "label")],
                            capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "True True True\n"


def test_an_interrupt_in_the_collectors_close_keeps_no_lock() -> None:
    """The finaliser's close (Prefetcher._stop_when_collected) takes the lock with
    acquire(blocking=False) and a try after it: an interrupt landing in between kept the lock,
    and the workers, which need it to see the flag, waited for it for good."""
    from loaderx._loading.prefetch import Prefetcher
    from loaderx._os.kept_locks import held

    me = threading.get_ident()

    def interrupting() -> TakenThenInterrupted:
        return TakenThenInterrupted(interrupts=0, thread=me)  # this thread's, once armed

    made = threading.RLock
    threading.RLock = interrupting  # type: ignore[assignment]  # while the lock is made
    try:
        prefetcher = Prefetcher(lambda step: step, 0, depth=2, workers=1)
    finally:
        threading.RLock = made
    lock = prefetcher._lock
    assert isinstance(lock, TakenThenInterrupted)
    try:
        interrupted = False
        for _attempt in range(400):  # until the worker is not holding the lock just then
            lock.interrupts = 1
            try:
                prefetcher._stop_when_collected()
            except KeyboardInterrupt:
                interrupted = True
                break
            time.sleep(0.005)
        assert interrupted
        assert not held(lock)
    finally:
        release_kept(lock)  # so that a failure above does not also hang close()
        prefetcher.close()
    assert not prefetcher._threads[0].is_alive()
