"""Filesystem helpers: probes that tell "absent" from "not allowed to look", and an atomic
file write.

os.path.exists and os.path.isfile answer False when a folder's permissions forbid looking
inside it, which would turn a store the caller cannot read into "no dataset here". These
probes raise PermissionError naming the folder instead.
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from typing import Final, TypeAlias

from loaderx._os import descriptors
from loaderx._os.urls import refuse_lost_slashes

# A path as the public API takes it: bytes too, as the os functions take them.
PathArg: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]


def fs_path(path: PathArg) -> str:
    """path as a str; bytes are decoded as os.fsdecode does, so that every file name (even one
    that is not UTF-8) round-trips to the same name through os.fsencode. A URL that lost its
    "//" ("s3:/bucket/ds", as a Path makes it) is refused here, where every public path enters,
    before anything is created."""
    return refuse_lost_slashes(os.fsdecode(path))


def exists(path: str) -> bool:
    """Whether there is something at path. Unlike os.path.exists, a folder the user may not
    enter raises PermissionError instead of passing for nothing there."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True


def is_file(path: str) -> bool:
    """Whether path is a regular file; PermissionError when its folder cannot be searched."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except PermissionError as exc:
        folder = os.path.dirname(path) or "."
        raise PermissionError(
            errno.EACCES,
            f"permission denied looking into {folder!r} (cannot tell whether it holds a "
            f"store; check the folder's permissions)",
            folder,
        ) from exc
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            return False
        raise


def folder_identity(path: str) -> tuple[int, int] | None:
    """Which folder path names now, as its (st_dev, st_ino), or None when nothing is there: a
    folder swap (a conversion with overwrite=True, a commit renaming a staged folder) puts
    another one in its place. Like exists, a folder the user may not look into raises instead
    of passing for nothing there."""
    try:
        found = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (found.st_dev, found.st_ino)


__all__ = ["PathArg", "folder_identity", "fs_path", "is_file"]


# Between a file's name and the rest of its temporary name in write_file_atomically.
TEMPORARY_MARK: Final = ".tmp-"


def write_file_atomically(path: str, data: bytes) -> None:
    """Replaces the file at path with data, all or nothing: a uniquely named temporary file
    beside it, fsync, then a rename over it (a killed writer leaves the old file, and two
    writers never share a temporary file). Syncing the folder is the caller's choice."""
    tmp = f"{path}{TEMPORARY_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        try:
            with descriptors.open_binary(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            if exc.filename is not None or exc.errno is None:
                raise
            # A write, flush or fsync error names no file (a full disk says only "No space
            # left on device"): say which file, keeping the errno and so the subclass.
            raise OSError(exc.errno, exc.strerror, path) from exc
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
