"""Which records a default read leaves unchecked: those stored raw, whatever the codec.

Gathers check a record's checksum by default only when it is compressed (or empty): next to a
decompression the check costs little, next to a raw copy it doubles the cost (docs/decisions.md,
"Checksums"). A zstd or zstd_dict store keeps a record that does not shrink raw, so a
"compressed" dataset can hold records that no default read checks. This counts them from the
store's table in meta.zr (docs/format.md), for `loaderx info` to say so.

Left interpreted: it runs once per `info`.
"""

from __future__ import annotations

import os
from typing import Final

import numpy as np

from loaderx._store.layout import META_FILE
from loaderx._store.record_batches import CODECS
from loaderx.errors import CorruptStoreError

# meta.zr: a 16-byte header whose last 4 bytes are the record count, then a 16-byte entry per
# record (offset, stored length, logical length, chunk id, codec, reserved).
_HEADER_BYTES: Final = 16
_LENGTH_AT: Final = 12
_ENTRY: Final = np.dtype(
    [("offset", "<u4"), ("stored", "<u4"), ("logical", "<u4"), ("chunk", "<u2"),
     ("codec", "u1"), ("reserved", "u1")]
)
_RAW: Final = CODECS["raw"]
# Entries read at a time (256 KiB), so that memory stays bounded for a store of any size.
_WINDOW: Final = 1 << 14


def unchecked_by_default(folder: str) -> int:
    """How many records of the store in `folder` a default read does not check against their
    checksums: the non-empty records stored raw. Entries are read up to the length the header
    gives, so an append running meanwhile is seen in part or not at all, never torn."""
    meta = os.path.join(folder, META_FILE)
    unchecked = 0
    with open(meta, "rb") as source:
        header = source.read(_HEADER_BYTES)
        if len(header) != _HEADER_BYTES:
            raise CorruptStoreError(f"{meta!r} is shorter than its header")
        length = int.from_bytes(header[_LENGTH_AT:], "little")
        for begin in range(0, length, _WINDOW):
            wanted = min(_WINDOW, length - begin)
            entries = np.fromfile(source, dtype=_ENTRY, count=wanted)
            if len(entries) != wanted:
                raise CorruptStoreError(
                    f"{meta!r} holds {begin + len(entries)} entries, its header says {length}"
                )
            unchecked += int(np.count_nonzero((entries["codec"] == _RAW) & (entries["stored"] > 0)))
    return unchecked


__all__ = ["unchecked_by_default"]
