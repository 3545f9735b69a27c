"""Which range requests fetch a set of records: neighbours in a chunk share one request.

Records closer than `gap` bytes in the same chunk are fetched by one range read (the bytes
between are read and dropped); no request spans more than RANGE_BYTES_MAX. Used by the fetcher
(fetcher.py), for downloads and for verify.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._remote.record_map import StoreRecords

# Two records closer than this in a chunk are fetched by one request (the bytes between are
# read and dropped). Small, because requests run many at once: their latency overlaps, while
# every byte read and dropped costs bandwidth. It merges neighbours, as a sequential pass has.
GAP_BYTES: Final = 32 << 10
# A request never spans more than this (large ranges stream and retry poorly).
RANGE_BYTES_MAX: Final = 16 << 20


@dataclass
class Range:
    """One range request: bytes [start, end) of a chunk of a store, and its records."""

    store: int
    chunk: int
    start: int
    end: int
    records: npt.NDArray[np.int64]  # local indices of the records to store from it
    # Of those, the ones nobody asked for (absorbed: they lay in the range's bytes): one that
    # fails its checksum is left out, not an error of the read that fetched the range.
    extra: npt.NDArray[np.int64] = field(default_factory=lambda: np.empty(0, np.int64))


def plan_ranges(
    store: int, records: StoreRecords, local: npt.NDArray[np.int64], gap: int = GAP_BYTES
) -> list[Range]:
    """The requests that fetch `local` (distinct local indices) of one store: neighbours
    closer than `gap` bytes share one."""
    entries = records.entries[local]
    order = np.lexsort((entries["offset"], entries["chunk"]))
    local, entries = local[order], entries[order]
    chunks = entries["chunk"].astype(np.int64)
    starts = entries["offset"].astype(np.int64)
    ends = starts + entries["stored"].astype(np.int64)
    ranges: list[Range] = []
    first = 0
    for i in range(1, len(local) + 1):
        if i < len(local) and chunks[i] == chunks[first] and starts[i] - ends[i - 1] <= gap \
                and ends[i] - starts[first] <= RANGE_BYTES_MAX:
            continue
        end = int(ends[first:i].max())
        ranges.append(Range(store, int(chunks[first]), int(starts[first]), end, local[first:i]))
        first = i
    return ranges


__all__ = ["GAP_BYTES", "RANGE_BYTES_MAX", "Range", "plan_ranges"]
