"""Filesystem probes that tell "absent" from "not allowed to look".

os.path.exists and os.path.isfile answer False when a folder's permissions forbid looking
inside it, which would turn a store the caller cannot read into "no dataset here". These
probes raise PermissionError naming the folder instead.
"""

from __future__ import annotations

import errno
import os
import stat


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


__all__ = ["is_file"]
