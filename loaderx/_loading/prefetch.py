"""Owns Prefetcher: bounded, ordered, closable computation of numbered steps on worker threads
(and on the consumer's, while it would otherwise wait).

A Prefetcher calls ``produce(step)`` for step = start_step, start_step + 1, ... on a few worker
threads and hands the results to its consumer strictly in step order. The contract, which the
DataLoader builds on:

- Bounded: a worker starts step ``s`` only once the consumer has taken step ``s - depth``, so at
  most ``depth`` results are computed-but-not-taken or in flight at any time. Nothing grows with
  the length of a run.
- Ordered: ``next()`` returns step ``s`` before step ``s + 1``, whatever order workers finish in.
- Faithful errors: an exception raised by ``produce(step)`` is raised by the ``next()`` call that
  would have returned that step, with its original traceback; the step still counts as taken,
  so iterating further continues with the following step.
- Closable: ``close()`` stops every worker and joins it (a worker inside ``produce`` finishes that
  call first). It is idempotent, safe from any thread, and wakes a consumer blocked in
  ``next()``, which then raises StopIteration. Workers are daemon threads, and at interpreter
  exit a forgotten Prefetcher is closed waiting at most EXIT_JOIN_SECONDS for its workers (one
  may be blocked in a user's transform), so it never keeps the interpreter from exiting.
- Collectable: ``produce`` may be a WeakProducer, which the worker threads call through a weak
  reference, so that they (and the atexit hook) do not keep alive what ``produce`` references:
  a loader whose transform is a bound method of the loader's owner would otherwise never be
  collected, and its threads would run until exit.
- With ``consumer_helps=True``, a consumer that would wait makes a step itself: when ``next()``
  finds its step not ready and the window has a step no worker has started, the consumer runs
  ``produce`` for that step on its own thread. When that was its next step, it takes the result at
  once, under the lock it would have filed it with; otherwise it files the result as a worker
  would and looks again. Why: on a small machine the consumer sleeping and being woken for every
  step cost more than the step's work (with labels, a loader with nothing else to do ran at 0.84x
  of the bare gather before and 0.93x after; benchmarks/probes/loader_overhead.py). A consumer busy elsewhere
  finds its steps ready and never does this. Only for a ``produce`` whose every call finishes on
  its own (the loaders pass it without a user transform): the consumer cannot return a step that
  became ready while it makes another, so a ``produce`` that waited on something the consumer does
  next would never return.
- Workers stand aside while the consumer makes a step: with ``consumer_helps=True`` no worker
  claims a new step while a consumer thread is making one (it finishes the step it has). A
  consumer that keeps coming back for its next step before it is ready is faster than the
  workers alone, so it makes the steps one after the other and the workers idle; a consumer
  busy elsewhere between steps (training) leaves them free, and they make the window ahead as
  before (a take wakes one). Why: two threads making steps at once on two cores each wrote to
  a different batch while the consumer held a third, so the batches cycled through all of the
  loader's prefetch + 1 arrays and every gather wrote to memory long out of the cache; one
  maker at a time writes one or two warm ones (loaderx._loading.step_maker). The loader with
  labels went from 0.77x to 0.87x of the bare gather to 0.88x to 1.03x, median 0.92x
  (benchmarks/compare.py loader, nine runs after, on 2026-12-02; README, issue 11).
- Interrupts: a KeyboardInterrupt (or any BaseException that is not an Exception) can reach the
  consumer's thread anywhere in ``next()``, also between claiming a step and filing it. It goes
  up from ``next()`` at once and the step stays claimed by that thread, which makes it again on
  its next call (the consumer is never inside a step it claimed while it is in ``next()``), so
  iterating on after a caught Ctrl-C returns every step, in order. An interrupt once the step
  is being made (all but one bytecode of the window) also gives the step up, so that another
  consumer thread waiting for it makes it instead. A finished step is taken out of the shared
  state before anything that can be interrupted, so none is left stranded there. Worker threads
  receive no signals. An interrupt that lands as a `with` takes the lock can leave the lock held
  (loaderx._os.kept_locks); next() gives back any level its thread holds on the way out.

Fork: a child inherits the Prefetcher but none of its threads, and one of them may have held the
lock at the moment of fork. In a child, ``next()`` raises RuntimeError (create the loader in the
child), and ``next_step`` and ``close()`` work without taking the lock.

All shared state is guarded by one lock; nothing relies on the GIL, so the same code is correct
on free-threaded CPython, where ``produce`` calls truly run in parallel.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from functools import partial
from typing import Any, Callable, Final, Generic, NoReturn, TypeVar, cast

from loaderx._os.kept_locks import held, release_kept
from loaderx.errors import ProducerGone

T = TypeVar("T")

# Sanity limits: far beyond anything useful, low enough to catch a unit mix-up early.
DEPTH_MAX: Final = 4096
WORKERS_MAX: Final = 1024
# The first step a loader cannot make by default: steps are unsigned 64-bit on the native side.
STEP_END_DEFAULT: Final = 1 << 64
# Worker threads a loader starts when none are asked for, at most.
WORKERS_DEFAULT_MAX: Final = 4
# How long an idle worker waits before it looks at the closed flag again unwoken: a prefetcher
# stopped by the collector may not get its lock to wake the workers (_stop_when_collected).
IDLE_CHECK_SECONDS: Final = 1.0
# How long a worker standing aside waits before it looks again whether the consumer still makes
# its steps: first STAND_ASIDE_FIRST_SECONDS, twice as long after each look that finds it so, up
# to STAND_ASIDE_MAX_SECONDS. A consumer that goes off to train after making its own steps for a
# while has its next ones started at most that late, once; one that keeps making them is
# disturbed a few times a second (in a scratch comparison on two cores, a look every
# millisecond cost the loader about 10% of its rate: each wake-up takes a core from the gather
# in progress).
STAND_ASIDE_FIRST_SECONDS: Final = 0.001
STAND_ASIDE_MAX_SECONDS: Final = 0.064
# At interpreter exit, how long a forgotten Prefetcher waits for its workers in all.
EXIT_JOIN_SECONDS: Final = 2.0
# The owner of a step its consumer gave up (no thread has ident 0).
_ABANDONED: Final = 0


class WeakProducer(Generic[T]):
    """Calls ``produce`` through a weak reference (module docstring, "Collectable").

    ``produce`` is a functools.partial (compiled classes and bound methods make poor weak
    referents: the one takes none, the other dies at once), which the caller keeps as long as
    it uses the Prefetcher.
    """

    def __init__(self, produce: partial[T]) -> None:
        self._produce: weakref.ref[partial[T]] = weakref.ref(produce)

    def __call__(self, step: int) -> T:
        produce = self._produce()
        if produce is None:
            raise ProducerGone("the loader this step was for has been collected")
        return produce(step)


def default_workers(consumer_helps: bool) -> int:
    """The worker threads of a loader that was given none: min(4, CPUs), and one fewer (at
    least 1) when the consumer makes steps too while it would wait (module docstring): on two
    cores, one worker beat two (benchmarks/probes/loader_overhead.py prints both)."""
    cpus = os.cpu_count() or 1
    return max(1, min(WORKERS_DEFAULT_MAX, cpus - 1 if consumer_helps else cpus))


def _check_count(name: str, value: int, maximum: int) -> None:
    if not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1 or value > maximum:
        raise ValueError(f"{name} must be in 1..{maximum}, got {value}")


def close_when_collected(anchor: object, prefetcher: Prefetcher[T]) -> weakref.finalize[Any, Any]:
    """A finaliser that stops ``prefetcher`` when ``anchor`` is collected, without waiting (see
    Prefetcher._stop_when_collected). Not at exit: then the Prefetcher's own hook closes it with
    a bounded wait, where the finaliser's exit call would join a worker blocked in a user's
    transform for ever."""
    finalizer = weakref.finalize(anchor, prefetcher._stop_when_collected)
    finalizer.atexit = False
    return finalizer


class Prefetcher(Generic[T]):
    """Computes produce(step) ahead of the consumer on worker threads; see the module docstring.

    Only ``min(workers, depth)`` threads are started: a worker beyond the depth could never
    claim a step.
    """

    def __init__(
        self,
        produce: Callable[[int], T],
        start_step: int,
        depth: int,
        workers: int,
        name: str = "loaderx-prefetch",
        consumer_helps: bool = False,
        step_end: int = STEP_END_DEFAULT,
        step_end_reason: str = "steps are unsigned 64-bit integers",
    ) -> None:
        if not isinstance(start_step, int):
            raise TypeError(f"start_step must be an int, got {type(start_step).__name__}")
        if start_step < 0:
            raise ValueError(f"start_step must be >= 0, got {start_step}")
        if start_step > step_end:
            raise ValueError(
                f"start_step must be <= {step_end} ({step_end_reason}), got {start_step}"
            )
        _check_count("depth", depth, DEPTH_MAX)
        _check_count("workers", workers, WORKERS_MAX)
        if not callable(produce):
            raise TypeError("produce must be callable")
        self._produce: Callable[[int], T] = produce
        self._depth: int = depth
        self._consumer_helps: bool = consumer_helps
        # No step at or past step_end is made: next() there raises instead (_refuse_end), so
        # the step count stops at step_end, which a state dict can still hold.
        self._step_end: int = step_end
        self._step_end_reason: str = step_end_reason
        # A reentrant lock: a garbage-collector finaliser may call close() on a worker thread
        # that already holds the lock (see close()).
        self._lock: threading.RLock = threading.RLock()
        self._ready: threading.Condition = threading.Condition(self._lock)
        self._space: threading.Condition = threading.Condition(self._lock)
        # Guarded by _lock: the next step a worker will claim, the next step the consumer will
        # take, finished steps not yet taken, and whether close() was called.
        self._claim_step: int = start_step
        self._take_step: int = start_step
        # The step a consumer last came to next() for: the one before it is no longer in the
        # consumer's hands if its contract says a result lasts until the next call.
        self._asked: int = start_step
        self._values: dict[int, T] = {}
        self._errors: dict[int, BaseException] = {}
        # Steps a consumer thread claimed and has not filed: step -> that thread's ident.
        self._helping: dict[int, int] = {}
        # Steps a consumer thread made and filed that have not been taken (a dict: stores and
        # deletes by subscript, no calls, where an interrupt must not land; see _file).
        self._made_by_consumers: dict[int, bool] = {}
        # Whether a step was taken without waking a worker since a worker last claimed one:
        # the workers then look again sooner than IDLE_CHECK_SECONDS (STAND_ASIDE_*_SECONDS).
        self._unwoken: bool = False
        # Consumer threads waiting in next() for _ready, so that filing a step notifies only
        # when someone waits (a Condition's notify is Python code: about 0.5 us a step). An
        # interrupt can only leave it too high (one needless notify), never too low.
        self._waiting: int = 0
        self._closed: bool = False
        self._threads: list[threading.Thread] = []
        self._pid: int = os.getpid()
        atexit.register(self._close_at_exit)
        try:
            self._start(min(workers, depth), name)
        except BaseException:
            self.close()
            raise

    def _start(self, count: int, name: str) -> None:
        with self._lock:
            for index in range(count):
                thread = threading.Thread(target=self._work, name=f"{name}-{index}", daemon=True)
                thread.start()
                self._threads.append(thread)

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def next_step(self) -> int:
        """The step the next successful ``next()`` returns."""
        if self.forked:
            return self._take_step  # no other thread exists here, and the lock may be stuck
        with self._lock:
            return self._take_step

    def position(self) -> tuple[int, int]:
        """(next_step, the step a consumer last came to next() for), read together."""
        with self._lock:
            return self._take_step, self._asked

    @property
    def closed(self) -> bool:
        if self.forked:
            return self._closed
        with self._lock:
            return self._closed

    @property
    def forked(self) -> bool:
        """Whether this is a forked child of the process that created the Prefetcher."""
        return os.getpid() != self._pid

    def _refuse_forked(self) -> NoReturn:
        raise RuntimeError(
            "this loader was created in another process (before a fork): its threads do not "
            "exist here and it would wait forever for their steps; create the loader in this "
            f"process, starting at step {self._take_step} to continue the stream"
        )

    def _refuse_end(self) -> NoReturn:
        raise ValueError(
            f"this loader is past its last step, {self._step_end - 1} "
            f"({self._step_end_reason}): it has no further batch"
        )

    def __iter__(self) -> Prefetcher[T]:
        return self

    def __next__(self) -> T:
        """Returns the next step's result (or raises its error); until it is ready, makes steps
        no worker has started if the consumer helps, else blocks (module docstring)."""
        if self.forked:
            self._refuse_forked()
        arrived = True
        try:
            while True:
                own, value, error = self._take_or_claim(arrived)
                arrived = False
                if own < 0:
                    if error is not None:
                        # Re-raising keeps the producer's traceback and appends this frame.
                        raise error
                    return cast(T, value)
                # The step is made on this thread: taken at once if it is the consumer's
                # next, else filed as a worker would.
                try:
                    taken, value, error = self._make_own(own)
                except BaseException:
                    self._abandon(own)
                    raise
                if taken:
                    if error is not None:
                        raise error
                    return cast(T, value)
        except BaseException:
            # The consumer holds the lock only inside `with` blocks, but an interrupt can leave
            # it held on the way in (loaderx._os.kept_locks): every worker would then wait for
            # it for good.
            release_kept(self._lock)
            raise

    def _take_or_claim(self, arrived: bool) -> tuple[int, T | None, BaseException | None]:
        """(-1, value, error) taking the consumer's step once it is ready; else (step, None,
        None) for a step this thread claimed earlier and an interrupt kept it from filing, or,
        when the consumer helps, a new step it claims to make; waits only when there is none of
        these. `arrived`: this is the first look of this next() call. StopIteration once
        closed."""
        me = threading.get_ident()
        with self._lock:
            if arrived:
                self._asked = self._take_step
            while True:
                if self._closed:
                    raise StopIteration
                step = self._take_step
                if step in self._values or step in self._errors:
                    # A consumer that found its step ready, made by a worker, is the slower
                    # side: a worker is woken to make the next one. One that had to wait, or
                    # made the step itself, is the faster side: the workers stand aside (module
                    # docstring).
                    made_here = step in self._made_by_consumers
                    if made_here:
                        del self._made_by_consumers[step]
                    wake = not self._consumer_helps or (arrived and not made_here)
                    return self._take(step, wake)
                if step >= self._step_end:
                    self._refuse_end()
                own = self._orphan_of(me)
                if own >= 0:
                    return own, None, None
                claimable = self._claim_step < self._step_end
                if self._consumer_helps and claimable and self._claim_step - step < self._depth:
                    own = self._claim_step
                    self._claim_step = own + 1
                    self._helping[own] = me
                    return own, None, None
                arrived = False
                self._waiting += 1
                try:
                    self._ready.wait()
                finally:
                    self._waiting -= 1

    def _take(self, step: int, wake: bool) -> tuple[int, T | None, BaseException | None]:
        """Takes the finished step (lock held). With `wake` a waiting worker is told first (one
        more step may be claimed once the lock is released; it checks again then); without,
        the workers look on their own (STAND_ASIDE_FIRST_SECONDS). Either way before the step
        moves, so that from there on subscripts and stores only move the step out and the count
        on: no call, so no interrupt, in between."""
        if wake:
            self._space.notify()
        else:
            self._unwoken = True
        value: T | None = None
        error: BaseException | None = None
        if step in self._errors:
            error = self._errors[step]
            del self._errors[step]
        else:
            value = self._values[step]
            del self._values[step]
        self._take_step = step + 1
        return -1, value, error

    def _orphan_of(self, me: int) -> int:
        """A step thread `me` claimed and never filed (an interrupt), or one whose maker gave it
        up (_ABANDONED), which `me` then takes over; else -1 (lock held)."""
        for step, owner in self._helping.items():
            if owner == me or owner == _ABANDONED:
                self._helping[step] = me
                return step
        return -1

    def _consumer_making(self) -> bool:
        """Whether a consumer thread is making a step itself (lock held): then the workers stand
        aside (module docstring). A step its consumer gave up (_ABANDONED) does not count: no
        thread is making it, and its consumer may be away for good."""
        if not self._consumer_helps:
            return False
        for owner in self._helping.values():
            if owner != _ABANDONED:
                return True
        return False

    def _claim(self) -> int:
        """Returns the next step for this worker to compute, or -1 once closed."""
        stand_aside = STAND_ASIDE_FIRST_SECONDS
        with self._lock:
            while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                if self._closed or not (
                    self._claim_step - self._take_step >= self._depth
                    or self._claim_step >= self._step_end
                    or self._consumer_making()
                ):
                    break
                if self._unwoken or self._consumer_making():
                    self._space.wait(stand_aside)
                    stand_aside = min(2.0 * stand_aside, STAND_ASIDE_MAX_SECONDS)
                else:
                    self._space.wait(IDLE_CHECK_SECONDS)
            if self._closed:
                return -1
            self._unwoken = False
            step = self._claim_step
            self._claim_step = step + 1
            return step

    def _work(self) -> None:
        while True:
            step = self._claim()
            if step < 0 or not self._run(step):
                return

    def _run(self, step: int) -> bool:
        """Produces one step on a worker and files its result; False once closed. Any
        exception, also a BaseException (workers receive no signals), goes to the consumer.

        A function of its own so that no reference to the result outlives the filing: a worker
        waiting for room must not keep its last result alive (the DataLoader recycles a batch's
        arrays only when nothing references them).
        """
        try:
            value = self._produce(step)
        except BaseException as error:  # delivered to the consumer, never swallowed
            return self._file(step, None, error)
        return self._file(step, value, None)

    def _make_own(self, step: int) -> tuple[bool, T | None, BaseException | None]:
        """Makes `step`, which this consumer thread claimed: (True, value, error) when it was
        the consumer's next step, taken here under the same lock that files it (one lock round
        trip a step instead of filing it and looking again); else (False, None, None) once it
        is filed as a worker's would be, or dropped once closed (the caller looks again). An
        interrupt (a BaseException that is not an Exception) goes up unfiled: the step stays
        this thread's to make again (module docstring, "Interrupts")."""
        try:
            value: T | None = self._produce(step)
            error: BaseException | None = None
        except Exception as caught:  # delivered to the consumer, never swallowed
            value = None
            error = caught
        with self._lock:
            if self._closed:
                return False, None, None
            if step == self._take_step and step in self._helping:
                # Stores and subscripts only until the step is taken (see _take).
                del self._helping[step]
                self._take_step = step + 1
                # The consumer made its own step: the workers stand aside (module docstring).
                self._unwoken = True
                if self._waiting:
                    # Another consumer thread waits for the next step, which may be ready.
                    self._ready.notify_all()
                return True, value, error
            self._file_locked(step, value, error)
        return False, None, None

    def _abandon(self, step: int) -> None:
        """An interrupted consumer gives up the step it was making, so that any consumer thread
        may make it (another one may be waiting for it). Should an interrupt stop even this,
        the step stays this thread's, which makes it on its next call."""
        me = threading.get_ident()
        with self._lock:
            if step in self._helping and self._helping[step] == me:
                self._helping[step] = _ABANDONED

    def _file(self, step: int, value: T | None, error: BaseException | None) -> bool:
        """Files step's result, or the error its next() raises when one is given; False once
        closed (the result is dropped)."""
        with self._lock:
            if self._closed:
                return False
            self._file_locked(step, value, error)
        return True

    def _file_locked(self, step: int, value: T | None, error: BaseException | None) -> None:
        """_file with the lock held and the prefetcher open."""
        # No call (not even typing.cast) until the step is filed and no longer claimed: an
        # interrupt in between would lose the step (see _take).
        made_here = step in self._helping
        if made_here:
            del self._helping[step]
        if step < self._take_step:
            return  # taken already (cannot happen: a step is taken once filed)
        if error is None:
            self._values[step] = value  # type: ignore[assignment]
        else:
            self._errors[step] = error
        if made_here:
            self._made_by_consumers[step] = True
        if step == self._take_step and self._waiting:
            self._ready.notify_all()

    def close(self) -> None:
        """Stops and joins every worker; results not yet taken are dropped. Idempotent."""
        # First: whatever happens below, the atexit hook must not keep this object (and the
        # buffers its results reference) alive until exit.
        atexit.unregister(self._close_at_exit)
        self._stop(None)

    def _stop_when_collected(self) -> None:
        """close() for a finaliser, which never blocks: the collector runs it at any allocation
        of any thread, also one holding a lock the workers need in order to exit (threading's
        own, while threading.enumerate() builds its list: joining them there hung for good).
        So it neither joins the workers nor waits for this prefetcher's lock: it sets the flag,
        and wakes them when the lock is free (a worker the wake-up misses sees the flag within
        IDLE_CHECK_SECONDS). Results not yet taken go with the prefetcher."""
        atexit.unregister(self._close_at_exit)
        self._closed = True
        lock = self._lock
        # The collector may run this on a thread that holds the lock (see __init__): only a
        # level taken here can be one an interrupt kept (loaderx._os.kept_locks).
        had = held(lock)
        try:
            if not lock.acquire(blocking=False):
                return
            try:
                self._ready.notify_all()
                self._space.notify_all()
            finally:
                lock.release()
        except BaseException:
            if not had:
                release_kept(lock)
            raise

    def _close_at_exit(self) -> None:
        """close() at interpreter exit: waits at most EXIT_JOIN_SECONDS for the workers."""
        self._stop(EXIT_JOIN_SECONDS)

    def _stop(self, timeout: float | None) -> None:
        if self.forked:
            # The workers are the parent's; this copy only stops handing out steps.
            self._closed = True
            return
        with self._lock:
            self._closed = True
            self._values.clear()
            self._errors.clear()
            self._helping.clear()
            self._made_by_consumers.clear()
            self._ready.notify_all()
            self._space.notify_all()
            threads = list(self._threads)
        if threading.current_thread() in threads:
            # Called from inside produce (or by a finaliser the collector ran on a worker): the
            # other workers may need the lock this thread holds, so they cannot be joined here.
            # Each of them exits as soon as it sees the flag.
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> Prefetcher[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
