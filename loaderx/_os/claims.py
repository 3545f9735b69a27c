"""Claimed folders: scratch folders that a killed process leaves behind and a later one removes.

Two writers build data in hidden folders that nothing else would ever clean up if the writer
were killed: a sharded dataset's staging folders (loaderx._store.staging, `.staging-*` inside the
dataset) and a parallel conversion's parts folder (loaderx._data.parallel, `.<name>.loaderx-parts-*`
beside the destination). Both are claimed the same way:

    <folder>          the scratch folder itself (left empty for the caller: a staging folder
                      is public API and becomes a shard as it is)
    <folder>.live     its marker, flock-ed by the owning process until it releases the claim

A folder whose marker can be locked belongs to nobody (the kernel drops an flock when its
process dies), so `remove_dead(parent, prefix)` removes it and its marker. The marker is locked
before it gets its name: it is made under a claim name (`<claim prefix><random>`), locked,
checked to be still there, and only then renamed (the lock follows the file). So no cleaner ever
sees a live folder's marker unlocked; a claim file left by a process killed before the rename is
removed too, and a creator whose claim file a cleaner took away meanwhile makes a new one.

Where flock does not exist (Windows, loaderx._os.folder_swap.FOLDER_LOCKS_WORK false) nothing is judged
dead: a live claim would look the same. The marker is a file beside the folder, not the folder
itself, because the converters lock the folders they write in (loaderx._os.folder_swap.StagedFolder),
and a parts folder is such a folder.

This module stays interpreted: it runs once per staging folder or conversion, never on a read.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from contextlib import suppress
from typing import Final

from loaderx._os.deferred_interrupt import signals_deferred
from loaderx._os.folder_swap import FOLDER_LOCKS_WORK, FolderLock, try_lock
from loaderx._os.fork_safe_lock import ForkSafeLock

LIVE_SUFFIX: Final = ".live"
# Random hex digits in every folder and claim name: 48 bits, so two never meet.
_TOKEN_HEX: Final = 12

# This process's claims: folder path -> the lock on its marker. A forked child holds none
# (_forget_in_child) and gets the guard back unlocked.
_held: dict[str, FolderLock] = {}
_held_guard: Final = ForkSafeLock()


def _token() -> str:
    return uuid.uuid4().hex[:_TOKEN_HEX]


def _locked_claim(parent: str, claim_prefix: str) -> tuple[str, FolderLock]:
    """A new empty file in parent under a claim name, flock-ed by us. A cleaner may delete a
    claim file in the moment between its creation and our lock: then it is made again."""
    while True:
        claim = os.path.join(parent, claim_prefix + _token())
        open(claim, "xb").close()
        try:
            lock = FolderLock(claim, blocking=True)
        except FileNotFoundError:
            continue  # removed before we could open it
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(claim)
            raise
        try:
            still_there = lock.fd < 0 or os.path.samestat(os.fstat(lock.fd), os.stat(claim))
        except FileNotFoundError:
            still_there = False
        if still_there:
            return claim, lock
        lock.release()


def claim_folder(parent: str, name_prefix: str, claim_prefix: str) -> str:
    """Creates parent/<name_prefix><random> (an empty folder) claimed by this process until
    release() or discard(); returns its path. parent is created if absent."""
    os.makedirs(parent, exist_ok=True)
    claim, lock = _locked_claim(parent, claim_prefix)
    path = os.path.join(parent, name_prefix + _token())
    marker = path + LIVE_SUFFIX
    try:
        # The marker before the folder: no folder is ever without its claim.
        os.rename(claim, marker)
        os.mkdir(path)
    except BaseException:
        for leftover in (claim, marker):
            with suppress(FileNotFoundError):
                os.unlink(leftover)
        lock.release()
        raise
    with _held_guard:
        _held[path] = lock
    return path


def release(path: str) -> None:
    """Ends this process's claim on a folder (moved elsewhere, or removed): its marker goes.

    A process that does not hold the claim (a forked child of its holder, say) takes the marker
    away only once the folder is gone from path (it moved the folder into a dataset itself):
    while the folder is there the marker is its holder's, and without it a cleaner would never
    judge the folder, which stayed for good once its holder was killed.

    Signals wait until it is done (loaderx._os.deferred_interrupt): a Ctrl-C between taking
    the claim from this process's books and closing its lock's descriptor lost that
    descriptor, and with it, until the process ended, the marker's flock (and the marker)."""
    with signals_deferred():
        with _held_guard:
            lock = _held.pop(path, None)
        if lock is not None or not os.path.lexists(path):
            with suppress(FileNotFoundError):
                os.unlink(path + LIVE_SUFFIX)
        if lock is not None:
            lock.release()


def discard(path: str) -> None:
    """Removes a claimed folder and its claim."""
    shutil.rmtree(path, ignore_errors=True)
    release(path)


def remove_dead(parent: str, name_prefix: str, claim_prefix: str) -> int:
    """Removes the folders in parent named name_prefix* whose claim nobody holds, their
    markers, and claim files nobody holds; returns how many folders went. A folder without a
    marker is left alone (it was made another way). The caller serialises cleaners of one
    parent if it needs to: two at once only ever both skip or both remove the same dead one."""
    if not FOLDER_LOCKS_WORK:
        return 0
    try:
        names = os.listdir(parent)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return 0  # nothing here to clean; what the caller does next says what is wrong
    removed = 0
    for name in names:
        if name.startswith(claim_prefix):
            _remove_if_unheld(os.path.join(parent, name), None)
        elif name.startswith(name_prefix):
            path = os.path.join(parent, name.removesuffix(LIVE_SUFFIX))
            is_folder = os.path.lexists(path)
            if name.endswith(LIVE_SUFFIX) and is_folder:
                continue  # judged with its folder
            if _remove_if_unheld(path + LIVE_SUFFIX, path) and is_folder:
                removed += 1
    return removed


def _remove_if_unheld(marker: str, folder: str | None) -> bool:
    """Removes folder (if any) and then marker when nobody holds the marker's lock; returns
    whether it did. A folder under a marker's or a claim's name was not made here and is left
    alone: it could not be unlinked, and would fail every later cleaning."""
    if _is_folder(marker):
        return False
    lock = try_lock(marker)
    if lock is None:  # held by a live process, or no marker at all
        return False
    try:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        with suppress(FileNotFoundError):
            os.unlink(marker)
    finally:
        lock.release()
    return True


def _is_folder(path: str) -> bool:
    """Whether path is a folder itself (not a link to one); False when there is nothing."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _forget_in_child() -> None:
    """A forked child holds none of its parent's claims: loaderx._os.lock_descriptors closed its
    copies of their descriptors, whose numbers the child may then reuse for files of its own,
    which a release of an inherited claim closed. (The guard is a ForkSafeLock: a parent thread
    may have held it at the fork, and the child gets it back unlocked.)"""
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


__all__ = ["LIVE_SUFFIX", "claim_folder", "discard", "release", "remove_dead"]
