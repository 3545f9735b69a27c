"""Writing a fetched range's records into the replica's sparse chunk file.

Records that follow each other without a gap are written by one pwrite, not one each. Besides
saving system calls, the size of a write decides the size of the page-cache folios that hold
it: a file written in large pieces is held in large folios, which a read-only mapping can map
with 2 MiB pages, where a file written 12 KiB at a time stays in 4 KiB pages and every random
record read from it costs more TLB misses (benchmarks/reports/remote.md, "On VM-8"). Only the
records' own bytes are written, never the gaps between them: a gap may hold another record
that is not present, whose blocks must stay a hole.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt


def adjacent_runs(
    offsets: npt.NDArray[np.uint64], lengths: npt.NDArray[np.uint64]
) -> Iterator[tuple[int, int]]:
    """(start, stop) byte spans covering the records at offsets[i] of lengths[i] bytes (in
    offset order), one span per run of records that touch; empty records are left out."""
    starts = offsets.astype(np.int64)
    sizes = lengths.astype(np.int64)
    present = sizes > 0
    starts, stops = starts[present], starts[present] + sizes[present]
    if len(starts) == 0:
        return
    breaks = (np.flatnonzero(starts[1:] != stops[:-1]) + 1).tolist()
    for first, last in zip([0, *breaks], [*breaks, len(starts)]):
        yield int(starts[first]), int(stops[last - 1])


def write_all(fd: int, data: memoryview, position: int) -> None:
    """All of data at `position` of fd (pwrite may write less than asked on a regular file: a
    signal, or a disk that just filled, which the next call then reports as an OSError)."""
    written = 0
    while written < len(data):
        count = os.pwrite(fd, data[written:], position + written)
        if count <= 0:
            raise OSError(f"pwrite wrote nothing at offset {position + written}")
        written += count


__all__ = ["adjacent_runs", "write_all"]
