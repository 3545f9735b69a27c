"""Which cached records to drop when the cache is full, and which blocks that frees.

Victims follow Belady's rule, which is exact here because the loader knows its future: a
record no known future step reads goes first, then the one whose next read is furthest away.
A pinned record (read by a step the look-ahead has fetched, or by a gather in progress) is
never a victim. Ties go in index order, which keeps neighbours together so that whole blocks
come free.

A record's bytes lie in a sparse chunk file. Dropping it punches its blocks out of the file,
except a block it shares with a record that stays: that block holds the other record's bytes.
The cache counts each present record as the blocks it touches (record_map.StoreRecords.blocks),
so what the files hold on disk never exceeds the count.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._remote.record_map import BLOCK, StoreRecords
from loaderx.errors import RemoteError

_NEVER: Final = np.iinfo(np.int64).max


def next_uses(
    candidates: npt.NDArray[np.int64],
    future_indices: npt.NDArray[np.int64],
    future_steps: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """For each candidate (global index), the first future step that reads it, or _NEVER.
    future_indices[k] is read by step future_steps[k]; steps need not be sorted."""
    uses = np.full(len(candidates), _NEVER, dtype=np.int64)
    if len(future_indices) == 0 or len(candidates) == 0:
        return uses
    order = np.lexsort((future_steps, future_indices))
    keys = future_indices[order]
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    unique_keys = keys[first]
    unique_steps = future_steps[order][first]
    at = np.searchsorted(unique_keys, candidates)
    inside = at < len(unique_keys)
    found = np.zeros(len(candidates), dtype=bool)
    found[inside] = unique_keys[at[inside]] == candidates[inside]
    uses[found] = unique_steps[at[found]]
    return uses


def choose_victims(
    candidates: npt.NDArray[np.int64],
    costs: npt.NDArray[np.int64],
    uses: npt.NDArray[np.int64],
    to_free: int,
) -> npt.NDArray[np.int64]:
    """The fewest candidates, furthest next use first (index order among equals), whose costs
    add up to at least to_free (all of them when they do not)."""
    order = np.lexsort((candidates, -uses))
    freed = np.cumsum(costs[order])
    enough = int(np.searchsorted(freed, to_free, side="left")) + 1
    return candidates[order[:enough]]


class StoreHoles:
    """One store's records in address order: the blocks that dropping some of them frees, and
    the records a fetched byte range holds."""

    def __init__(self, records: StoreRecords) -> None:
        entries = records.entries
        # One address space per store: chunk number in the high bits, offset in the low ones
        # (a chunk is at most 4 GiB). Live records never overlap, so sorted by start they are
        # sorted by end too.
        self._starts = (entries["chunk"].astype(np.int64) << 32) | entries["offset"].astype(np.int64)
        self._ends = self._starts + entries["stored"].astype(np.int64)
        self._order = np.argsort(self._starts, kind="stable")
        self._sorted_starts = self._starts[self._order]
        self._sorted_ends = self._ends[self._order]

    def within(self, chunk: int, start: int, end: int) -> npt.NDArray[np.int64]:
        """The local indices of the records lying wholly in bytes [start, end) of a chunk."""
        base = chunk << 32
        first = int(np.searchsorted(self._sorted_starts, base + start, side="left"))
        past = int(np.searchsorted(self._sorted_ends, base + end, side="right"))
        return self._order[first:past].astype(np.int64) if past > first else np.empty(0, np.int64)

    def freed(
        self, victims: npt.NDArray[np.int64], present_after: npt.NDArray[np.uint8]
    ) -> list[tuple[int, int, int]]:
        """(chunk, start, end) ranges to punch for victims (local indices), given which records
        are present once they are gone."""
        if len(victims) == 0:
            return []
        present = present_after[self._order].astype(np.int64)
        running = np.concatenate(([0], np.cumsum(present)))
        low = self._starts[victims] // BLOCK * BLOCK
        high = (self._ends[victims] + BLOCK - 1) // BLOCK * BLOCK
        low = np.where(self._kept_in(low, running), low + BLOCK, low)
        high = np.where(self._kept_in(high - BLOCK, running), high - BLOCK, high)
        ranges: list[tuple[int, int, int]] = []
        for start, end in zip(low.tolist(), high.tolist()):
            if start < end:
                chunk = start >> 32
                ranges.append((chunk, start & 0xFFFFFFFF, (end - (chunk << 32))))
        return ranges

    def _kept_in(self, block: npt.NDArray[np.int64], running: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Whether a present record touches the block starting at each address."""
        first = np.searchsorted(self._sorted_ends, block, side="right")
        past = np.searchsorted(self._sorted_starts, block + BLOCK, side="left")
        return (running[past] - running[first]) > 0


_FALLOC_FL_KEEP_SIZE: Final = 0x01
_FALLOC_FL_PUNCH_HOLE: Final = 0x02
_libc: ctypes.CDLL | None = None


def punch_hole(fd: int, start: int, end: int, path: str) -> None:
    """Gives the blocks of [start, end) of an open file back to the filesystem (they read as
    zeros after); the file keeps its size. Linux's fallocate(PUNCH_HOLE)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    fallocate = getattr(_libc, "fallocate", None)
    if fallocate is None:
        raise RemoteError(
            "this platform cannot punch holes in files, so a cache smaller than its dataset "
            "cannot drop records; give cache_bytes= at least the dataset's size"
        )
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    fallocate.restype = ctypes.c_int
    if fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, end - start) != 0:
        code = ctypes.get_errno()
        if code in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise RemoteError(
                f"the filesystem of {path!r} cannot punch holes, so the cache cannot drop "
                "records; put cache_dir= on another filesystem (ext4, xfs, btrfs, tmpfs) or "
                "give cache_bytes= at least the dataset's size"
            )
        raise OSError(code, f"punching a hole in {path!r}: {os.strerror(code)}", path)


__all__ = ["StoreHoles", "choose_victims", "next_uses", "punch_hole"]
