"""The locks of a sharded dataset: the commit lock, and the readers lock that deletes take.

Every manifest change holds the commit lock (an exclusive lock on shards.lock), so independent
jobs may commit shards at the same time. Opens hold the readers lock (shards.readers.lock)
shared and deletes hold it exclusively, so no open meets shards that a delete is moving.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from loaderx._os.lock_descriptors import close_descriptor, open_descriptor
from loaderx._store.layout import LOCK_FILE, READERS_LOCK_FILE
from loaderx.errors import ManifestError

# Lock files are opened without following a link (O_NOFOLLOW; Windows has no such flag).
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


@contextmanager
def commit_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the dataset's commit lock (an exclusive flock on shards.lock) for the block.

    Every manifest change takes it: commits, rollovers, appends to a sharded dataset and
    maintenance. The lock is per open file, so it excludes other threads of this process too;
    it is not re-entrant (code holding it calls the *_locked functions).
    """
    with _exclusive(folder, LOCK_FILE):
        yield


@contextmanager
def _exclusive(folder: str | os.PathLike[str], name: str) -> Iterator[None]:
    """An exclusive flock on the lock file `name` in folder (created if absent), for the block."""
    # A registered descriptor: a child forked while we hold the lock closes its copy, so the
    # lock ends with our close (loaderx._os.lock_descriptors).
    path = os.path.join(os.fspath(folder), name)
    try:
        # Never through a link: O_CREAT would make the file wherever the link points. The
        # umask gives its mode (open_descriptor), as every store file's.
        fd = open_descriptor(path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW)
    except OSError as error:
        if not (error.errno == errno.ELOOP and os.path.islink(path)):
            raise
        raise ManifestError(
            f"{path} is a symbolic link (to {os.readlink(path)!r}), not the dataset's lock "
            "file; loaderx makes that file itself and does not follow links out of the dataset"
        ) from None
    try:
        _lock_file(fd)
        yield
    finally:
        close_descriptor(fd)  # closing the descriptor releases the lock


@contextmanager
def reading_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the readers lock shared for the block, so that an open reads the manifest and opens
    the shards it lists while no delete runs (one that moved records in between would make the
    counts disagree). Appends and commits do not take this lock: they never invalidate what an
    open reads, so opens never wait for them. Nothing is locked where the lock file cannot be
    opened for reading (no delete ever ran, or a read-only copy without one) or on Windows (no
    shared mode); opening then relies on its retries."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    try:
        fd = open_descriptor(
            os.path.join(os.fspath(folder), READERS_LOCK_FILE), os.O_RDONLY | _NO_FOLLOW
        )
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        close_descriptor(fd)


@contextmanager
def deleting_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the readers lock exclusively for the block (a delete, with the commit lock held):
    opens wait for it instead of opening shards that are moving, or taking the handles that
    would make the delete refuse."""
    with _exclusive(folder, READERS_LOCK_FILE):
        yield


def _lock_file(fd: int) -> None:
    if sys.platform == "win32":  # Windows wheels only
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
