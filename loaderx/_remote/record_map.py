"""Where each record of a remote dataset lies: its store, chunk object, byte range and checksum.

Read from the replica's copies of `meta.zr` and `sums.zr` (docs/format.md), which the open
verified. A dataset's global index i belongs to store s when starts[s] <= i < starts[s + 1]
(shards in manifest order, as the dataset's view routes them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._store.layout import META_FILE, TOP_LEVEL, shard_folder
from loaderx._store.manifest import read_manifest
from loaderx.errors import CorruptStoreError

# meta.zr: a 16-byte header (magic, version, tail chunk, tail offset, length) then 16-byte
# entries; sums.zr: a 16-byte header then one u32 per record (docs/format.md).
_HEADER_BYTES: Final = 16
_LENGTH_AT: Final = 12
ENTRY: Final = np.dtype(
    [("offset", "<u4"), ("stored", "<u4"), ("logical", "<u4"), ("chunk", "<u2"),
     ("codec", "u1"), ("reserved", "u1")]
)
_SUMS_MAGIC: Final = b"ZSUM"
SUMS_FILE: Final = "sums.zr"
# The cache accounts for whole filesystem blocks: a record's blocks are what it costs on disk
# (see loaderx._remote.eviction), so that a bound in bytes holds for tiny records too.
BLOCK: Final = 4096


@dataclass
class StoreRecords:
    """The records of one store of the dataset (a single store, or one shard)."""

    name: str  # "." or the shard's folder name
    folder: str  # the replica's folder of this store
    entries: npt.NDArray[np.void]  # ENTRY per record, length records
    sums: npt.NDArray[np.uint32] | None  # None: a store written before checksums

    @property
    def length(self) -> int:
        return len(self.entries)

    def chunk_object(self, chunk: int) -> str:
        """The chunk's object name relative to the dataset."""
        return f"{chunk}.zr" if self.name == TOP_LEVEL else f"{self.name}/{chunk}.zr"

    def blocks(self) -> npt.NDArray[np.int64]:
        """Each record's cost in the cache: the filesystem blocks its bytes touch."""
        start = self.entries["offset"].astype(np.int64)
        end = start + self.entries["stored"].astype(np.int64)
        first = start // BLOCK
        last = np.maximum(end - 1, start) // BLOCK
        return (last - first + 1) * BLOCK


def _read_store(name: str, folder: str) -> StoreRecords:
    meta = os.path.join(folder, META_FILE)
    with open(meta, "rb") as source:
        header = source.read(_HEADER_BYTES)
        if len(header) != _HEADER_BYTES:
            raise CorruptStoreError(f"{meta!r} is shorter than its header")
        length = int.from_bytes(header[_LENGTH_AT:_HEADER_BYTES], "little")
        entries = np.fromfile(source, dtype=ENTRY, count=length)
    if len(entries) != length:
        raise CorruptStoreError(f"{meta!r} holds {len(entries)} entries, its header says {length}")
    return StoreRecords(name, folder, entries, _read_sums(folder, length))


def _read_sums(folder: str, length: int) -> npt.NDArray[np.uint32] | None:
    path = os.path.join(folder, SUMS_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as source:
        header = source.read(_HEADER_BYTES)
        sums = np.fromfile(source, dtype="<u4", count=length)
    if len(header) != _HEADER_BYTES or header[:4] != _SUMS_MAGIC or len(sums) != length:
        raise CorruptStoreError(f"{path!r} is damaged (bad header or shorter than the store)")
    if header[8:16] != bytes(8):
        # Some sums may still belong to the records' places before a delete (docs/format.md):
        # only a writable open settles that, which a remote copy cannot do.
        raise CorruptStoreError(
            f"{path!r} records a delete that was still running when the dataset was uploaded; "
            "open the dataset writable once where it was written, then upload it again"
        )
    return sums


class RecordMap:
    """Every store of a replica in the dataset's order, with global index routing."""

    def __init__(self, replica: str) -> None:
        manifest = read_manifest(replica)
        names = [TOP_LEVEL] if manifest is None else manifest.names
        self.stores: list[StoreRecords] = [
            _read_store(name, shard_folder(replica, name)) for name in names
        ]
        lengths = [store.length for store in self.stores]
        self.starts: npt.NDArray[np.int64] = np.concatenate(
            ([0], np.cumsum(lengths, dtype=np.int64))
        ).astype(np.int64)
        self.length = int(self.starts[-1])

    def route(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The store number of each (valid, global) index."""
        return np.searchsorted(self.starts, indices, side="right").astype(np.int64) - 1


__all__ = ["BLOCK", "ENTRY", "RecordMap", "StoreRecords"]
