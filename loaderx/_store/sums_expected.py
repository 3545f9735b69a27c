"""Whether a store without sums.zr once had one: the evidence its other files keep.

A store written before checksums has no sums.zr and is checked without it; a store whose
sums.zr was deleted looks the same to the native open. The two differ in files that only a
loaderx writing sums.zr ever wrote (docs/decisions.md, "verify tells lost checksums from none"):

- a schema.msgpack with its `checksum` field: the schema checksum came after sums.zr, and a
  schema is only written over an empty store just opened writable, which is when sums.zr is
  made;
- a dict.zr ending with its `LXDC` trailer, which came with sums.zr.

A bare store (no schema) with neither cannot say: it is taken as written before checksums.

This module stays interpreted: verify asks once per store.
"""

from __future__ import annotations

import os
from typing import Any, Final

import msgpack

from loaderx._store.layout import DICT_FILE, META_FILE

SUMS_FILE: Final = "sums.zr"
_SCHEMA_FILE: Final = "schema.msgpack"
_SCHEMA_CHECKSUM_FIELD: Final = "checksum"
_DICT_TRAILER_MAGIC: Final = b"LXDC"
_DICT_TRAILER_BYTES: Final = 16
# A schema is a few hundred bytes; anything larger is not one (its reader refuses it).
_SCHEMA_BYTES_MAX: Final = 1 << 16


def _schema_has_checksum(folder: str) -> bool:
    try:
        with open(os.path.join(folder, _SCHEMA_FILE), "rb") as source:
            raw = source.read(_SCHEMA_BYTES_MAX)
        fields: Any = msgpack.unpackb(raw, raw=False)
    except (OSError, ValueError, TypeError):
        return False  # no schema, or one the open itself refuses: no evidence either way
    return isinstance(fields, dict) and _SCHEMA_CHECKSUM_FIELD in fields


def _dict_has_trailer(folder: str) -> bool:
    try:
        with open(os.path.join(folder, DICT_FILE), "rb") as source:
            source.seek(0, os.SEEK_END)
            if source.tell() < _DICT_TRAILER_BYTES:
                return False
            source.seek(-_DICT_TRAILER_BYTES, os.SEEK_END)
            return source.read(len(_DICT_TRAILER_MAGIC)) == _DICT_TRAILER_MAGIC
    except OSError:
        return False


def missing_sums(folder: str) -> list[str]:
    """[the path of folder's sums.zr] when the store at folder has none but its files show it
    was written with checksums (the module docstring says how); [] otherwise."""
    sums = os.path.join(folder, SUMS_FILE)
    if os.path.lexists(sums) or not os.path.lexists(os.path.join(folder, META_FILE)):
        return []
    if _schema_has_checksum(folder) or _dict_has_trailer(folder):
        return [sums]
    return []


__all__ = ["SUMS_FILE", "missing_sums"]
