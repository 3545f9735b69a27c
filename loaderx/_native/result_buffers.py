"""The pool of recycled memory behind big read results (ds[idx] of 32 MiB and more).

A fresh array of 32 MiB or more is a new anonymous mapping for glibc (its dynamic mmap threshold
stops growing at 32 MiB on 64-bit), so the kernel faults in and zeroes every page of it, which
costs more than the gather that fills it. Below that size glibc already recycles freed memory.
Here a result of at least `min_bytes` is carved from a block of memory a previous result no
longer uses, already faulted in. The result is an ordinary writable C-contiguous ndarray; its
block comes back to the pool when the last array that shares its memory is gone.

How a block is known to be unused. The result is `anchor.reshape(shape)`, where `anchor` is a
one-dimensional array that np.frombuffer made over a memoryview of the block. NumPy stops
collapsing view bases at the first base that is not an ndarray, so every view, slice, reshape or
buffer export of the result keeps `anchor` alive; a weak reference to `anchor` says when the last
one is gone. A memoryview taken of the memoryview itself (`result.base.base`) escapes that, but
it keeps the block referenced, so a block is only ever handed out again when the pool holds its
only reference (counted with sys.getrefcount, as the DataLoader counts its buffers).

Concurrency. One lock guards the free blocks. The weak-reference callback can run anywhere a
reference is dropped, even inside this module while that lock is held (a garbage collection), so
it never waits for the lock: it queues the block and settles the queue only if it gets the lock
at once; whoever holds the lock settles the queue after releasing it. The lock is re-entrant
only so that a level an interrupt kept can be given back (loaderx._os.kept_locks): a
KeyboardInterrupt landing just after a callback's acquire(blocking=False) returned left the lock
held, and the next big read waited for it forever (a loop of ds[idx] interrupted by SIGALRM hung
on 3.11 and 3.13). The callback still never nests inside a holder on its own thread. In a forked
child every
pool (POOL and any other ResultBufferPool) starts empty with a new lock (a thread of the parent
may have held the old one).

This module stays interpreted (see build.py's MYPYC_MODULES): weak-reference callbacks and
reference counts are what it is about.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import deque
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from loaderx._os.kept_locks import held, release_kept

__all__ = [
    "Limits",
    "POOL",
    "ResultBufferPool",
    "configure",
    "empty_bytes",
    "release_buffers",
    "stats",
]

MIB: Final = 1 << 20
# glibc's largest dynamic mmap threshold on 64-bit: smaller frees are recycled by malloc.
MIN_BYTES_DEFAULT: Final = 32 * MIB
PER_SIZE_DEFAULT: Final = 2
MAX_BYTES_DEFAULT: Final = 512 * MIB
# Sizes round up to 8 classes per power of two (at most 12.5% more than asked), so results of
# nearly the same size (ragged reads) share blocks.
_CLASSES_PER_DOUBLING_LOG2: Final = 3
_UINT8: Final = np.dtype(np.uint8)


class Limits(NamedTuple):
    """What the pool keeps: results of min_bytes or more are pooled; at most per_size free
    blocks of one size class and max_bytes of free blocks in all are retained."""

    min_bytes: int
    per_size: int
    max_bytes: int


def size_class(nbytes: int) -> int:
    """nbytes rounded up to its size class (8 classes per power of two)."""
    shift = max(0, nbytes.bit_length() - 1 - _CLASSES_PER_DOUBLING_LOG2)
    return -(-nbytes >> shift) << shift


def _check_limits(min_bytes: int | None, per_size: int | None, max_bytes: int | None) -> None:
    """ValueError naming the first limit that is not an int >= 0 (None: unchanged)."""
    for name, value in (("min_bytes", min_bytes), ("per_size", per_size),
                        ("max_bytes", max_bytes)):
        if value is not None and (type(value) is not int or value < 0):
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")


def _references(blocks: list[npt.NDArray[np.uint8]], position: int) -> int:
    """How many references blocks[position] has, counted the same way every time."""
    return sys.getrefcount(blocks[position])


# What _references reports when the list holds the only reference (measured, not assumed).
_REFERENCES_ALONE: Final = _references([np.empty(1, dtype=np.uint8)], 0)


class ResultBufferPool:
    """Free blocks of memory for big results, and the results that hold blocks now."""

    min_bytes: int
    per_size: int
    max_bytes: int
    _lock: threading.RLock
    _free: list[npt.NDArray[np.uint8]]  # oldest first
    _free_bytes: int
    _returned: deque[npt.NDArray[np.uint8]]
    _leased: dict[int, tuple[weakref.ref[npt.NDArray[Any]], npt.NDArray[np.uint8]]]
    _reused: int

    def __init__(
        self,
        min_bytes: int = MIN_BYTES_DEFAULT,
        per_size: int = PER_SIZE_DEFAULT,
        max_bytes: int = MAX_BYTES_DEFAULT,
    ) -> None:
        _check_limits(min_bytes, per_size, max_bytes)
        self.min_bytes = min_bytes
        self.per_size = per_size
        self.max_bytes = max_bytes
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        """An empty pool. Leases dropped here never call back: their weak references go."""
        self._lock = threading.RLock()
        self._free = []
        self._free_bytes = 0
        self._returned = deque()
        self._leased = {}
        self._reused = 0

    def empty(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], nbytes: int
    ) -> npt.NDArray[Any]:
        """An uninitialised C-contiguous array of shape and dtype (nbytes = its size), on
        recycled memory when it is big enough. The caller must overwrite every byte of it."""
        size = size_class(nbytes)
        if nbytes < self.min_bytes or nbytes == 0 or size > self.max_bytes:
            return np.empty(shape, dtype=dtype)
        try:
            with self._lock:
                block = self._take(size)
        except BaseException:
            release_kept(self._lock)  # none is held here by design (kept_locks)
            raise
        self._settle()
        if block is None:
            block = np.empty(size, dtype=np.uint8)
        anchor = np.frombuffer(block.data[:nbytes], dtype=dtype)
        lease = weakref.ref(anchor, self._on_result_freed)
        self._leased[id(lease)] = (lease, block)
        return anchor.reshape(shape)

    def _take(self, size: int) -> npt.NDArray[np.uint8] | None:
        """The newest free block of that size that nothing else references (lock held).
        Blocks of that size still referenced (a memoryview that escaped) are forgotten."""
        self._absorb()
        free = self._free
        position = len(free) - 1
        while position >= 0:
            if free[position].nbytes == size:
                if _references(free, position) == _REFERENCES_ALONE:
                    self._reused += 1
                    return self._remove(position)
                self._remove(position)
            position -= 1
        return None

    def _remove(self, position: int) -> npt.NDArray[np.uint8]:
        block = self._free.pop(position)
        self._free_bytes -= block.nbytes
        return block

    def _on_result_freed(self, lease: weakref.ref[npt.NDArray[Any]]) -> None:
        """The weak-reference callback: never blocks (see the module docstring)."""
        entry = self._leased.pop(id(lease), None)
        if entry is None:
            return
        self._returned.append(entry[1])
        del entry  # a reference left here would make _take pass the block over
        self._settle()

    def _settle(self) -> None:
        """Moves queued blocks to the free list if the lock is free now; a holder of the lock
        settles after releasing it, so nothing stays queued."""
        lock = self._lock
        while self._returned:
            # A holder on this thread (a collection inside _take) settles once it releases:
            # an _absorb nested in another would break the one it interrupts.
            if held(lock):
                return
            try:
                if not lock.acquire(blocking=False):
                    return
                try:
                    self._absorb()
                finally:
                    lock.release()
            except BaseException:
                # This thread held no level at the check above; what it holds now, an
                # interrupt kept (landing as acquire returned, before the inner try).
                release_kept(lock)
                raise

    def _absorb(self) -> None:
        """Queued blocks join the free list (lock held), the oldest free blocks leaving to
        stay within per_size and max_bytes."""
        returned = self._returned
        while returned:
            block = returned.popleft()
            size = block.nbytes
            if self.per_size == 0 or size > self.max_bytes:
                continue  # dropped: freed here
            same = [i for i, free in enumerate(self._free) if free.nbytes == size]
            if len(same) >= self.per_size:
                self._remove(same[0])
            while self._free_bytes + size > self.max_bytes:
                self._remove(0)
            self._free.append(block)
            self._free_bytes += size

    def release(self) -> int:
        """Frees every free block the pool keeps; returns how many bytes that was. A result
        still alive keeps its block, which comes back to the pool when the result is gone."""
        try:
            with self._lock:
                self._absorb()
                released = self._free_bytes
                self._free = []
                self._free_bytes = 0
        except BaseException:
            release_kept(self._lock)
            raise
        self._settle()
        return released

    def configure(
        self,
        min_bytes: int | None = None,
        per_size: int | None = None,
        max_bytes: int | None = None,
    ) -> Limits:
        """Sets the given limits (None keeps one) and returns the previous ones. Free blocks
        over the new limits are freed."""
        _check_limits(min_bytes, per_size, max_bytes)
        try:
            with self._lock:
                previous = Limits(self.min_bytes, self.per_size, self.max_bytes)
                self.min_bytes = previous.min_bytes if min_bytes is None else min_bytes
                self.per_size = previous.per_size if per_size is None else per_size
                self.max_bytes = previous.max_bytes if max_bytes is None else max_bytes
                kept = self._free
                self._free = []
                self._free_bytes = 0
                self._returned.extend(kept)
                self._absorb()
        except BaseException:
            release_kept(self._lock)
            raise
        self._settle()
        return previous

    def stats(self) -> dict[str, int]:
        """free_buffers and free_bytes (memory kept for reuse), leased (pooled results alive),
        reused (results served from recycled memory since the start) and the limits."""
        try:
            with self._lock:
                self._absorb()
                found = {
                    "free_buffers": len(self._free),
                    "free_bytes": self._free_bytes,
                    "leased": len(self._leased),
                    "reused": self._reused,
                    "min_bytes": self.min_bytes,
                    "per_size": self.per_size,
                    "max_bytes": self.max_bytes,
                }
        except BaseException:
            release_kept(self._lock)
            raise
        self._settle()
        return found

    def _after_fork_in_child(self) -> None:
        self._reset()


# Every pool, for the fork handler: one a forked child inherited with its lock held by a parent
# thread would hang its first big read.
_POOLS: Final[weakref.WeakSet[ResultBufferPool]] = weakref.WeakSet()


def _reset_pools_in_child() -> None:
    for pool in list(_POOLS):
        pool._after_fork_in_child()


# The pool every dataset read uses.
POOL: Final = ResultBufferPool()


def empty_bytes(nbytes: int) -> npt.NDArray[np.uint8]:
    """An uninitialised uint8 array of nbytes for a read to fill completely (a ragged gather's
    buffer), on recycled memory when it is big enough."""
    return POOL.empty((nbytes,), _UINT8, nbytes)


def release_buffers() -> int:
    """Frees the memory loaderx keeps to recycle big read results; returns the bytes freed."""
    return POOL.release()


def configure(
    min_bytes: int | None = None, per_size: int | None = None, max_bytes: int | None = None
) -> Limits:
    """Changes the pool's limits (see Limits) and returns the previous ones. max_bytes=0 turns
    recycling off. min_bytes below the default is meant for tests."""
    return POOL.configure(min_bytes, per_size, max_bytes)


def stats() -> dict[str, int]:
    """The pool's counters (see ResultBufferPool.stats)."""
    return POOL.stats()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pools_in_child)
