"""Owns DataLoader: the endless, step-based, thread-prefetched loader over dense datasets.

Each step is a pure function of (seed, step): the sampler fills the step's indices, every stream
gathers those same indices in one native call into arrays made for that step, and the transform
(the collate step: a batch dict in, a batch dict out) runs on the result. Steps are computed
ahead on worker threads (loaderx._loading.prefetch), and without a transform also on the
consumer's own thread while it would otherwise wait for one (the workers then stand aside, so a
consumer that outruns them makes its steps into one or two warm arrays), and are delivered
strictly in step order, so ``loader.step`` (the next step to be yielded) and the seed are a
complete checkpoint: ``DataLoader(..., seed=seed, start_step=step)`` yields bit-identical
batches for any prefetch depth or worker count.

Batch lifetime: by default a batch's arrays belong to the consumer for good, exactly as if each
step allocated new ones: an array is written again only once nothing references it any more (no
variable, view, memoryview, torch.from_numpy tensor or weak reference), and is then recycled
for a later step instead of going back to malloc. Recycling matters: with several worker
threads, glibc hands the freed memory of multi-megabyte batches back to the kernel, and fresh
arrays then cost a page fault per 4 KiB on every step. With ``reuse_buffers=True`` the arrays
are recycled without that check: a batch is then valid only until the next call to ``next()``
on the loader (after which a later step may be written into it), so a consumer that keeps
batches must copy them. On a free-threaded build the reference count is as reliable for this
as on a GIL build: once the ring holds the only reference, no other thread can reach the array.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

import difflib
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, Never, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._loading.loader_arguments import as_int, check_count
from loaderx._loading.loader_shell import Batch, LoaderShell
from loaderx._native.library import GATHER_STREAMS_MAX
from loaderx._native.calls import NativeCalls, StreamsCall, address
from loaderx._loading.prefetch import (
    DEPTH_MAX,
    WORKERS_MAX,
    Prefetcher,
    WeakProducer,
    close_when_collected,
    default_workers,
)
from loaderx._loading.sampler import Mode, Sampler
from loaderx._store.zrecord import Zrecord

__all__ = ["DataLoader", "Batch", "Transform"]

Transform = Callable[[dict[str, npt.NDArray[Any]]], Batch]

BATCH_SIZE_DEFAULT: Final = 256
PREFETCH_DEFAULT: Final = 4
_INT64: Final = np.dtype(np.int64)


def _check_streams(streams: object) -> int:
    """Validates the stream dict and returns the common length of its datasets.

    streams is taken as a plain object so that the compiled module reaches these checks (and
    their messages) instead of refusing a wrongly typed item at the call boundary.
    """
    if not isinstance(streams, Mapping):
        kind = type(streams).__name__
        raise TypeError(f"streams must be a dict of name -> DenseDataset, not {kind}")
    if len(streams) == 0:
        raise ValueError("a DataLoader needs at least one stream")
    lengths: dict[str, int] = {}
    for name, dataset in streams.items():
        if not isinstance(name, str):
            raise TypeError(f"stream names must be str, got {name!r}")
        if isinstance(dataset, RaggedDataset):
            raise TypeError(
                f"stream {name!r} is a RaggedDataset; the loader is dense-only: pad its records "
                "into a dense dataset first (loaderx.dataset.pad) and load that"
            )
        if not isinstance(dataset, DenseDataset):
            raise TypeError(f"stream {name!r} must be a DenseDataset, not {type(dataset).__name__}")
        lengths[name] = len(dataset)
    distinct = set(lengths.values())
    if len(distinct) != 1:
        listed = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise ValueError(f"all streams must have the same length, got {listed}")
    length = distinct.pop()
    if length == 0:
        raise ValueError("the streams are empty: there is nothing to load")
    return length


# Keywords that users of other loaders reach for, and what loaderx calls (or does instead of) them.
_KEYWORD_HINTS: Final[dict[str, str]] = {
    "num_workers": "workers= (worker threads, not processes)",
    "prefetch_factor": "prefetch= (steps computed ahead, in total)",
    "collate_fn": "transform= (a batch dict in, a batch dict out)",
    "shuffle": 'mode= ("cyclic" shuffles without replacement, "iid" with, "sequential" not)',
    "sampler": 'mode= and seed= (the sampler is built in: "sequential", "iid" or "cyclic")',
    "batch_sampler": 'mode= and seed= (the sampler is built in: "sequential", "iid" or "cyclic")',
    "generator": "seed=",
    "drop_last": "nothing: the loader is endless and every batch is full",
    "pin_memory": "loaderx.torch.TorchLoader(loader, pin_memory=True)",
    "persistent_workers": "nothing: worker threads live as long as the loader",
    "epochs": "nothing: the loader is endless; loader.steps_per_epoch converts epochs to steps",
    "num_epochs": "nothing: the loader is endless; loader.steps_per_epoch converts epochs to steps",
    "buffer_size": "prefetch=",
    "start": "start_step=",
    "step": "start_step=",
}
_PARAMETERS: Final = (
    "streams", "batch_size", "transform", "mode", "seed", "start_step", "prefetch", "workers",
    "shard", "reuse_buffers",
)


def _refuse_keywords(unknown: Mapping[str, object]) -> None:
    """TypeError for keywords DataLoader does not take, naming the loaderx equivalent."""
    for name in unknown:
        hint = _KEYWORD_HINTS.get(name)
        if hint is None:
            close = difflib.get_close_matches(name, _PARAMETERS, n=1)
            hint = f"{close[0]}=" if close else ""
        text = f"DataLoader got an unexpected keyword argument {name!r}"
        if hint:
            text += f"; use {hint}"
        raise TypeError(text)


def _references(slots: list[npt.NDArray[Any] | None], slot: int) -> int:
    """How many references the array in slots[slot] has, counted the same way every time."""
    return sys.getrefcount(slots[slot])


# What _references reports when the list slot holds the only reference (measured, not assumed:
# the interpreter and the compiled module keep different temporaries).
_REFERENCES_ALONE: Final = _references([np.empty(1, dtype=np.uint8)], 0)


def _released(slots: list[npt.NDArray[Any] | None], slot: int) -> bool:
    """True when slots[slot] holds an array that nothing else references, strongly or weakly.

    Then no one can observe the array any more (a view, a memoryview, a tensor made by
    torch.from_numpy all reference it), so writing into it is as safe as handing out new memory.
    """
    if slots[slot] is None:
        return False
    return _references(slots, slot) == _REFERENCES_ALONE and weakref.getweakrefcount(
        slots[slot]
    ) == 0


def _streams_call(
    datasets: list[DenseDataset], batch_size: int, ring_size: int
) -> StreamsCall | None:
    """The one-call gather of every stream (_StepMaker._together) when there are 2 to
    GATHER_STREAMS_MAX streams and each reads one store (no shards); else None."""
    if not 2 <= len(datasets) <= GATHER_STREAMS_MAX:
        return None
    stores: list[NativeCalls] = []
    for dataset in datasets:
        store = dataset._store
        if type(store) is not Zrecord:
            return None
        stores.append(store)
    record_sizes = [dataset.record_size for dataset in datasets]
    return StreamsCall(stores, record_sizes, batch_size, ring_size)


class _StepMaker:
    """Computes one step's batch; shared by all worker threads (and the consumer's, which
    makes steps itself while it would otherwise wait).

    The worker threads reference this object, never the DataLoader, so a loader the user drops
    can be collected (and its finaliser can stop the threads).

    Output arrays (and index arrays) live in a ring of prefetch + 1 slots per stream. A step
    writes into the lowest-numbered free slot (_free_slot): one that holds no step, or a step
    the consumer no longer has (_passed_unseen, _held_until_released): with reuse_buffers,
    once it has come back to next() for a later step; by default, once it has taken the step
    after it, or has taken it and dropped every reference to its arrays. A step being made or
    made and not yet taken holds its slot. Lowest first, so that a consumer making its own steps
    alternates between two slots whose arrays are warm in the cache instead of cycling through
    all of them (see loaderx._loading.prefetch, "Workers stand aside"). The prefetcher never lets a
    step start more than prefetch steps ahead of the consumer, so at most prefetch slots are
    held and one is free, with one exception: an interrupt (Ctrl-C on the consumer's thread,
    which makes steps too) between claiming a slot and noting which step claimed it, after
    which that step, made again, takes a second slot. Then the ring grows by a slot rather
    than fail: the state itself (_written) changes by single stores, so nothing else is lost.
    A free slot's previous arrays are reused when they have been
    released (see _released), or always with reuse_buffers; otherwise new arrays replace them
    and the old ones stay with whoever holds them.
    """

    def __init__(
        self,
        sampler: Sampler,
        streams: Mapping[str, DenseDataset],
        batch_size: int,
        transform: Transform | None,
        ring_size: int,
        reuse_buffers: bool,
        first_step: int,
    ) -> None:
        self._sampler: Sampler = sampler
        self._batch_size: int = batch_size
        self._names: list[str] = list(streams)
        self._datasets: list[DenseDataset] = [streams[name] for name in self._names]
        self._shapes: list[tuple[int, ...]] = [
            (batch_size, *streams[name].item_shape) for name in self._names
        ]
        self._dtypes: list[np.dtype[Any]] = [streams[name].dtype for name in self._names]
        # Typed loosely on purpose: the result is checked below with a clear message.
        self._transform: Callable[[dict[str, npt.NDArray[Any]]], object] | None = transform
        self._reuse_buffers: bool = reuse_buffers
        # Indices never leave make(), so a free slot's can always be reused.
        self._indices: list[npt.NDArray[np.int64]] = [
            np.empty(batch_size, dtype=_INT64) for _ in range(ring_size)
        ]
        # Each index array's address for the sampler's unchecked fill: the arrays are made
        # here (and by _grow) as it requires, never replaced, and live as long as this maker.
        self._fill: Callable[[int, int], int] = sampler.filler()
        self._index_addresses: list[int] = [address(indices) for indices in self._indices]
        self._outputs: list[list[npt.NDArray[Any] | None]] = [
            [None] * ring_size for _ in self._names
        ]
        # All streams in one native call when each reads one store (loaderx._native.calls
        # .StreamsCall: the small streams then copy beside the large one); None otherwise, or
        # once a dataset's store changed (a rollover to shards).
        self._together: StreamsCall | None = _streams_call(self._datasets, batch_size, ring_size)
        # Guarded by _lock: the step last made (or being made) in each slot, -1 for none; the
        # ring's size is its length. And which slot each such step took, a hint that an
        # interrupt may leave out or stale (checked against _written before use).
        self._lock: threading.Lock = threading.Lock()
        self._written: list[int] = [-1] * ring_size
        self._slot_of_step: dict[int, int] = {}
        # Where the consumer stands: the prefetcher's next_step, once the DataLoader has given
        # the prefetcher (which starts its workers as it is made). Until then first_step, which
        # the consumer cannot have passed: it has no loader to call yet.
        self._first_step: int = first_step
        self._prefetcher: Prefetcher[Batch] | None = None

    def follow(self, prefetcher: Prefetcher[Batch]) -> None:
        self._prefetcher = prefetcher

    def indices(self, step: SupportsIndex) -> npt.NDArray[np.int64]:
        out = np.empty(self._batch_size, dtype=_INT64)
        self._sampler.fill(step, out)
        return out

    def _free_slot(self, step: int) -> tuple[int, bool]:
        """Claims the lowest-numbered free slot for `step` (class docstring); a step made again
        (after an interrupt stopped its consumer mid-step: loaderx._loading.prefetch, "Interrupts")
        takes back the slot it had. Also returns whether the slot's arrays were just found
        released (_released), which nothing can undo: only this maker references them."""
        with self._lock:
            written = self._written
            slot = self._slot_of_step.get(step, -1)
            if 0 <= slot < len(written) and written[slot] == step:
                return slot, False
            # Read under this lock, after every slot claimed before, so at most prefetch of
            # the steps held can be ones the consumer has not passed.
            prefetcher = self._prefetcher
            first_step = self._first_step
            taken, asked = (first_step, first_step) if prefetcher is None else prefetcher.position()
            slot = 0
            released = False
            while slot < len(written):
                held = written[slot]
                if held < 0 or self._passed_unseen(held, taken, asked):
                    break
                if self._held_until_released(held, taken) and self._slot_released(slot):
                    released = True
                    break
                slot += 1
            if slot == len(written):
                self._grow()
            if written[slot] >= 0 and written[slot] in self._slot_of_step:
                del self._slot_of_step[written[slot]]
            written[slot] = step  # the claim: one store
            self._slot_of_step[step] = slot
            return slot, released

    def _grow(self) -> None:
        """Adds a slot at the end of the ring (class docstring: only after an interrupt); the
        arrays first and the slot's state last, so an interrupt in between only leaves spares."""
        slot = len(self._written)
        # Each list grows in a loop of its own, so that a _grow an interrupt cut short is
        # completed by the next one.
        while len(self._indices) <= slot:
            self._indices.append(np.empty(self._batch_size, dtype=_INT64))
        while len(self._index_addresses) < len(self._indices):
            self._index_addresses.append(address(self._indices[len(self._index_addresses)]))
        together = self._together
        while together is not None and together.slots <= slot:
            together.grow()
        for slots in self._outputs:
            while len(slots) <= slot:
                slots.append(None)
        self._written.append(-1)

    def _passed_unseen(self, step: int, taken: int, asked: int) -> bool:
        """Whether the consumer no longer has `step` (class docstring) by its position alone,
        with its next step `taken` and the step it last came to next() for `asked`. Default:
        once it took the next step the slot is free, its arrays replaced (_output) if it kept
        them."""
        if self._reuse_buffers:
            return step < asked
        return step + 1 < taken

    def _held_until_released(self, step: int, taken: int) -> bool:
        """Whether `step` is the consumer's last taken one, which by default it no longer has
        once it dropped every reference to the step's arrays (_slot_released)."""
        return not self._reuse_buffers and step + 1 == taken

    def _slot_released(self, slot: int) -> bool:
        for slots in self._outputs:
            if not _released(slots, slot):
                return False
        return True

    def _output(self, stream: int, slot: int, released: bool) -> npt.NDArray[Any]:
        """The array `stream` of `slot` writes into: the slot's own when no one else can see
        it (`released` when _free_slot just found so), else a new one."""
        slots = self._outputs[stream]
        if self._reuse_buffers or released or _released(slots, slot):
            reused = slots[slot]
            if reused is not None:
                return reused
        fresh = np.empty(self._shapes[stream], dtype=self._dtypes[stream])
        together = self._together
        if together is not None:
            together.set_out(slot, stream, fresh)
        slots[slot] = fresh
        return fresh

    def make(self, step: int) -> Batch:
        slot, released = self._free_slot(step)
        batch = self._gather(step, slot, released)
        transform = self._transform
        if transform is None:
            return batch
        result: object = transform(batch)
        if not isinstance(result, dict):
            raise TypeError(
                f"the transform must return a batch dict, it returned {type(result).__name__}"
            )
        return result

    def _gather(self, step: int, slot: int, released: bool) -> dict[str, npt.NDArray[Any]]:
        indices = self._indices[slot]
        if self._fill(step, self._index_addresses[slot]) != 0:
            self._sampler.fill(step, indices)  # raises the sampler's error
        names = self._names
        batch: dict[str, npt.NDArray[Any]] = {}
        for i in range(len(names)):
            batch[names[i]] = self._output(i, slot, released)
        if not self._gather_together(slot):
            datasets = self._datasets
            for i in range(len(names)):
                datasets[i].gather_into(indices, batch[names[i]])
        return batch

    def _gather_together(self, slot: int) -> bool:
        """Every stream of `slot` in one native call (self._together): True once done; False
        when that call does not apply or failed, and the caller gathers stream by stream."""
        together = self._together
        if together is None:
            return False
        datasets = self._datasets
        owners = together.owners
        for i in range(len(datasets)):
            if datasets[i]._store is not owners[i]:
                self._together = None  # the store changed for good (a rollover)
                return False
        return together.gather(slot, self._index_addresses[slot])


class DataLoader(LoaderShell):
    """Endless iteration over dict batches {name: (batch_size, *item_shape) array}.

    streams: name -> DenseDataset, all of the same length; every stream is gathered at the same
    indices, so record i lines up across them. mode, seed and shard=(index, count) go to the
    Sampler (sequential, iid or cyclic; with a shard, batch_size is this host's part of a global
    batch of batch_size * count). transform runs on the worker threads. prefetch bounds how
    many steps are computed ahead of the consumer; workers is the thread count (at most
    prefetch are used; default min(4, CPUs), one fewer without a transform, when the consumer
    makes steps itself while it would otherwise wait). reuse_buffers trades the batch lifetime
    for fewer allocations (module docstring).

    An exception raised while making a step (a read or the transform) is raised by the next()
    that would have returned that step, with its original traceback; the step counts as taken,
    so iterating again continues with the following one. close() (or leaving a with block)
    stops and joins the threads, after which iteration ends (StopIteration); it does not close
    the datasets, which stay the caller's. A loader dropped without close() is closed when it
    is collected, and at interpreter exit.
    """

    def __init__(
        self,
        streams: Mapping[str, DenseDataset],
        batch_size: SupportsIndex = BATCH_SIZE_DEFAULT,
        transform: Transform | None = None,
        mode: Mode = "cyclic",
        seed: SupportsIndex = 0,
        start_step: SupportsIndex = 0,
        prefetch: SupportsIndex = PREFETCH_DEFAULT,
        workers: SupportsIndex | None = None,
        shard: Sequence[SupportsIndex] | None = None,
        reuse_buffers: bool = False,
        **unknown: Never,
    ) -> None:
        _refuse_keywords(unknown)
        length = _check_streams(streams)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, not {type(transform).__name__}")
        # Without a transform a step is native reads only, which the consumer may make itself
        # while it would wait (loaderx._loading.prefetch); a user's transform runs on workers only.
        self._consumer_helps: bool = transform is None
        depth = check_count("prefetch", prefetch, DEPTH_MAX)
        threads = (
            default_workers(self._consumer_helps)
            if workers is None
            else check_count("workers", workers, WORKERS_MAX)
        )
        self._length: int = length
        # The sampler checks and converts batch_size, seed and shard (naming each).
        self.sampler: Sampler = Sampler(length, batch_size, mode=mode, seed=seed, shard=shard)
        first_step = as_int("start_step", start_step, got="got")
        self.streams: dict[str, DenseDataset] = dict(streams)
        self.batch_size: int = self.sampler.batch_size
        self.mode: Mode = mode
        self.seed: int = self.sampler.seed
        self.shard: tuple[int, int] | None = None if shard is None else self.sampler.shard
        self.prefetch: int = depth
        self.workers: int = threads
        self.reuse_buffers: bool = reuse_buffers
        self._transform: Transform | None = transform
        self._maker: _StepMaker = _StepMaker(
            self.sampler, self.streams, self.batch_size, transform, depth + 1, reuse_buffers,
            first_step,
        )
        # Only the loader holds its maker: the threads call it through a weak reference, so a
        # transform that references the loader's owner does not keep the loader alive.
        self._produce: partial[Batch] = partial(self._maker.make)
        self._prefetcher = Prefetcher(
            WeakProducer(self._produce), first_step, depth, threads, name="loaderx-prefetch",
            consumer_helps=self._consumer_helps,
        )
        self._maker.follow(self._prefetcher)
        # Native classes take no weak references, so the finaliser watches a set that only this
        # loader holds: when the loader is collected the set goes too, and the threads stop.
        self._lifetime: set[int] = set()
        self._finalizer = close_when_collected(self._lifetime, self._prefetcher)

    def _restart(self, seed: int, step: int) -> None:
        """Stops the threads and starts over at (seed, step) (what load_state_dict does). The
        new sampler is made first: a seed it refuses leaves this loader running as it was."""
        sampler = Sampler(
            self._length, self.batch_size, mode=self.mode, seed=seed, shard=self.shard
        )
        self.close()
        self.sampler = sampler
        self.seed = seed
        self._maker = _StepMaker(
            sampler, self.streams, self.batch_size, self._transform, self.prefetch + 1,
            self.reuse_buffers, step,
        )
        self._produce = partial(self._maker.make)
        self._prefetcher = Prefetcher(
            WeakProducer(self._produce), step, self.prefetch, self.workers,
            name="loaderx-prefetch", consumer_helps=self._consumer_helps,
        )
        self._maker.follow(self._prefetcher)
        self._lifetime = set()
        self._finalizer = close_when_collected(self._lifetime, self._prefetcher)

    def _checkpoint_seed(self) -> int:
        return self.seed

    def fingerprint(self) -> dict[str, Any]:
        """What the index stream depends on besides (seed, step); see
        loaderx._loading.checkpoint."""
        return {
            # The length sampled from (fixed when the loader was made), not the datasets'
            # lengths now: a dataset that grew since would otherwise pass for the one sampled.
            "lengths": {name: self._length for name in self.streams},
            "global_batch_size": self.sampler.global_batch_size,
            "mode": self.mode,
        }

    @property
    def steps_per_epoch(self) -> int:
        """Steps per pass over the data: records // global batch size (at least 1).

        In cyclic mode this is exactly one cycle (every record once, length mod global batch
        left out, a different set each cycle); in sequential and iid mode it is the same count.
        """
        return max(1, self._length // self.sampler.global_batch_size)

    def __len__(self) -> int:
        raise TypeError(
            "a loaderx DataLoader is endless and has no len(); use loader.steps_per_epoch "
            f"({self.steps_per_epoch} steps here) to count steps per pass over the data"
        )

    @property
    def length(self) -> int:
        """The number of records in every stream."""
        return self._length

    def indices(self, step: SupportsIndex) -> npt.NDArray[np.int64]:
        """The record indices of any step's batch (what every stream is gathered at)."""
        return self._maker.indices(step)

    def __repr__(self) -> str:
        names = ", ".join(self.streams)
        return (
            f"DataLoader(streams=[{names}], batch_size={self.batch_size}, mode={self.mode!r}, "
            f"seed={self.seed}, step={self.step}, prefetch={self.prefetch}, workers={self.workers})"
        )
