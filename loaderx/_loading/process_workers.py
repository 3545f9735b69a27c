"""Worker processes for a loader whose transform is CPU-bound Python (worker_type="process").

Batch k is a pure function of (seed, k), so a worker process needs nothing from the consumer
but step numbers: each opens the datasets itself (they pickle by path), builds its own StepMaker
from a StepRecipe, makes the step, runs the transform and copies the result into a slot of the
shared ring (loaderx._loading.shared_ring). Only (step, slot) pairs cross the pipes, plus, for a
step that failed, the worker's traceback text.

The consumer (ProcessSteps, used by DataLoader in place of its thread Prefetcher) hands out
arrays over the slot's memory without a copy, in step order. A slot is written again only once
the consumer has released it: by default when nothing references the slot's memory any more
(no array, view, memoryview or tensor made from one; the same rule as the thread loader's
_released), with reuse_buffers once next() has asked for a later step. A consumer that keeps
batches makes the ring grow by a slot instead, as the thread loader allocates new arrays.

The first step's batch is made in the consumer's own process, to learn the layout of the
transform's output (keys, dtypes, shapes), which every later step must keep. When making it
fails (the transform raises, a read fails), the constructor keeps the error and the first
next() raises it, as the thread loader would from that step's next(); until a step is made,
each next() makes its step here, and the workers start once one is (_make_here).

Faults: an exception in a worker is raised by the next() for its step (WorkerError, with the
worker's traceback text; RemoteWorkerError, also a RemoteError, when it was a RemoteError), and
the step counts as taken. That includes the worker's loading of the recipe, at its first step:
reopening the datasets (an object store out of reach, a folder gone) fails the step, and the
worker tries again at its next one, as a thread loader's reads fail and go on. Workers are not
forked from a consumer reading a URL (refuse_fork_over_urls). A worker that dies (a signal,
os._exit) is noticed by its process sentinel: next() raises WorkerError naming the worker, its
exit code and the step, and the loader closes. Workers ignore SIGINT, so Ctrl-C reaches the
consumer only, which holds it (any signal with a Python handler) back while it starts a worker
(signals_deferred: an interrupt in multiprocessing's start killed the forkserver) and raises it
once the worker is booked. Workers
leave when their pipe closes (the consumer closed, or died; a worker started with fork first
closes its copies of the consumer's pipe ends). An interrupt that lands while an
answer is read or booked may lose it, so the next next() starts new workers at the next step
rather than wait for it. close() from another thread (or a handler on this one) makes a
waiting next() raise StopIteration. close() and garbage collection stop the workers and unlink every slot file,
also when a second Ctrl-C cuts close() short. A child forked from the consumer with os.fork()
drops the workers from multiprocessing's children, whose exit hook would stop them.

Left interpreted: the per-step work in the consumer is a pipe message and a few NumPy views.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from loaderx._data.dense import DenseDataset
from loaderx._loading.sampler import Mode, Sampler
from loaderx._loading.shared_ring import Layout, SlotFiles, read_batch, write_batch
from loaderx._loading.step_maker import StepMaker
from loaderx._os.deferred_interrupt import call_deferred, default_handlers, signals_deferred
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._store.choices import START_METHODS
from loaderx import errors
from loaderx.errors import RemoteError

Batch = dict[str, Any]
_JOIN_SECONDS = 0.3


class Maker(Protocol):
    def make(self, step: int) -> Batch: ...


class Recipe(Protocol):
    """What a worker process is sent (by pickling) to make any step: a DataLoader's
    StepRecipe, or a MixtureLoader's maker."""

    def maker(self, first_step: int) -> Maker: ...


class WorkerError(errors.WorkerError):
    """A worker process failed: its transform raised (the message holds its traceback), or
    the process itself died. A loaderx.errors.WorkerError, so that one `except` catches the
    failures of a loader's workers and of a conversion's, as docs/guide.md promises; its
    `worker` is None, since the message names the step to restart from."""

    def __init__(self, message: str) -> None:
        super().__init__(None, message)

    def __reduce__(self) -> tuple[type[WorkerError], tuple[str]]:  # type: ignore[override]
        return (type(self), (str(self),))


class RemoteWorkerError(WorkerError, RemoteError):
    """A worker process could not read its step from an object store (a RemoteError there: the
    store down past the retry budget, a record failing its checksum). A RemoteError, as the
    same read raises with thread workers (docs/remote.md: keep state_dict() and resume once
    the store is back), and a WorkerError, as any failure of a worker process."""


@dataclass
class StepRecipe:
    """Everything a worker process needs to make any step, sent to it once by pickling."""

    streams: dict[str, DenseDataset]
    length: int
    batch_size: int
    mode: Mode
    seed: int
    shard: tuple[int, int] | None
    transform: Callable[[dict[str, Any]], Batch] | None

    def maker(self, first_step: int) -> StepMaker:
        # As in DataLoader: with a shard, batch_size is this host's part of the global batch.
        sampler = Sampler(self.length, self.batch_size, mode=self.mode, seed=self.seed,
                          shard=self.shard)
        return StepMaker(sampler, self.streams, self.batch_size, self.transform, 2, True,
                         first_step)


def refuse_fork_over_urls(method: str, datasets: Iterable[object]) -> None:
    """ValueError when worker processes would be forked from a consumer reading a dataset
    opened from a URL. The object-store client (obstore) runs its requests on one runtime per
    process whose threads a fork does not copy, while the child shares the parent's epoll
    instance: a forked worker's requests hung, and their events crashed the consumer (a
    segfault in its runtime's thread). forkserver and spawn workers start a runtime of their
    own."""
    if method != "fork":
        return
    for dataset in datasets:
        if getattr(dataset, "remote", False):
            raise ValueError(
                f"start_method='fork' cannot read {getattr(dataset, 'path', 'a dataset')} "
                "(opened from a URL): the object-store client does not survive fork (a forked "
                "worker's requests hang and crash this process). Use start_method='forkserver' "
                "(the default where there is one) or 'spawn'"
            )


def default_start_method() -> str:
    """forkserver where there is one (Linux), else spawn: never fork, since the consumer's
    process may run threads (its own or a thread loader's) that a fork would copy mid-step."""
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _adopt_environment(variables: dict[str, str]) -> None:
    """In a worker: the consumer's environment as it was when the loader started its workers."""
    os.environ.clear()
    os.environ.update(variables)


class ConsumerEnvironment:
    """The consumer's os.environ, applied in a worker while its arguments are unpickled: before
    the recipe (loaded at the worker's first step) reopens the datasets. A forkserver's children
    inherit the environment the server started with, not the consumer's now, so an object
    store's credentials set since were missing and a worker reopening an s3:// dataset asked
    the cloud's metadata endpoint instead. Children of fork and spawn have the consumer's
    environment already; with this, every start method gives the workers the same one."""

    def __init__(self) -> None:
        self.variables = dict(os.environ)

    def __reduce__(self) -> tuple[Any, tuple[dict[str, str]]]:
        return (_adopt_environment, (self.variables,))


def _load(recipe: Recipe | bytes) -> Recipe:
    """The recipe a worker was sent: pickled (spawn, forkserver), so that loading it, which
    reopens the datasets, happens here where its failure can be reported; or the consumer's own
    objects (fork), whose datasets the worker inherits open."""
    return cast(Recipe, pickle.loads(recipe)) if isinstance(recipe, bytes) else recipe


def _worker_main(environment: ConsumerEnvironment | None, recipe: Recipe | bytes,
                 layout: Layout, prefix: str, conn: Any, consumer_ends: list[Any]) -> None:
    """A worker process: (step, slot) in, the step written into the slot, (step, slot, error
    text or None, whether it was a RemoteError, whether the recipe failed to load) out, until
    its pipe closes or says None."""
    default_handlers()  # forked: not the consumer's handlers (started in signals_deferred)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's to handle
    # With the fork start method this process has copies of the consumer's ends of its own pipe
    # and of the pipes of the workers started before it. Held here, they would keep those pipes
    # open after the consumer dies, and the workers would wait on them for ever.
    for end in consumer_ends:
        end.close()
    files = SlotFiles(prefix, layout.size)
    maps: dict[int, Any] = {}
    # Made at the first step, not at the start: loading the recipe reopens the datasets, which
    # for one opened from a URL asks the object store. Failing there (the store down) killed
    # the process, and the loader closed, where thread workers raise the read's error from
    # next() and go on once the store is back. Now it fails the step it was for, as a read
    # would, and the next step tries again.
    maker: Maker | None = None
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        step, slot = message
        loading = maker is None
        try:
            if maker is None:
                maker = _load(recipe).maker(0)
            loading = False
            # A StepMaker's own ring of two slots is free again for every new step.
            setattr(maker, "_first_step", step)
            batch = maker.make(step)
            memory = maps.get(slot)
            if memory is None:
                memory = maps[slot] = files.open(slot)
            write_batch(layout, memory, batch)
            error, remote = None, False
        except Exception as failure:
            error, remote = traceback.format_exc(), isinstance(failure, RemoteError)
        try:
            conn.send((step, slot, error, remote, loading))
        except (BrokenPipeError, OSError):
            return


def check_picklable(recipe: Recipe, method: str) -> bytes:
    """The recipe pickled, as the workers are sent it; TypeError before any process starts
    when it (the transform, mostly) cannot be sent to a worker process."""
    try:
        return pickle.dumps(recipe)
    except Exception as error:
        raise TypeError(
            f"worker_type='process' ({method} start method) sends the transform and datasets "
            f"to each worker by pickling, which failed: {error}. Define the transform at module "
            "level (not a lambda or a local function), or use worker_type='thread'"
        ) from error


class _Workers:
    """The processes, pipes and slot files of one ring: what close() and the finaliser free.
    Holds nothing of the loader, so the loader can be collected."""

    def __init__(self, files: SlotFiles) -> None:
        # Only the process that started the workers may stop them: a forked child that drops
        # its copy of the loader must leave the parent's workers and files alone.
        self.owner = os.getpid()
        self.files = files
        self.processes: list[Any] = []
        self.pipes: list[Any] = []
        self.maps: list[Any] = []
        # Held by the consumer while it sends to, waits on or reads from the pipes and asks the
        # processes how they are (ProcessSteps._issue, _receive), and by stop() while it closes
        # them: a close() from another thread closed a pipe under the consumer's recv(), which
        # then read from no descriptor (TypeError) or from whatever file had been given its
        # number since (a read that could wait for ever).
        self.using = ForkSafeLock()

    def stop(self) -> None:
        if os.getpid() != self.owner:
            return
        try:
            for pipe in self.pipes:
                try:
                    pipe.send(None)
                except (BrokenPipeError, OSError):
                    pass
            # One deadline for all: a worker busy in a long transform is killed, not waited for.
            deadline = time.monotonic() + _JOIN_SECONDS
            for process in self.processes:
                process.join(max(0.0, deadline - time.monotonic()))
        finally:
            # Also when a second Ctrl-C cuts the wait short: the finaliser that called this runs
            # only once, so whatever is left here would stay (workers until exit, files for
            # good). The files go and the workers are killed first, without waiting: a consumer
            # waiting in _receive wakes at their deaths and gives up `using` (at most its
            # poll's timeout later), which the closing of the pipes and processes waits for.
            # That part itself holds signals back (in the main thread): a SIGINT storm cut it
            # short in _close_ends' reaping, or as the deferral began, and nothing ran it again.
            call_deferred(self._release)

    def _release(self) -> None:
        """Unlinks the slot files, kills the workers, then closes the pipes and processes."""
        self.files.unlink_all()
        for process in self.processes:
            try:
                if process.is_alive():
                    process.kill()
            except ValueError:
                pass  # closed by an earlier stop that an interrupt cut short
        with self.using:
            self.files.unlink_all()  # also a slot file _issue made meanwhile
            self._close_ends()

    def _close_ends(self) -> None:
        """Closes the pipes, reaps and closes the (killed) processes and unmaps the slots."""
        for pipe in self.pipes:
            pipe.close()
        self.pipes = []
        for process in self.processes:
            try:
                process.join()
                process.close()
            except ValueError:
                pass  # closed by an earlier stop that an interrupt cut short
        self.processes = []
        for memory in self.maps:
            try:
                memory.close()
            except BufferError:
                pass  # the consumer still holds arrays over it: they stay valid until dropped
        self.maps = []


# The worker processes of every live ring in this process.
_ALL_WORKERS: weakref.WeakSet[Any] = weakref.WeakSet()


class _Rings:
    """Every ring a ProcessSteps started (a new one after an interrupted next()): what its
    finaliser stops. Holds nothing of the ProcessSteps, so it can be collected."""

    def __init__(self) -> None:
        self.all: list[_Workers] = []

    def stop(self) -> None:
        """Stops every ring, the later ones also when an interrupt cut an earlier one's wait
        short: the finaliser runs once, so a ring skipped here kept its slot files for good
        (a SIGINT storm left four)."""
        interrupted: BaseException | None = None
        for workers in self.all:
            try:
                workers.stop()
            except BaseException as error:
                interrupted = interrupted or error
        if interrupted is not None:
            raise interrupted


def _forget_workers_in_child() -> None:
    """In a child forked from the consumer (os.fork), drops the parent's workers from
    multiprocessing's list of children. Left there, that child's exit (multiprocessing's atexit
    hook) would send them SIGTERM and wait for them, killing the parent's loader."""
    children: set[Any] = getattr(multiprocessing.process, "_children", set())
    children.difference_update(_ALL_WORKERS)
    _ALL_WORKERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers_in_child)


def _step_error(step: int, error: str, remote: bool, loading: bool,
                here: bool = False) -> WorkerError:
    """What next() raises for a step a worker (or, `here`, the consumer, before any step was
    made) failed to make, the traceback text in it: a RemoteWorkerError when that was a
    RemoteError (a read, or the datasets' reopening, failing on the object store), else a
    WorkerError."""
    if here:
        how = ("could not be read from the object store" if remote else
               "failed: the transform (or a read) raised")
        text = (f"step {step} {how} in the loader's own process, which makes steps itself until "
                f"one gives the layout of the workers' batches:\n{error}")
    elif loading:
        what = ("could not reopen the datasets from the object store" if remote else
                "could not load the loader's recipe (reopen the datasets, unpickle the "
                "transform)")
        text = (f"a worker process {what} for step {step}; it tries again for its next "
                f"step:\n{error}")
    elif remote:
        text = f"a worker process could not read step {step} from the object store:\n{error}"
    else:
        text = f"the transform failed in a worker process at step {step}:\n{error}"
    return RemoteWorkerError(text) if remote else WorkerError(text)


def _references(maps: list[Any], slot: int) -> int:
    return sys.getrefcount(maps[slot])


_REFERENCES_ALONE = _references([bytearray(1)], 0)


class ProcessSteps:
    """Hands out the steps made by worker processes, in step order (the Prefetcher's part
    for worker_type="process": next_step, position, closed, next, close)."""

    def __init__(
        self,
        recipe: Recipe,
        first_step: int,
        depth: int,
        count: int,
        reuse_buffers: bool,
        start_method: str,
    ) -> None:
        pickled = check_picklable(recipe, start_method)
        self._recipe = recipe
        # What a worker is sent (_load): with fork its own copy of the consumer's objects.
        self._sent: Recipe | bytes = recipe if start_method == "fork" else pickled
        self._depth = depth
        self._reuse = reuse_buffers
        self._count = count
        self._method = start_method
        self.next_step = first_step
        self._asked = first_step
        self._failed: str | None = None
        self._owner = os.getpid()
        self._rings = _Rings()
        self._finalizer = weakref.finalize(self, self._rings.stop)
        self._unsure = False
        self._workers: _Workers | None = None
        # Set once a step made here gave the layout every slot has; until then no worker runs.
        self._layout: Layout | None = None
        self._first: Batch | None = None
        # The first step's failure (traceback text, whether a RemoteError), for the first next().
        self._first_failure: tuple[str, bool] | None = None
        try:
            first = recipe.maker(first_step).make(first_step)
        except Exception as failure:
            # Raised by next() for this step, as the thread loader would: a constructor that
            # raised left nothing to iterate on (and load_state_dict, which starts over here,
            # left the loader closed).
            self._first_failure = (traceback.format_exc(), isinstance(failure, RemoteError))
            return
        self._layout = Layout(first)  # an output no slot can hold is refused at once
        self._first = first
        self._start_workers(first_step + 1)

    def _start_workers(self, step: int) -> None:
        """A new ring of slots and new workers, sent steps from `step` on."""
        layout = self._layout
        assert layout is not None
        files = SlotFiles(SlotFiles.new_prefix(), layout.size)
        workers = _Workers(files)
        self._rings.all.append(workers)  # first: close() stops it, however far this gets
        self._workers = workers
        self._holding: list[int] = []  # per slot: the step written or being written, -1 none
        self._issued = step  # the next step to send to a worker
        self._pending: dict[int, int] = {}  # step -> slot, sent and not yet back
        # step -> (slot, error text, whether the error was a RemoteError, whether the worker
        # failed to load the recipe: to reopen the datasets or unpickle the transform)
        self._done: dict[int, tuple[int, str | None, bool, bool]] = {}
        context: Any = multiprocessing.get_context(self._method)
        for index in range(self._count):
            here, there = context.Pipe()
            # A forked worker closes its copies of the consumer's pipe ends (_worker_main);
            # spawn and forkserver copy none (and could not be sent them).
            ends = [*workers.pipes, here] if self._method == "fork" else []
            process = context.Process(
                target=_worker_main,
                args=(ConsumerEnvironment(), self._sent, layout, files.prefix, there, ends),
                name=f"loaderx-worker-{index}", daemon=True,
            )
            # Ctrl-C (any signal with a Python handler) waits until the process is started
            # and booked (loaderx._os.deferred_interrupt): cut short in multiprocessing's
            # start, it killed the forkserver or left a child that close() did not know of.
            with signals_deferred():
                if self.closed:
                    break  # by a handler between two starts: a worker now would stay
                process.start()
                there.close()
                _ALL_WORKERS.add(process)
                workers.processes.append(process)
                workers.pipes.append(here)
        # True while an answer is taken from a pipe, a step is booked as sent or taken, or
        # workers start: an exception there (Ctrl-C, or any signal handler's) leaves the books
        # unsure, and the next next() starts new workers (__next__).
        self._unsure = False
        self._issue()

    # --- the Prefetcher's interface -------------------------------------------------------

    def position(self) -> tuple[int, int]:
        return self.next_step, self._asked

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __iter__(self) -> ProcessSteps:
        return self

    def __next__(self) -> Batch:
        if os.getpid() != self._owner:
            raise RuntimeError(
                "this loader's worker processes belong to the process that made it; in a "
                f"forked child make a new loader (start_step={self.next_step})"
            )
        if self._failed is not None:
            raise WorkerError(self._failed)
        if self.closed:
            raise StopIteration
        if self._layout is None:
            self._make_here()
        elif self._unsure:
            # An exception (Ctrl-C) landed while an answer was read or a step booked: an
            # answer may be lost or half read, and waiting for it would hang. Start new
            # workers at the next step instead (the batch being returned may be lost).
            # Every ring before (one an interrupt cut short before it was the current one too).
            stale = list(self._rings.all)
            self._start_workers(self.next_step + (self._first is not None))
            for old in stale:
                old.stop()
                self._rings.all.remove(old)
        step = self.next_step
        self._asked = step
        first = self._first
        if first is not None:
            self._unsure = True
            self._first = None
            self.next_step = step + 1
            self._unsure = False
            self._issue()
            return first
        self._issue()
        while step not in self._done:
            if self.closed:
                raise StopIteration  # close() from another thread, or a signal handler
            self._receive()
        self._unsure = True
        layout = self._layout
        assert layout is not None  # workers run only once a layout is known
        slot, error, remote, loading = self._done.pop(step)
        self.next_step = step + 1
        self._unsure = False
        if error is not None:
            self._holding[slot] = -1
            self._issue()
            raise _step_error(step, error, remote, loading)
        try:
            batch = read_batch(layout, self._ring().maps[slot])
        except (IndexError, ValueError):
            if self.closed:
                raise StopIteration from None  # closed by another thread meanwhile
            raise
        self._issue()
        return batch

    def close(self) -> None:
        self._finalizer()

    def _make_here(self) -> None:
        """Before any step was made (the first one failed): the next step made here, as the
        constructor makes the first. Its failure is raised, the step counting as taken, as a
        worker's would be; made, it gives the layout, and the workers start after it (the
        caller's next() then returns it as the first step)."""
        step = self.next_step
        self._asked = step
        failure = self._first_failure
        if failure is None:
            try:
                batch = self._recipe.maker(step).make(step)
            except Exception as error:
                failure = (traceback.format_exc(), isinstance(error, RemoteError))
            else:
                layout = Layout(batch)  # TypeError: no slot can hold this output
                # An interrupt from here on leaves _unsure, and the next next() starts the
                # workers again after this step (which it returns: _first).
                self._unsure = True
                self._layout = layout
                self._first = batch
                self._start_workers(step + 1)
                return
        self._first_failure = None
        self.next_step = step + 1
        text, remote = failure
        raise _step_error(step, text, remote, False, here=True)

    def _ring(self) -> _Workers:
        workers = self._workers
        assert workers is not None  # set before any step is sent to a worker
        return workers

    # --- the ring ---------------------------------------------------------------------------

    def _slot_free(self, slot: int) -> bool:
        held = self._holding[slot]
        if held < 0:
            return True
        if held >= self.next_step or held in self._pending or held in self._done:
            return False  # being made, or made and not yet taken
        if self._reuse:
            return held < self._asked
        maps = self._ring().maps
        return _references(maps, slot) == _REFERENCES_ALONE and weakref.getweakrefcount(
            maps[slot]) == 0

    def _free_slot(self) -> int:
        for slot in range(len(self._holding)):
            if self._slot_free(slot):
                return slot
        slot = len(self._holding)
        workers = self._ring()
        workers.maps.append(workers.files.create(slot))
        self._holding.append(-1)
        return slot

    def _issue(self) -> None:
        """Sends steps to the workers, round robin, up to depth steps ahead of the consumer.
        Returns early when the loader closes meanwhile, also when a signal handler on this
        thread closed it in the middle of a send: `using` is re-entrant, so that close() went
        through and took the pipes and maps from under this (TypeError, IndexError), and a
        slot file made after its unlink was left in /dev/shm."""
        workers = self._ring()
        try:
            self._send(workers)
        except Exception:
            if not self.closed:
                raise
        finally:
            if self.closed:
                workers.files.unlink_all()

    def _send(self, workers: _Workers) -> None:
        while self._issued < self.next_step + self._depth and not self.closed:
            with workers.using:  # stop() closes nothing meanwhile (_Workers.using)
                if self.closed:
                    return  # closed from another thread: no slot file is made after its unlink
                step = self._issued
                pipe = workers.pipes[step % len(workers.pipes)]
                self._unsure = True
                slot = self._free_slot()
                self._holding[slot] = step
                self._pending[step] = slot
                try:
                    pipe.send((step, slot))
                except OSError:
                    # Its worker died. Not raised here, where next() may hold a batch to
                    # return: the wait for a step this worker owes notices the death by its
                    # sentinel and raises WorkerError.
                    self._unsure = False
                    return
                self._issued = step + 1
                self._unsure = False

    def _receive(self) -> None:
        """Waits for any worker's answer (or death); interruptible by Ctrl-C."""
        workers = self._ring()
        with workers.using:  # stop() closes no pipe under a recv (_Workers.using)
            if self.closed:  # close() from another thread, or a signal handler
                raise StopIteration
            try:
                sentinels = {process.sentinel: i for i, process in enumerate(workers.processes)}
                ready = multiprocessing.connection.wait([*workers.pipes, *sentinels],
                                                        timeout=0.5)
            except Exception:
                if self.closed:  # closed by a signal handler on this thread (`using` re-enters)
                    raise StopIteration from None
                raise
            self._unsure = True
            for item in ready:
                if isinstance(item, int):
                    continue  # a sentinel: its process's exit code says why, below
                try:
                    answer: tuple[int, int, str | None, bool, bool] = cast(Any, item).recv()
                except Exception as failure:
                    if self.closed:  # by a signal handler in the read (TypeError, OSError)
                        raise StopIteration from None
                    if isinstance(failure, (EOFError, OSError)):
                        continue  # its sentinel says why
                    raise
                step, slot, error, remote, loading = answer
                self._pending.pop(step, None)
                self._done[step] = (slot, error, remote, loading)
            self._unsure = False
            try:
                dead = [process for process in workers.processes if process.exitcode is not None]
            except ValueError:
                if self.closed:  # the process objects closed by a signal handler's close()
                    raise StopIteration from None
                raise
        for process in dead:
            self._die(process)

    def _die(self, process: Any) -> None:
        try:
            code = process.exitcode
        except ValueError:
            code = None  # the process object is closed: only close() does that
        if code is None or self.closed:
            # close() from another thread killed (and maybe closed) the workers while this
            # thread waited: an end of iteration, not a worker's death.
            raise StopIteration
        how = (f"was killed by signal {signal.Signals(-code).name}" if code < 0
               else f"exited with code {code} (its own error, if any, is on stderr above)")
        self._failed = (
            f"loaderx worker process {process.name} (pid {process.pid}) {how} while the loader "
            f"waited for step {self.next_step}; the loader is closed. Restart from "
            f"state_dict() (step {self.next_step})"
        )
        self.close()
        raise WorkerError(self._failed)


__all__ = [
    "ProcessSteps", "RemoteWorkerError", "StepRecipe", "WorkerError", "START_METHODS",
    "default_start_method", "refuse_fork_over_urls",
]
