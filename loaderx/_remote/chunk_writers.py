"""The chunk files of a cached replica that a Fetcher writes fetched records into.

One write descriptor per chunk, opened at its first fetched range and kept for the next ones
(a range write is a pwrite at the records' offsets). They close with the fetcher, or when a
dataset dropped without close() is collected: until then they held the files open for the
life of the process. Left interpreted: it runs once per fetched range.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

from loaderx._os.fork_safe_lock import ForkSafeLock


class ChunkWriters:
    """Write descriptors of `<store folder>/<chunk>.zr`, by (store number, chunk number)."""

    def __init__(self, folders: Sequence[str]) -> None:
        self._folders = list(folders)
        self._lock = ForkSafeLock()
        self._open: dict[tuple[int, int], int] = {}
        # Not at interpreter exit, where a daemon fetch thread may still write (the kernel
        # closes them then). A forked child closes its own copies, which are its to close.
        self._close = weakref.finalize(self, _close_all, self._open)
        self._close.atexit = False

    def descriptor(self, store: int, chunk: int) -> int:
        with self._lock:
            fd = self._open.get((store, chunk))
            if fd is None:
                fd = os.open(os.path.join(self._folders[store], f"{chunk}.zr"), os.O_WRONLY)
                self._open[(store, chunk)] = fd
            return fd

    def close(self) -> None:
        """Closes every descriptor (the fetcher's close(), once no fetch is left running)."""
        with self._lock:
            self._close()


def _close_all(descriptors: dict[tuple[int, int], int]) -> None:
    while descriptors:
        try:
            os.close(descriptors.popitem()[1])
        except OSError:
            pass


__all__ = ["ChunkWriters"]
