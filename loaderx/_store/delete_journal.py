"""shards.delete: the record of a delete over several shards, so that a killed one can be finished.

A delete in a sharded dataset runs shard by shard in one native call, and each shard's own
delete is atomic (its redo log, zig/src/files/journal.zig). A process killed between two shards
would leave some shards deleted and others not. So before anything moves, the dataset writes
this journal: for every shard involved, its name, its record count before the delete and the
local indices it deletes. The manifest then records the new counts (`records_before` in
loaderx._store.manifest), the shards delete, the manifest is settled, and the journal goes.

A writable open that finds the manifest mid-delete and this journal finishes the delete on
every shard still at its count before, then settles the manifest (loaderx._store.shard_delete). Applying a
shard's part again is exactly what the killed process would have done: a swap-last delete of
the same indices from the same records. A journal without a manifest mid-delete is stale (the
process died before the manifest write, or after settling it) and is removed.

The shards' list is stored as msgpack bytes with a CRC-32 of them (version 2). A journal whose
indices were damaged but still name records of their shard (a flipped bit in an index) would
otherwise finish the delete on the wrong records, with nothing to tell; the check refuses it.
Version 1, written before the check, is still read (a delete killed under an older loaderx).

This module stays interpreted: it runs once per delete or open, never on a read path.
"""

from __future__ import annotations

import os
import zlib
from contextlib import suppress
from typing import Any, Final

import msgpack
import numpy as np
import numpy.typing as npt

from loaderx.errors import ManifestError
from loaderx._os.folder_swap import fsync_folder
from loaderx._os.paths import write_file_atomically
from loaderx._store.layout import DELETE_JOURNAL_FILE

JOURNAL_FILE: Final = DELETE_JOURNAL_FILE
_FORMAT: Final = "loaderx-delete"
_VERSION: Final = 2
# Version 1 kept the shards' list in the record itself, without a check.
_UNCHECKED_VERSION: Final = 1
_INDEX_DTYPE: Final = np.dtype("<i8")


class ShardDelete:
    """One shard's part of a delete: its folder name, its count before, its local indices."""

    name: str
    records_before: int
    indices: npt.NDArray[np.int64]

    def __init__(self, name: str, records_before: int, indices: npt.NDArray[np.int64]) -> None:
        self.name = name
        self.records_before = records_before
        self.indices = indices

    @property
    def records_after(self) -> int:
        return self.records_before - len(self.indices)


def journal_path(folder: str) -> str:
    return os.path.join(folder, JOURNAL_FILE)


def write_journal(folder: str, parts: list[ShardDelete]) -> None:
    """Writes the journal atomically and durably (temporary file, fsync, rename, fsync)."""
    shards = msgpack.packb(
        [
            {
                "name": part.name,
                "records_before": part.records_before,
                "indices": part.indices.astype(_INDEX_DTYPE, copy=False).tobytes(),
            }
            for part in parts
        ],
        use_bin_type=True,
    )
    record: dict[str, Any] = {
        "format": _FORMAT,
        "version": _VERSION,
        "shards": shards,
        "check": zlib.crc32(shards),
    }
    write_file_atomically(journal_path(folder), msgpack.packb(record, use_bin_type=True))
    fsync_folder(folder)


def read_journal(folder: str) -> list[ShardDelete] | None:
    """The journal's parts, or None when there is none; ManifestError if it is not one."""
    path = journal_path(folder)
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return None
    try:
        raw = msgpack.unpackb(data, raw=False)
    except (ValueError, TypeError) as exc:
        raise ManifestError(f"{path} is not a valid delete journal: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
        raise ManifestError(f"{path} is not a loaderx delete journal")
    version = raw.get("version")
    if version == _VERSION:
        shards = _checked_shards(raw, path)
    elif version == _UNCHECKED_VERSION:
        shards = raw.get("shards")
    else:
        raise ManifestError(f"{path} is a delete journal of version {version!r}, which this "
                            f"loaderx cannot read (it reads {_UNCHECKED_VERSION} and {_VERSION})")
    if not isinstance(shards, list):
        raise ManifestError(f"{path}: 'shards' must be a list")
    return [_part(item, path) for item in shards]


def _checked_shards(raw: dict[str, Any], path: str) -> object:
    """The shards' list of a version 2 journal, once its bytes match their check."""
    shards, check = raw.get("shards"), raw.get("check")
    if not isinstance(shards, bytes) or not isinstance(check, int) or isinstance(check, bool):
        raise ManifestError(f"{path}: a version {_VERSION} journal needs its shards as bytes "
                            "and their check")
    if zlib.crc32(shards) != check:
        raise ManifestError(f"{path} is damaged: its shards' list does not match its check")
    try:
        return msgpack.unpackb(shards, raw=False)
    except (ValueError, TypeError) as exc:
        raise ManifestError(f"{path}: its shards' list is not valid msgpack: {exc}") from exc


def _part(raw: object, path: str) -> ShardDelete:
    if not isinstance(raw, dict):
        raise ManifestError(f"{path}: a shard entry is not a map")
    name, before, indices = raw.get("name"), raw.get("records_before"), raw.get("indices")
    if (
        not isinstance(name, str)
        or not isinstance(before, int)
        or isinstance(before, bool)
        or not isinstance(indices, bytes)
        or len(indices) % _INDEX_DTYPE.itemsize
    ):
        raise ManifestError(f"{path}: a malformed shard entry {name!r}")
    local = np.frombuffer(indices, dtype=_INDEX_DTYPE).astype(np.int64)
    if len(local) and (local.min() < 0 or local.max() >= before):
        raise ManifestError(f"{path}: shard {name!r} has indices outside its {before} records")
    if len(np.unique(local)) != len(local):
        raise ManifestError(f"{path}: shard {name!r} lists an index twice")
    return ShardDelete(name, before, local)


def remove_journal(folder: str) -> None:
    """Removes the journal (if any), durably."""
    with suppress(FileNotFoundError):
        os.unlink(journal_path(folder))
        fsync_folder(folder)


__all__ = ["JOURNAL_FILE", "ShardDelete", "read_journal", "remove_journal", "write_journal"]
