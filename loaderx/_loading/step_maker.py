"""The step maker of a DataLoader: one step's batch gathered into a ring of reusable arrays.

Shared by the loader's worker threads and its consumer's thread (loaderx._loading.prefetch);
it decides which slot of the ring a step writes into, when a slot's arrays may be written again,
and gathers every stream at the step's indices (in one native call when it can). Ragged streams
(loaderx._loading.ragged_batch) keep their own buffers per slot under the same rules.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final, SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from loaderx._data.dataset_base import DatasetBase
from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._loading.loader_shell import Batch
from loaderx._loading.prefetch import Prefetcher
from loaderx._loading.ragged_batch import RaggedStream, longest_rows
from loaderx._loading.ragged_layout import Layout
from loaderx._loading.sampler import Mode, Sampler
from loaderx._native.calls import NativeCalls, StreamsCall, address
from loaderx._native.library import GATHER_STREAMS_MAX
from loaderx._os.kept_locks import release_kept
from loaderx._store.zrecord import Zrecord

Transform = Callable[[dict[str, npt.NDArray[Any]]], Batch]

_INT64: Final = np.dtype(np.int64)


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
    """The one-call gather of every stream (StepMaker._together) when there are 2 to
    GATHER_STREAMS_MAX streams and each reads one store (no shards); else None."""
    if not 2 <= len(datasets) <= GATHER_STREAMS_MAX:
        return None
    stores: list[NativeCalls] = []
    for dataset in datasets:
        store = dataset._store
        if type(store) is not Zrecord or dataset._remote is not None:
            return None  # a remote dataset's reads fetch first (DenseDataset.gather_into)
        stores.append(store)
    record_sizes = [dataset.record_size for dataset in datasets]
    return StreamsCall(stores, record_sizes, batch_size, ring_size)


class StepMaker:
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
        streams: Mapping[str, DatasetBase],
        batch_size: int,
        transform: Transform | None,
        ring_size: int,
        reuse_buffers: bool,
        first_step: int,
        layouts: Mapping[str, Layout] | None = None,
    ) -> None:
        self._sampler: Sampler = sampler
        self._batch_size: int = batch_size
        # The dense streams; the ragged ones are RaggedStreams (layouts: packed or padded).
        self._names: list[str] = []
        self._datasets: list[DenseDataset] = []
        self._ragged: list[RaggedStream] = []
        # Every stream in the caller's order, for the batch's key order: (name, dense position)
        # for a dense stream, (name, -1 - ragged position) for a ragged one.
        self._plan: list[tuple[str, int]] = []
        for name, dataset in streams.items():
            if isinstance(dataset, RaggedDataset):
                layout = None if layouts is None else layouts.get(name)
                self._plan.append((name, -1 - len(self._ragged)))
                self._ragged.append(RaggedStream(name, dataset, layout, batch_size, ring_size))
            else:
                assert isinstance(dataset, DenseDataset)
                self._plan.append((name, len(self._names)))
                self._names.append(name)
                self._datasets.append(dataset)
        # With shard=, a padded stream whose length depends on the batch pads to the longest
        # record of the whole global batch (loaderx._loading.ragged_batch): its sampler.
        self._global: Sampler | None = None
        if sampler.shard_count > 1 and any(stream.picks_length for stream in self._ragged):
            self._global = Sampler(sampler.length, sampler.global_batch_size,
                                   mode=cast(Mode, sampler.mode), seed=sampler.seed)
        self._shapes: list[tuple[int, ...]] = [
            (batch_size, *dataset.item_shape) for dataset in self._datasets
        ]
        self._dtypes: list[np.dtype[Any]] = [dataset.dtype for dataset in self._datasets]
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
        # interrupt may leave out or stale (checked against _written before use). Re-entrant
        # only so that _free_slot can give back a level an interrupt kept (release_kept).
        self._lock: threading.RLock = threading.RLock()
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
        try:
            with self._lock:
                written = self._written
                slot = self._slot_of_step.get(step, -1)
                if 0 <= slot < len(written) and written[slot] == step:
                    return slot, False
                # Read under this lock, after every slot claimed before, so at most prefetch of
                # the steps held can be ones the consumer has not passed.
                prefetcher = self._prefetcher
                first_step = self._first_step
                taken, asked = (
                    (first_step, first_step) if prefetcher is None else prefetcher.position()
                )
                slot = 0
                released = False
                while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                    if slot >= len(written):
                        break
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
        except BaseException:
            # No thread holds the lock outside this block, but an interrupt can leave it held
            # on the way in (loaderx._os.kept_locks): then no step could be made again.
            release_kept(self._lock)
            raise

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
        for stream in self._ragged:
            while len(stream.outputs[0]) <= slot:
                stream.grow()
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
        for stream in self._ragged:
            if not self._ragged_released(stream, slot):
                return False
        return True

    def _ragged_released(self, stream: RaggedStream, slot: int) -> bool:
        """Whether nothing but the ring references the arrays `stream` handed out of `slot`."""
        for slots in stream.outputs:
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
        if self._ragged:
            self._gather_ragged(step, indices, slot, released, batch)
        else:
            for i in range(len(names)):
                batch[names[i]] = self._output(i, slot, released)
        if not self._gather_together(slot):
            datasets = self._datasets
            for i in range(len(names)):
                datasets[i].gather_into(indices, batch[names[i]])
        return batch

    def _gather_ragged(self, step: int, indices: npt.NDArray[np.int64], slot: int,
                       released: bool, batch: dict[str, npt.NDArray[Any]]) -> None:
        """The dense streams' arrays of `slot` into batch and every ragged stream gathered, in
        the streams' order (the dense ones are gathered after, by the caller)."""
        reuse = self._reuse_buffers or released
        everyone: npt.NDArray[np.int64] | None = None  # the global batch's indices, when needed
        for name, position in self._plan:
            if position >= 0:
                batch[name] = self._output(position, slot, released)
                continue
            stream = self._ragged[-1 - position]
            parts = [(stream.dataset, indices)]
            longest = -1
            if self._global is not None and stream.picks_length:
                if everyone is None:
                    everyone = self._global.batch(step)
                longest = longest_rows(stream.dataset, everyone)
            stream.gather(parts, slot, reuse or self._ragged_released(stream, slot), batch,
                          longest)

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


__all__ = ["StepMaker", "Transform"]
