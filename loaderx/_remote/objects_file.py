"""A cached version's objects file: every object of the dataset (name, size, ETag, version) as
listed when the version was made. Written last when a version is built, removed first when it
is retired, so its presence says "finished"; read when a version is opened from the cache
alone (replica.py) and when a new version looks for an older one to take chunks from
(version_reuse.py). One format, one reader."""

from __future__ import annotations

import os
from typing import Final

import msgpack

from loaderx._remote.object_store import RemoteObject

OBJECTS_FILE: Final = "objects.msgpack"


def objects_bytes(items: list[RemoteObject]) -> bytes:
    """The file's content for items (the modification times are not kept)."""
    packed: bytes = msgpack.packb([[o.name, o.size, o.etag, o.version] for o in items])
    return packed


def read_objects(folder: str) -> list[RemoteObject] | None:
    """The objects listed in folder's objects file; None when it is missing (an unfinished or
    retired version) or unreadable (damaged)."""
    try:
        with open(os.path.join(folder, OBJECTS_FILE), "rb") as source:
            listed = msgpack.unpackb(source.read())
        return [RemoteObject(str(o[0]), int(o[1]), o[2], o[3]) for o in listed]
    except (OSError, ValueError, TypeError, IndexError):  # msgpack's errors are ValueErrors
        return None


__all__ = ["OBJECTS_FILE", "objects_bytes", "read_objects"]
