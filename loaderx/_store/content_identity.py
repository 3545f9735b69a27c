"""A dataset's content identity: a digest of its records' checksums, in index order.

Every record's CRC32C (of its stored bytes, logical length and codec) is in its store's sums.zr
(docs/format.md), written before the record is published and moved with it by a delete. A
digest of the first `count` of them, store after store, is therefore the same for the same
records in the same order (the dataset reopened, opened read-only, copied with `cp -a`, read
through a URL's replica, or split into other shards) and differs as soon as one of them changes
(a rewrite of the same length, a delete). It costs 4 bytes a record, read once; nothing is
written, so the file format is unchanged (docs/decisions.md, "Checkpoints name their data").

A store written before checksums has no sums.zr: it adds only its record count, so only its
length tells such data apart.

This module stays interpreted: a loader asks once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Final

from loaderx._store.sums_expected import SUMS_FILE
from loaderx.errors import CorruptStoreError

_SUMS_HEADER_BYTES: Final = 16
_SUM_BYTES: Final = 4
# Sums hashed at a time: 1 MiB of them bounds the memory at any length.
_SUMS_PER_READ: Final = 1 << 18
_DIGEST_BYTES: Final = 16
IDENTITY_PREFIX: Final = "sums-blake2b:"


def _add_store(digest: hashlib.blake2b, folder: str, count: int) -> None:
    """The sums of the store's first count records into digest (or, without a sums.zr, the
    count alone, marked so that it never equals a run of sums)."""
    path = os.path.join(folder, SUMS_FILE)
    try:
        source = open(path, "rb")
    except FileNotFoundError:
        digest.update(b"no-sums" + count.to_bytes(8, "little"))
        return
    with source:
        source.seek(_SUMS_HEADER_BYTES)
        left = count
        while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
            if not left:
                break
            wanted = min(left, _SUMS_PER_READ) * _SUM_BYTES
            block = source.read(wanted)
            if len(block) != wanted:
                raise CorruptStoreError(
                    f"{path!r} holds fewer sums than the store's {count:,} records"
                )
            digest.update(block)
            left -= wanted // _SUM_BYTES


def content_identity(description: str, parts: Sequence[tuple[str, int]], count: int) -> str:
    """The identity of the first count records of the stores in parts (folder, records), in
    order, for data described by description (the schema's kind, dtype and shape: the same bytes
    read as another dtype are other data)."""
    digest = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    digest.update(description.encode() + b"\0")
    left = count
    for folder, records in parts:
        if left == 0:
            break
        taken = min(left, records)
        _add_store(digest, folder, taken)
        left -= taken
    if left:
        raise ValueError(f"the stores hold fewer than the {count:,} records asked for")
    return IDENTITY_PREFIX + digest.hexdigest()


__all__ = ["IDENTITY_PREFIX", "content_identity"]
