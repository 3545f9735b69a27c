"""The memory-mapped state files of one opened replica: which records are present, the
eviction epoch and the cache's used count; mapped at open and unmapped at close().

Every process of a cache folder maps the same files (MAP_SHARED), so a record one process
marks present is present for all of them without a system call. The fetcher reads and writes
them through NumPy arrays over the mappings.

A closed dataset must not keep its cache files mapped (or their descriptors open) until it is
garbage-collected: the folder may be removed once no process has the version open, and a
process that opens and closes datasets in a loop would pile up mappings. A np.memmap cannot be
unmapped while any array over it lives, and closing the mapping under a live array would make
its next read a SIGSEGV. So the mappings are mmap objects owned here, the arrays over them are
held only by this object (users index them through it and keep no array of their own), and
every user holds `lock` and checks `closed` first. close() takes the lock, drops the arrays and
closes the mappings: a thread still running afterwards (a look-ahead's fetch, a pool thread)
finds `closed` and stops, and never touches an unmapped page. What is left in place of the
arrays is empty, so a use that skipped the check raises IndexError rather than reading freed
memory.

Left interpreted: it runs at open and close.
"""

from __future__ import annotations

import mmap
import os
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._os.fork_safe_lock import ForkSafeLock

_COUNTER_BYTES: Final = 8


def sized_and_allocated(path: str, size: int, grow_only: bool = False) -> None:
    """Makes the file `size` bytes long (at least, with grow_only) with every block allocated.
    The state files are memory-mapped and written through the mapping: a page with no block
    behind it (ftruncate makes holes) needs one at its first write (and on tmpfs at its first
    read), and on a full disk the kernel answers that fault with SIGBUS, which kills the
    process. Allocated here, a full disk is an OSError naming the file, raised at open."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # the umask's mode, as every cache file
    try:
        length = os.fstat(fd).st_size
        if length < size or (length != size and not grow_only):
            os.ftruncate(fd, size)
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        raise OSError(exc.errno, f"allocating the cache's state file {path!r}: "
                      f"{os.strerror(exc.errno or 0)}", path) from exc
    finally:
        os.close(fd)


def _mapped(path: str, size: int) -> mmap.mmap:
    """The first `size` bytes of the file mapped shared, read and write. The mmap object keeps
    its own duplicate of the descriptor (closed with it); ours is closed at once."""
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


class StateMaps:
    """present[n]: one byte per record of store n (1: present); epoch and used: the shared
    uint64 counters (fetcher.py). Use them only holding `lock`, after checking `closed`."""

    def __init__(self, state: str, lengths: list[int]) -> None:
        self.lock = ForkSafeLock()
        self.closed = False
        self._maps: list[mmap.mmap] = []
        try:
            self.present: list[npt.NDArray[np.uint8]] = [
                self._present(os.path.join(state, f"{number}.present"), length)
                for number, length in enumerate(lengths)
            ]
            # The eviction epoch and the cost of the present records, shared by every process.
            self.epoch = self._counter(os.path.join(state, "epoch"))
            self.used = self._counter(os.path.join(state, "used"))
        except BaseException:
            self.close()
            raise

    def _present(self, path: str, length: int) -> npt.NDArray[np.uint8]:
        sized_and_allocated(path, length)  # new: all zero, nothing present
        if length == 0:
            return np.zeros(0, dtype=np.uint8)  # nothing to map (mmap refuses an empty file)
        mapping = _mapped(path, length)
        self._maps.append(mapping)
        return np.frombuffer(mapping, dtype=np.uint8)

    def _counter(self, path: str) -> npt.NDArray[np.uint64]:
        sized_and_allocated(path, _COUNTER_BYTES, grow_only=True)
        mapping = _mapped(path, _COUNTER_BYTES)
        self._maps.append(mapping)
        return np.frombuffer(mapping, dtype=np.uint64, count=1)

    def close(self) -> None:
        """Unmaps the files (and closes their descriptors); later uses find `closed`."""
        with self.lock:
            self.closed = True
            nothing = np.zeros(0, dtype=np.uint8)
            self.present = [nothing for _ in getattr(self, "present", [])]
            self.epoch = self.used = np.zeros(0, dtype=np.uint64)
            maps, self._maps = self._maps, []
            for mapping in maps:
                try:
                    mapping.close()
                except BufferError:
                    # An array over it is still referenced somewhere (a traceback's frame):
                    # unmapping now would make reading it a SIGSEGV, so the mapping stays until
                    # that array is collected (it holds the mmap). No user here touches it.
                    pass


__all__ = ["StateMaps", "sized_and_allocated"]
