"""Tests for loaderx._loading.prefetch: order, bounds, error delivery, close and thread hygiene."""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from loaderx._loading.prefetch import Prefetcher, default_workers

from forked_child import run_child, wait_child

pytestmark = pytest.mark.compiled


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loaderx-prefetch")]


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    yield
    assert prefetch_threads() == []


def jittery_square(step: int) -> int:
    # Random short sleeps make workers finish out of order.
    time.sleep(random.random() * 0.0005)
    return step * step


@pytest.mark.parametrize("helps", [False, True])
@pytest.mark.parametrize("depth,workers", [(1, 1), (1, 4), (2, 2), (4, 4), (8, 3), (3, 8)])
def test_results_arrive_in_step_order(depth: int, workers: int, helps: bool) -> None:
    with Prefetcher(jittery_square, 5, depth, workers, consumer_helps=helps) as prefetcher:
        got = [next(prefetcher) for _ in range(200)]
        assert prefetcher.next_step == 205
    assert got == [s * s for s in range(5, 205)]


def test_thread_count_is_min_of_workers_and_depth() -> None:
    with Prefetcher(jittery_square, 0, 2, 6):
        assert len(prefetch_threads()) == 2
    with Prefetcher(jittery_square, 0, 8, 3):
        assert len(prefetch_threads()) == 3


class Recorder:
    """produce() that records which steps started, so tests can check the depth bound."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: list[int] = []

    def __call__(self, step: int) -> int:
        with self.lock:
            self.started.append(step)
        return step

    def max_started(self) -> int:
        with self.lock:
            return max(self.started, default=-1)


def settle(recorder: Recorder, expected: int) -> None:
    deadline = time.monotonic() + 5.0
    while recorder.max_started() < expected and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.02)  # give any over-eager worker the chance to break the bound


@pytest.mark.parametrize("helps", [False, True])
@pytest.mark.parametrize("depth,workers", [(1, 1), (3, 2), (4, 4), (6, 2)])
def test_at_most_depth_steps_ahead_of_the_consumer(depth: int, workers: int, helps: bool) -> None:
    recorder = Recorder()
    with Prefetcher(recorder, 10, depth, workers, consumer_helps=helps) as prefetcher:
        settle(recorder, 10 + depth - 1)
        assert recorder.max_started() == 10 + depth - 1
        for taken in range(1, 6):
            assert next(prefetcher) == 10 + taken - 1
            settle(recorder, 10 + taken + depth - 1)
            assert recorder.max_started() == 10 + taken + depth - 1
    assert sorted(recorder.started) == list(range(10, recorder.max_started() + 1))


def fail_at_7(step: int) -> int:
    if step == 7:
        raise KeyError(f"bad record at step {step}")
    return step


@pytest.mark.parametrize("helps", [False, True])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_error_surfaces_at_its_step_with_traceback(workers: int, helps: bool) -> None:
    with Prefetcher(fail_at_7, 0, 4, workers, consumer_helps=helps) as prefetcher:
        assert [next(prefetcher) for _ in range(7)] == list(range(7))
        with pytest.raises(KeyError, match="bad record at step 7") as info:
            next(prefetcher)
        frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert "fail_at_7" in frames
        # The failed step counts as taken; the following steps still arrive in order.
        assert prefetcher.next_step == 8
        assert [next(prefetcher) for _ in range(3)] == [8, 9, 10]


def test_close_wakes_a_consumer_blocked_in_another_thread() -> None:
    release = threading.Event()

    def slow(step: int) -> int:
        if step >= 2:
            release.wait(10.0)
        return step

    prefetcher = Prefetcher(slow, 0, 2, 2)
    outcome: list[object] = []
    waiting = threading.Event()

    def consume() -> None:
        try:
            for value in prefetcher:
                outcome.append(value)
                if value == 1:
                    waiting.set()
        except BaseException as error:  # pragma: no cover - reported by the assert below
            outcome.append(error)

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert waiting.wait(5.0)
    time.sleep(0.05)  # the consumer is now blocked waiting for step 2
    closer = threading.Thread(target=prefetcher.close)
    closer.start()
    time.sleep(0.02)
    release.set()  # the workers are inside produce(2) and produce(3); let them finish
    closer.join(5.0)
    consumer.join(5.0)
    assert not closer.is_alive() and not consumer.is_alive()
    assert outcome == [0, 1]  # iteration simply ended: StopIteration after close
    assert prefetcher.closed
    with pytest.raises(StopIteration):
        next(prefetcher)


def test_close_while_workers_wait_for_room_and_consumer_stopped() -> None:
    prefetcher = Prefetcher(jittery_square, 0, 4, 4)
    assert next(prefetcher) == 0
    time.sleep(0.02)  # workers fill the window, then block waiting for room
    started = time.monotonic()
    prefetcher.close()
    assert time.monotonic() - started < 5.0
    assert prefetch_threads() == []


def test_close_is_idempotent_and_safe_from_many_threads() -> None:
    prefetcher = Prefetcher(jittery_square, 0, 3, 3)
    closers = [threading.Thread(target=prefetcher.close) for _ in range(4)]
    for closer in closers:
        closer.start()
    prefetcher.close()
    for closer in closers:
        closer.join(5.0)
    prefetcher.close()
    assert prefetch_threads() == []


def test_close_from_inside_produce_does_not_deadlock() -> None:
    holder: list[Prefetcher[int]] = []
    closed_from_worker = threading.Event()

    def produce(step: int) -> int:
        if step == 3:
            holder[0].close()
            closed_from_worker.set()
        return step

    prefetcher = Prefetcher(produce, 0, 1, 1)
    holder.append(prefetcher)
    got = list(prefetcher)  # ends with StopIteration once the worker closed it
    assert closed_from_worker.wait(5.0)
    assert got == [0, 1, 2]
    prefetcher.close()  # joins the worker that closed it


@pytest.mark.parametrize("helps", [False, True])
def test_many_consumers_share_one_ordered_stream(helps: bool) -> None:
    with Prefetcher(jittery_square, 0, 4, 4, consumer_helps=helps) as prefetcher:
        lock = threading.Lock()
        taken: list[int] = []

        def consume() -> None:
            for _ in range(100):
                value = next(prefetcher)
                with lock:
                    taken.append(value)

        consumers = [threading.Thread(target=consume) for _ in range(3)]
        for consumer in consumers:
            consumer.start()
        for consumer in consumers:
            consumer.join(10.0)
    assert sorted(taken) == [s * s for s in range(300)]


@pytest.mark.parametrize(
    "start_step,depth,workers,message",
    [
        (-1, 1, 1, "start_step"),
        (0, 0, 1, "depth"),
        (0, 1, 0, "workers"),
        (0, 10**6, 1, "depth"),
    ],
)
def test_bad_arguments_are_refused(start_step: int, depth: int, workers: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Prefetcher(jittery_square, start_step, depth, workers)


def test_non_int_arguments_are_refused() -> None:
    # The compiled module refuses a float at the call boundary with its own message.
    with pytest.raises(TypeError):
        Prefetcher(jittery_square, 0, 2.0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Prefetcher(jittery_square, "0", 2, 1)  # type: ignore[arg-type]



class GatedWorker:
    """produce(step) that records which thread made each step; step 0, when a worker makes it,
    waits for `gate`, so a consumer arriving meanwhile finds its step in progress."""

    def __init__(self, interrupt_at: int = -1) -> None:
        self.gate = threading.Event()
        self.lock = threading.Lock()
        self.made_by: dict[int, list[str]] = {}
        self.interrupt_at = interrupt_at

    def __call__(self, step: int) -> int:
        name = threading.current_thread().name
        with self.lock:
            self.made_by.setdefault(step, []).append(name)
        if step == 0 and name.startswith("loaderx-prefetch"):
            assert self.gate.wait(10.0)
        if step == self.interrupt_at and name == "MainThread":
            self.interrupt_at = -1  # once, as a Ctrl-C
            raise KeyboardInterrupt(f"interrupted in step {step}")
        return step * 10

    def started(self, step: int) -> bool:
        with self.lock:
            return step in self.made_by

    def wait_started(self, step: int) -> None:
        deadline = time.monotonic() + 5.0
        while not self.started(step):
            assert time.monotonic() < deadline, f"step {step} never started"
            time.sleep(0.001)


def test_a_waiting_consumer_makes_the_steps_no_worker_started() -> None:
    produce = GatedWorker()
    with Prefetcher(produce, 0, 4, 1, consumer_helps=True) as prefetcher:
        produce.wait_started(0)  # the one worker is inside step 0 until the gate opens
        threading.Timer(0.2, produce.gate.set).start()
        assert next(prefetcher) == 0
        # While step 0 was in progress, the consumer made the rest of the window itself.
        assert {step: produce.made_by[step] for step in (1, 2, 3)} == {
            1: ["MainThread"], 2: ["MainThread"], 3: ["MainThread"]
        }
        assert [next(prefetcher) for _ in range(8)] == [step * 10 for step in range(1, 9)]
    assert produce.made_by[0] == ["loaderx-prefetch-0"]
    # Every step was made exactly once, whoever made it.
    assert all(len(makers) == 1 for makers in produce.made_by.values())


class ConsumerHeldInStep:
    """produce(step) that records which thread made each step; the worker's step 0 waits for
    `worker_gate` and the consumer's step 1 for `consumer_gate`, so that the test can look at
    the workers while the consumer is inside a step of its own."""

    def __init__(self) -> None:
        self.worker_gate = threading.Event()
        self.consumer_gate = threading.Event()
        self.consumer_inside = threading.Event()
        self.lock = threading.Lock()
        self.made_by: dict[int, str] = {}

    def __call__(self, step: int) -> int:
        name = threading.current_thread().name
        with self.lock:
            self.made_by[step] = name
        if step == 0 and name.startswith("loaderx-prefetch"):
            assert self.worker_gate.wait(10.0)
        if step == 1 and name == "MainThread":
            self.consumer_inside.set()
            assert self.consumer_gate.wait(10.0)
        return step * 10

    def made(self) -> dict[int, str]:
        with self.lock:
            return dict(self.made_by)


def test_workers_stand_aside_while_the_consumer_makes_a_step_and_resume_once_it_is_away() -> None:
    """While the consumer makes a step itself, no worker starts another (a consumer that keeps
    coming back before its step is ready makes them one after the other, into warm buffers);
    once it has taken its step and stays away, the workers fill the window again on their own
    (within STAND_ASIDE_MAX_SECONDS), so a training loop keeps its prefetch."""
    produce = ConsumerHeldInStep()
    with Prefetcher(produce, 0, 4, 1, consumer_helps=True) as prefetcher:
        deadline = time.monotonic() + 5.0
        while 0 not in produce.made():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        # The main thread arrives while the worker is in step 0 and makes step 1 itself; the
        # worker finishes step 0 meanwhile and must not start step 2.
        def release() -> None:
            assert produce.consumer_inside.wait(10.0)
            produce.worker_gate.set()
            time.sleep(0.3)
            if 2 not in produce.made():
                produce.consumer_gate.set()

        releaser = threading.Thread(target=release)
        releaser.start()
        assert next(prefetcher) == 0
        releaser.join(10.0)
        assert produce.consumer_gate.is_set(), "a worker started step 2 while the consumer was making step 1"
        assert produce.made() == {0: "loaderx-prefetch-0", 1: "MainThread"}
        # The consumer is away now (training): the worker makes steps 2 to 4 (the window of 4
        # past the step the consumer takes next) without being asked.
        deadline = time.monotonic() + 5.0
        while len(produce.made()) < 5:
            assert time.monotonic() < deadline, f"the workers stayed aside: {produce.made()}"
            time.sleep(0.005)
        assert produce.made() == {
            0: "loaderx-prefetch-0", 1: "MainThread", 2: "loaderx-prefetch-0",
            3: "loaderx-prefetch-0", 4: "loaderx-prefetch-0",
        }
        assert [next(prefetcher) for _ in range(6)] == [10, 20, 30, 40, 50, 60]


def test_a_consumer_that_does_not_help_only_waits() -> None:
    produce = GatedWorker()
    with Prefetcher(produce, 0, 4, 1) as prefetcher:
        produce.wait_started(0)
        threading.Timer(0.2, produce.gate.set).start()
        assert [next(prefetcher) for _ in range(6)] == [step * 10 for step in range(6)]
    assert all(makers == ["loaderx-prefetch-0"] for makers in produce.made_by.values())


def test_an_interrupt_in_a_step_the_consumer_makes_goes_up_and_the_step_is_made_again() -> None:
    """Ctrl-C while the consumer makes a step itself: the KeyboardInterrupt goes up from next()
    at once, and iterating on (as after a caught Ctrl-C in a notebook) returns every step in
    order, the interrupted one made again by the consumer, never left claimed and unfiled."""
    produce = GatedWorker(interrupt_at=2)
    with Prefetcher(produce, 0, 4, 1, consumer_helps=True) as prefetcher:
        produce.wait_started(0)
        with pytest.raises(KeyboardInterrupt, match="interrupted in step 2"):
            next(prefetcher)  # makes step 1, then step 2 raises on this thread
        assert not produce.gate.is_set() and prefetcher.next_step == 0
        produce.gate.set()
        assert [next(prefetcher) for _ in range(6)] == [0, 10, 20, 30, 40, 50]
    assert produce.made_by[2] == ["MainThread", "MainThread"]  # interrupted, then made again
    assert all(len(makers) == 1 for step, makers in produce.made_by.items() if step != 2)


def test_a_forked_child_refuses_next_and_closes_without_the_parents_lock() -> None:
    prefetcher = Prefetcher(jittery_square, 3, 2, 1)
    assert next(prefetcher) == 9
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with prefetcher._lock:  # noqa: SLF001 - held across the fork on purpose
            holding.set()
            release.wait(10.0)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert holding.wait(5.0)

    def child() -> None:
        # The lock is held forever here: nothing below may wait for it.
        assert prefetcher.forked and prefetcher.next_step == 4
        try:
            next(prefetcher)
        except RuntimeError as error:
            assert "another process" in str(error) and "at step 4" in str(error), error
        else:
            raise AssertionError("next() in a forked child returned")
        prefetcher.close()
        assert prefetcher.closed

    try:
        pid = run_child(child)
    finally:
        release.set()
        holder.join(5.0)
    wait_child(pid)
    assert not prefetcher.forked and next(prefetcher) == 16
    prefetcher.close()


@pytest.mark.parametrize(
    "cpus,helping,alone", [(None, 1, 1), (1, 1, 1), (2, 1, 2), (3, 2, 3), (5, 4, 4), (64, 4, 4)]
)
def test_default_workers_leave_a_cpu_to_a_consumer_that_helps(
    monkeypatch: pytest.MonkeyPatch, cpus: int | None, helping: int, alone: int
) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)
    assert default_workers(consumer_helps=True) == helping
    assert default_workers(consumer_helps=False) == alone


def test_closing_from_a_worker_leaves_nothing_for_exit_to_hold() -> None:
    """close() run on a worker thread (from inside produce, or by a finaliser the collector ran
    there) cannot join that worker, but must still drop the exit hook: the hook would keep the
    Prefetcher, and everything produce references (a loader's batch buffers), until exit."""
    import gc
    import weakref

    class Payload:
        pass

    payload = Payload()
    gone = weakref.ref(payload)
    holder: dict[str, Prefetcher[int]] = {}
    closed_on = []

    def produce(step: int, held: Payload = payload) -> int:
        if step == 3:
            closed_on.append(threading.current_thread().name)
            holder["prefetcher"].close()
        return step

    holder["prefetcher"] = Prefetcher(produce, 0, 2, 1)
    # Taking step 1 lets the worker claim step 3, inside which it closes the Prefetcher.
    assert [next(holder["prefetcher"]) for _ in range(2)] == [0, 1]
    deadline = time.monotonic() + 5
    while not holder["prefetcher"].closed and time.monotonic() < deadline:
        time.sleep(0.001)
    assert closed_on == ["loaderx-prefetch-0"] and holder["prefetcher"].closed
    del holder, produce, payload
    deadline = time.monotonic() + 5
    while gone() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert gone() is None


def test_a_step_another_consumer_gave_up_is_made_by_the_one_waiting() -> None:
    """The main thread is interrupted while it makes a step itself; a second thread that
    consumes the same Prefetcher next makes that step instead of waiting for it for ever, and
    every step comes out once, in order."""
    produce = GatedWorker(interrupt_at=2)
    with Prefetcher(produce, 0, 4, 1, consumer_helps=True) as prefetcher:
        produce.wait_started(0)
        with pytest.raises(KeyboardInterrupt, match="interrupted in step 2"):
            next(prefetcher)  # makes step 1, then step 2 raises on this thread
        produce.gate.set()
        got: list[int] = []
        other = threading.Thread(target=lambda: got.extend(next(prefetcher) for _ in range(6)))
        other.start()
        other.join(10)
        assert not other.is_alive()
        assert got == [0, 10, 20, 30, 40, 50]
    assert produce.made_by[2][0] == "MainThread" and len(produce.made_by[2]) == 2
    assert produce.made_by[2][1] != "MainThread"  # made again by the thread that waited


class TakeOverHeld(GatedWorker):
    """GatedWorker interrupting the main thread in step 1, whose second making (by the thread
    that takes it over) waits for `again_gate` once it has set `again_inside`."""

    def __init__(self) -> None:
        super().__init__(interrupt_at=1)
        self.again_gate = threading.Event()
        self.again_inside = threading.Event()

    def __call__(self, step: int) -> int:
        value = super().__call__(step)
        if step == 1:
            self.again_inside.set()
            assert self.again_gate.wait(10.0)
        return value


def test_a_consumer_taking_its_own_step_wakes_one_waiting_for_the_next() -> None:
    """A consumer that makes its next step takes it under the lock that files it. A second
    consumer thread waiting meanwhile for the step after, which a worker has already made,
    must be woken then: nothing else would (no step of the window is left to file)."""
    produce = TakeOverHeld()
    with Prefetcher(produce, 0, 3, 1, consumer_helps=True) as prefetcher:
        produce.wait_started(0)  # the worker is inside step 0
        with pytest.raises(KeyboardInterrupt, match="interrupted in step 1"):
            next(prefetcher)  # the main thread claims step 1, which raises: given up
        produce.gate.set()  # the worker files step 0 and goes on to step 2
        produce.wait_started(2)
        assert next(prefetcher) == 0
        got: dict[str, int] = {}
        # The main thread takes step 1 over and makes it, held inside until the gate opens.
        main = threading.Thread(
            target=lambda: got.setdefault("main", next(prefetcher)), name="MainThread"
        )
        main.start()
        assert produce.again_inside.wait(10.0)
        other = threading.Thread(target=lambda: got.setdefault("other", next(prefetcher)))
        other.start()
        deadline = time.monotonic() + 5.0
        while prefetcher._waiting == 0:  # the other thread waits for step 1 (white box)
            assert time.monotonic() < deadline, "the second consumer never waited"
            time.sleep(0.001)
        produce.again_gate.set()
        main.join(10.0)
        other.join(10.0)
        assert not other.is_alive(), "the waiting consumer was never woken"
        assert got == {"main": 10, "other": 20}
        assert [next(prefetcher) for _ in range(3)] == [30, 40, 50]


_NOTIFY_INTERRUPTED = """
import signal
import sys
import threading
import time
import numpy as np
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

labels = DenseDataset(sys.argv[1])
loader = DataLoader({"label": labels}, batch_size=4, mode="sequential", prefetch=1, workers=1,
                    transform=lambda batch: {"label": batch["label"] * 1})
space = loader._prefetcher._space
armed = [False]


def tracer(frame, event, arg):
    if (event == "call" and armed[0] and frame.f_code is threading.Condition.notify.__code__
            and frame.f_locals.get("self") is space):
        armed[0] = False
        signal.raise_signal(signal.SIGINT)  # a Ctrl-C as next() wakes the worker
    return None


got = [int(next(loader)["label"][0]) // 4]
time.sleep(0.3)  # the worker has made step 1 and waits for room
armed[0] = True
sys.settrace(tracer)
try:
    got.append(int(next(loader)["label"][0]) // 4)
except KeyboardInterrupt:
    pass
sys.settrace(None)
assert not armed[0], "the interrupt never fired"
got.extend(int(next(loader)["label"][0]) // 4 for _ in range(3))
loader.close()
print(got)
"""


def test_an_interrupt_as_a_step_is_taken_neither_loses_it_nor_wedges(tmp_path: Path) -> None:
    """A Ctrl-C inside the wake-up of the waiting worker, as next() takes a step: the step
    stays to be taken by the next call (it used to be dropped, with the worker never woken,
    so a loader with a transform blocked for ever)."""
    import subprocess
    import sys

    import numpy as np

    from loaderx.converter import from_numpy

    from_numpy(tmp_path / "label", np.arange(64, dtype=np.int64), codec="raw")
    result = subprocess.run([sys.executable, "-c", _NOTIFY_INTERRUPTED, str(tmp_path / "label")],
                            capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[0, 1, 2, 3]\n"  # the interrupted next() returned nothing
