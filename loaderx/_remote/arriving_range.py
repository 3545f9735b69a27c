"""A fetched range's bytes as they arrive, settled a stretch at a time while the rest streams in.

The fetcher checks and writes a range's records while its later bytes are still on the way, so
that the checksums and the writes to the replica overlap the network. A cold pass with every
range written only once it had all arrived spent its last 0.1 to 0.2 s with the link idle:
ranges share the link, so they all end together, and then their checks and writes ran one after
another (benchmarks/reports/remote.md, "The cold pass's idle tail").

A range is settled in steps, each ending at a 2 MiB boundary of the chunk file (or at the
range's end), once its bytes up to there have arrived. A step writes the records' bytes between
the previous step's end and its own: so every whole aligned 2 MiB of the file is one write, and
the page cache holds it in one large folio, which a read-only mapping maps with a 2 MiB page
(range_writes.py). A record is made present by the step that writes its last byte, after its
checksum matched; the first bytes of a record that crosses a step's end are written by that step
before they are checked (the record is absent, so nobody reads them). An eviction between two
steps may punch the blocks of such a record (it is absent), so the step that completes it
writes it whole again when the eviction counter moved in between (`rewrite`).

Only the records' own bytes are written, never the gaps between them (range_writes.py).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._remote.range_writes import adjacent_runs

# Steps end at multiples of this in the chunk file: the largest page a mapping of a file uses.
STEP_ALIGN: Final = 2 << 20


class ArrivingRange:
    """Bytes [start, start + size) of a chunk file as they arrive, and the records (offsets
    relative to start, stored lengths) that lie in them."""

    def __init__(
        self, start: int, size: int, offsets: npt.NDArray[np.uint64],
        lengths: npt.NDArray[np.uint64], align: int = STEP_ALIGN,
    ) -> None:
        self.start = start
        self.size = size
        self.buffer = np.empty(size, dtype=np.uint8)
        self.received = 0
        self.settled = 0  # bytes before this are written (range-relative)
        self._align = align
        self._offsets = offsets.astype(np.int64)
        self._ends = self._offsets + lengths.astype(np.int64)
        if len(self._ends) and (int(self._offsets.min()) < 0 or int(self._ends.max()) > size):
            raise ValueError("a record lies outside the range")
        self._by_end = np.argsort(self._ends, kind="stable")
        self._sorted_ends = self._ends[self._by_end]
        self._done = 0  # records of _by_end already completed by a step

    def add(self, piece: memoryview) -> None:
        """Appends the next bytes of the range."""
        count = len(piece)
        if self.received + count > self.size:
            raise ValueError(f"{self.received + count} bytes for a range of {self.size}")
        self.buffer[self.received:self.received + count] = np.frombuffer(piece, dtype=np.uint8)
        self.received += count

    def next_stop(self) -> int | None:
        """Where the next step ends (range-relative): the last STEP_ALIGN boundary of the file
        that the bytes received reach, or the range's end once it all arrived; None when that
        is no further than the last step."""
        if self.received == self.size:
            stop = self.size
        else:
            stop = (self.start + self.received) // self._align * self._align - self.start
        return stop if stop > self.settled or (stop == self.size and self._pending()) else None

    def _pending(self) -> bool:
        return self._done < len(self._by_end)

    def completed_by(self, stop: int) -> npt.NDArray[np.int64]:
        """Positions (into the records given) of the records whose last byte is before stop
        and that no earlier step completed, in order of their ends."""
        past = int(np.searchsorted(self._sorted_ends, stop, side="right"))
        return self._by_end[self._done:max(past, self._done)]

    def spans(
        self, stop: int, completing: npt.NDArray[np.int64], rewrite: bool
    ) -> list[tuple[int, int]]:
        """The range-relative (start, stop) byte spans the step to `stop` writes: the bytes up
        to stop of the records completing (those of completed_by that passed their check) and
        of the records that cross stop, from the previous step's end on, or from the records'
        own starts with rewrite (an eviction since the previous step may have punched them)."""
        crossing = np.flatnonzero((self._offsets < stop) & (self._ends > stop))
        chosen = np.union1d(completing, crossing).astype(np.int64)
        order = chosen[np.argsort(self._offsets[chosen], kind="stable")]
        low = self.settled
        if rewrite and len(completing):
            low = min(low, int(self._offsets[completing].min()))
        found: list[tuple[int, int]] = []
        for first, last in adjacent_runs(self._offsets[order].astype(np.uint64),
                                         (self._ends[order] - self._offsets[order]).astype(np.uint64)):
            first, last = max(first, low), min(last, stop)
            if first < last:
                found.append((first, last))
        return found

    def settle(self, stop: int, completed: npt.NDArray[np.int64]) -> None:
        """Records that the step to stop is written and `completed` (completed_by(stop)) dealt
        with."""
        self._done += len(completed)
        self.settled = stop


__all__ = ["ArrivingRange", "STEP_ALIGN"]
