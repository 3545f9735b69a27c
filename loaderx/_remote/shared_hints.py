"""Eviction's hints (pinned records, the known future) shared by every process of a cache folder.

A Fetcher's pins and future live in the memory of its process, but eviction runs in whichever
process needs room: with worker_type="process" the look-ahead pins and plans in the consumer,
while each worker process opens the dataset again (its own Fetcher, no pins beyond its own
gather, no future) and evicts when one of its fetches finds the cache full. Left to what it
knows, a worker would drop records in index order, the look-ahead's pinned window included.

So a Fetcher that is given a future publishes it, with its pins, in the state folder:
`hints/<id>.npz` (pinned global indices; the future's indices and how many steps ahead of the
publisher's first planned step each is read). Eviction in any process pins the union of every
live publisher's pins and ranks records by the nearest next use any of them knows. Steps of
different loaders are not comparable, so the future is kept as distances, which are, roughly.

A publisher holds an exclusive flock on `hints/<id>.lock` for as long as it lives; a reader
skips files whose lock is free (the publisher died) and removes them. A file is replaced by a
rename, so a reader sees one version whole. The hints are refreshed with each set_future (once
per few steps), so they may name steps the consumer has just passed: they pin a little more,
never less, than the look-ahead holds. A fetcher whose bound holds the whole dataset publishes
nothing: neither it nor the worker processes that reopen the dataset with its bound evict.

Left interpreted: it runs once per few steps and once per eviction.
"""

from __future__ import annotations

import fcntl
import os
import uuid
import weakref
import zipfile
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor

_FOLDER: Final = "hints"
_DATA: Final = ".npz"
_LOCK: Final = ".lock"

Hints = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def _empty() -> Hints:
    nothing = np.empty(0, np.int64)
    return nothing, nothing, nothing


class SharedHints:
    """One Fetcher's published hints, and the reading of every other publisher's (module doc)."""

    def __init__(self, state: str) -> None:
        self._folder = os.path.join(state, _FOLDER)
        self._name = ""  # this process's file name (no suffix), made on the first publish
        self._pid = -1
        self._lock = ForkSafeLock()  # publish (the look-ahead's thread) against withdraw (close)
        self._closed = False
        # What a dataset dropped without close() runs: a withdraw (_own).
        self._dropped: weakref.finalize[[str, str, int, int], SharedHints] | None = None

    def _own(self) -> str:
        """The name of this process's files, their lock held (a forked child makes its own)."""
        if self._pid != os.getpid():
            self._name = ""  # the parent's: its lock copy was closed at fork
        if not self._name:
            os.makedirs(self._folder, exist_ok=True)
            name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
            if self._dropped is not None:
                self._dropped()  # files an interrupt left unnamed here (none in a child)
            fd = open_descriptor(os.path.join(self._folder, name + _LOCK), os.O_RDWR | os.O_CREAT)
            # A dataset dropped without close() withdraws too, or its lock (and so its pins,
            # in every other process's eviction) would last as long as this process.
            self._dropped = weakref.finalize(self, _withdraw_dropped, self._folder, name, fd,
                                             os.getpid())
            self._dropped.atexit = False  # as lock_descriptors.close_when_dropped
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._name, self._pid = name, os.getpid()
        return self._name

    def publish(self, pinned: npt.NDArray[np.int64], indices: npt.NDArray[np.int64],
                steps: npt.NDArray[np.int64]) -> None:
        """Replaces this process's hints: pinned records, and indices[k] read at steps[k]."""
        if len(pinned) == 0 and len(indices) == 0:
            self.withdraw()
            return
        ahead = steps - int(steps.min()) if len(steps) else steps
        with self._lock:
            if self._closed:
                return  # the fetcher closed while its look-ahead was still finishing
            name = self._own()
            path = os.path.join(self._folder, name + _DATA)
            temporary = os.path.join(self._folder, f".{name}.{uuid.uuid4().hex[:8]}{_DATA}")
            try:
                with open(temporary, "wb") as file:
                    np.savez(file, pinned=pinned.astype(np.int64, copy=False),
                             indices=indices.astype(np.int64, copy=False),
                             ahead=ahead.astype(np.int64, copy=False))
                os.replace(temporary, path)
            except BaseException:
                _unlink(temporary)
                raise

    def withdraw(self) -> None:
        """Removes this process's hints (the look-ahead stopped, or the fetcher closed)."""
        with self._lock:
            if not self._name or self._pid != os.getpid():
                return
            self._name = ""
            dropped, self._dropped = self._dropped, None
            if dropped is not None:
                dropped()

    def close(self) -> None:
        """Withdraws the hints for good (the fetcher closed)."""
        with self._lock:
            self._closed = True
        self.withdraw()

    def others(self) -> Hints:
        """Every other live publisher's hints, joined: (pinned, indices, steps ahead)."""
        try:
            names = os.listdir(self._folder)
        except FileNotFoundError:
            return _empty()
        own = self._name if self._pid == os.getpid() else ""
        pinned, indices, ahead = [], [], []
        for entry in names:
            if not entry.endswith(_DATA) or entry == own + _DATA:
                continue
            if entry.startswith("."):  # a publisher's temporary: removed once it is dead
                name = entry[1:].split(".")[0]
                if name != own and not self._alive(name):
                    _unlink(os.path.join(self._folder, entry))
                continue
            name = entry[: -len(_DATA)]
            if not self._alive(name):
                continue
            try:
                with np.load(os.path.join(self._folder, entry)) as found:
                    pinned.append(found["pinned"])
                    indices.append(found["indices"])
                    ahead.append(found["ahead"])
            except (OSError, ValueError, KeyError, zipfile.BadZipFile):
                continue  # withdrawn meanwhile, or left half-written by no one we know
        if not pinned:
            return _empty()
        return np.concatenate(pinned), np.concatenate(indices), np.concatenate(ahead)

    def _alive(self, name: str) -> bool:
        """Whether the publisher of name holds its lock; a dead one's files are removed."""
        lock = os.path.join(self._folder, name + _LOCK)
        try:
            fd = open_descriptor(lock, os.O_RDWR)
        except FileNotFoundError:
            _unlink(os.path.join(self._folder, name + _DATA))
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            close_descriptor(fd)
        _unlink(os.path.join(self._folder, name + _DATA))
        _unlink(lock)
        return False


def _withdraw_dropped(folder: str, name: str, fd: int, pid: int) -> None:
    """Removes a publisher's files and closes its lock (withdraw, and the finaliser of a
    SharedHints collected unclosed). Not in a forked child: the parent's files are its own,
    and the child's copy of the descriptor was closed at the fork (lock_descriptors)."""
    if os.getpid() != pid:
        return
    _unlink(os.path.join(folder, name + _DATA))
    _unlink(os.path.join(folder, name + _LOCK))
    close_descriptor(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["SharedHints"]
