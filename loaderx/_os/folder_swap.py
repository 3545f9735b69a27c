"""Crash-safe replacement of a folder: build beside it, make it durable, swap, recover.

A folder `dst` is replaced through hidden siblings that share one random token:

    .<name>.loaderx-partial-<token>   being built; never complete (removed on recovery)
    .<name>.loaderx-new-<token>       complete and durable, not yet in place
    .<name>.loaderx-old-<token>       the previous `dst`, moved aside during the swap

The commit runs: fsync every file and the folder -> rename partial to new (fsync the parent) ->
rename dst to old -> rename new to dst (fsync the parent) -> remove old. A process killed
between any two steps leaves either `dst` (old or new, complete) or a new folder that recovery
renames into place, so `dst` is never lost. `recover(dst)` runs before every staging and when a
dataset is not found: it finishes a swap whose `dst` is missing, rolls back one that had not
started, and removes what killed runs left behind. The states it meets, by what is on disk:

    partial                  a build that never finished: removed
    new, dst                 the swap had not started: new removed, dst kept
    new, no dst              killed before new -> dst: new moved to dst
    new, old, no dst         killed between the two renames: new moved to dst, old removed
    old, dst                 killed while removing old: old removed
    old, no dst              the swap finished, and dst was removed since: old removed
    new, old, dst            dst made by someone else meanwhile: nothing can be placed, kept

A running conversion holds an flock on each of its hidden folders (the kernel drops it when the
process dies), so recovery in another process never touches a live one; commits and recoveries
of one parent folder are serialised by an flock on that parent. Where flock does not exist
(Windows) recovery assumes no other conversion of the same destination is running.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
from collections.abc import Callable
from types import TracebackType
from typing import Final

from loaderx._os import descriptors
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

# Whether FolderLock really locks (flock exists here). Without it every lock "succeeds", so
# nothing may judge a folder dead by taking its lock.
FOLDER_LOCKS_WORK: Final = fcntl is not None

PARTIAL: Final = "partial"
NEW: Final = "new"
OLD: Final = "old"
_HIDDEN: Final = re.compile(r"\.(?P<name>.+)\.loaderx-(?P<state>partial|new|old)-(?P<token>\w+)")


def hidden_name(name: str, state: str, token: str) -> str:
    return f".{name}.loaderx-{state}-{token}"


# --- durability and locks ----------------------------------------------------------------------


def fsync_folder(folder: str) -> None:
    """fsyncs a folder's entries (its renames and new files), where the OS allows it."""
    if os.name == "nt":
        return  # Windows cannot open a folder for fsync; NTFS journals renames itself
    fd = descriptors.os_open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(folder: str) -> None:
    """fsyncs every regular file under folder (a sharded dataset has shard folders), then every
    folder, deepest first, so each folder's entries are durable before its parent's."""
    # Windows flushes only handles open for writing; elsewhere reading is enough.
    mode = os.O_RDWR if os.name == "nt" else os.O_RDONLY
    for here, _folders, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(here, name)
            if os.path.islink(path):
                continue
            fd = descriptors.os_open(path, mode)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_folder(here)


class FolderLock:
    """An flock on a folder's inode: it follows the folder through renames, dies with us."""

    fd: int

    def __init__(self, folder: str, blocking: bool) -> None:
        self.fd = -1
        if fcntl is None:
            return
        try:
            # Registered: a forked child closes its copy (loaderx._os.lock_descriptors).
            self.fd = open_descriptor(folder, os.O_RDONLY)
        except PermissionError:
            return  # a folder we may not read is locked by nobody we know of
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            close_descriptor(self.fd)
            self.fd = -1
            raise

    def release(self) -> None:
        if self.fd >= 0:
            close_descriptor(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def try_lock(folder: str) -> FolderLock | None:
    """The folder's lock, or None while a live process holds it."""
    try:
        return FolderLock(folder, blocking=False)
    except BlockingIOError:
        return None
    except FileNotFoundError:
        return None  # gone meanwhile: nothing to do for it


# --- recovery ----------------------------------------------------------------------------------


def _leftovers(dst: str) -> dict[str, dict[str, str]]:
    """dst's hidden siblings grouped by token: {token: {state: path}}."""
    parent, name = os.path.split(dst)
    groups: dict[str, dict[str, str]] = {}
    for entry in os.listdir(parent):
        match = _HIDDEN.fullmatch(entry)
        if match and match["name"] == name:
            groups.setdefault(match["token"], {})[match["state"]] = os.path.join(parent, entry)
    return groups


def _settle(dst: str, group: dict[str, str]) -> None:
    """Finishes or rolls back one interrupted swap (every folder of it is locked by us)."""
    if PARTIAL in group:
        shutil.rmtree(group[PARTIAL])  # never completed: nothing in it is worth keeping
    new, old = group.get(NEW), group.get(OLD)
    present = os.path.lexists(dst)
    if new is not None and not present:
        os.replace(new, dst)  # the new folder was complete and durable: finish the swap
        new = None
        present = True
    if new is not None and old is None:
        shutil.rmtree(new)  # the swap never started: dst is the old folder, keep it
    elif old is not None and new is None:
        # The new folder became dst, so the swap had finished; dst is the new folder, or was
        # removed since by whoever owns it. Never put the old one back: that would bring a
        # deleted dataset's predecessor back to life.
        shutil.rmtree(old)
    # new and old both present with dst present means dst was created by someone else after
    # the old folder moved aside; neither is removed, as neither can be placed.


def interrupted_swap(dst: str) -> bool:
    """Whether a replacement of dst was interrupted with dst missing and its complete new
    folder waiting beside it (what recover() puts in place)."""
    try:
        groups = _leftovers(os.path.abspath(dst))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return False
    return not os.path.lexists(dst) and any(NEW in group for group in groups.values())


def recover(dst: str) -> None:
    """Finishes or rolls back interrupted swaps of dst and removes dead runs' hidden folders."""
    dst = os.path.abspath(dst)
    parent = os.path.dirname(dst)
    try:
        groups = _leftovers(dst)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return  # no parent folder, or one we may not list: nothing we could recover there
    if not groups:
        return
    with FolderLock(parent, blocking=True):
        for group in _leftovers(dst).values():
            locks = [try_lock(path) for path in group.values()]
            try:
                if all(lock is not None for lock in locks):
                    _settle(dst, group)
            finally:
                for lock in locks:
                    if lock is not None:
                        lock.release()
        fsync_folder(parent)


# --- staging and commit ------------------------------------------------------------------------


class StagedFolder:
    """A hidden folder beside dst, built by the caller, that replaces dst on commit()."""

    final: str
    path: str
    token: str
    _lock: FolderLock

    def __init__(self, dst: str) -> None:
        self.final = os.path.abspath(dst)
        parent, name = os.path.split(self.final)
        try:
            os.makedirs(parent, exist_ok=True)
        except FileExistsError:
            raise NotADirectoryError(
                errno.ENOTDIR, f"cannot create {self.final!r}: {parent!r} is a file, not a folder"
            ) from None
        recover(self.final)
        while True:
            self.token = secrets.token_hex(6)
            self.path = os.path.join(parent, hidden_name(name, PARTIAL, self.token))
            try:
                # Not tempfile.mkdtemp: its mode 0700 would become the user's store's; this
                # folder gets what the umask gives any folder.
                os.mkdir(self.path, 0o777)
            except FileExistsError:
                continue
            except OSError as error:
                # Named after the destination: the hidden staging folder's name would only
                # puzzle the user (a read-only folder, a full disk).
                raise type(error)(
                    error.errno, f"cannot create {self.final!r} ({error.strerror} in {parent!r})"
                ) from None
            # A recovery elsewhere (another conversion's, into the same destination) may remove
            # the unlocked folder as a crash's leftover before or while we lock it: make another.
            try:
                self._lock = FolderLock(self.path, blocking=True)
            except FileNotFoundError:
                continue
            if self._lock.fd < 0 or self._locked_folder_is_ours():
                break
            self._lock.release()

    def _locked_folder_is_ours(self) -> bool:
        """Whether the folder our lock holds is still the one at self.path."""
        try:
            return os.path.samestat(os.fstat(self._lock.fd), os.stat(self.path))
        except FileNotFoundError:
            return False

    def _sibling(self, state: str) -> str:
        parent, name = os.path.split(self.final)
        return os.path.join(parent, hidden_name(name, state, self.token))

    def commit(self, replace: bool, recheck: Callable[[], object] | None = None) -> None:
        """Makes the built folder durable and moves it to dst.

        replace: dst holds a folder to swap out (recheck, if given, runs again right before the
        swap and raises to refuse it); otherwise dst must be absent or an empty folder.
        """
        parent = os.path.dirname(self.final)
        fsync_tree(self.path)
        new = self._sibling(NEW)
        with FolderLock(parent, blocking=True):
            os.replace(self.path, new)
            self.path = new
            fsync_folder(parent)
            if replace:
                if recheck is not None:
                    recheck()
                self._swap(new)
            else:
                if os.path.isdir(self.final) and not os.path.islink(self.final):
                    self._remove_empty_final()
                os.replace(new, self.final)
                fsync_folder(parent)
        self._lock.release()

    def _remove_empty_final(self) -> None:
        """Removes the empty folder that was at the destination. It may have filled since (another
        conversion into the same new destination published first): then the destination exists,
        as a conversion without overwrite=True is told up front."""
        try:
            os.rmdir(self.final)
        except OSError as exc:
            if not os.path.isdir(self.final) or not os.listdir(self.final):
                raise
            raise FileExistsError(
                f"{self.final!r} already exists (another conversion published it first); pass "
                "overwrite=True to replace the store there"
            ) from exc

    def _swap(self, new: str) -> None:
        """dst -> old, new -> dst, each rename durable before the next; then old is removed."""
        parent = os.path.dirname(self.final)
        old = self._sibling(OLD)
        with FolderLock(self.final, blocking=True):
            os.replace(self.final, old)
            fsync_folder(parent)
            try:
                os.replace(new, self.final)
            except BaseException:
                os.replace(old, self.final)  # put the old folder back rather than lose both
                raise
            fsync_folder(parent)
            shutil.rmtree(old)
        fsync_folder(parent)

    def abort(self) -> None:
        """Removes the hidden folder (a failed build; dst was never touched)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self._lock.release()


__all__ = ["StagedFolder", "fsync_folder", "fsync_tree", "hidden_name", "interrupted_swap",
           "recover"]
