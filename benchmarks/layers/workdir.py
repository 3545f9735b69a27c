"""Scratch space for the stores a run writes, and their removal off the timed path.

On this machine's disk (ext4 mounted with `discard`) unlinking a written file costs up to a
couple of milliseconds, so deleting the tens of thousands of chunk files that the zarr-style
stores create took longer than measuring them. Stores are therefore renamed into a trash
folder beside the work folder (a rename is one cheap metadata operation) and the trash is
deleted by a detached, low-priority `rm` once the run has printed everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path


class Trash:
    """The trash folder of one run: `<workdir>-trash`, on the same file system."""

    folder: Path | None = None


def configure(workdir: Path) -> None:
    Trash.folder = workdir.parent / f"{workdir.name}-trash"


def discard(path: Path) -> None:
    """Moves path (file or folder) out of the way; deleted after the run (now if unconfigured)."""
    if not path.exists() and not path.is_symlink():
        return
    if Trash.folder is None:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        return
    Trash.folder.mkdir(parents=True, exist_ok=True)
    os.replace(path, Trash.folder / f"{path.name}-{uuid.uuid4().hex[:8]}")


def empty_trash_later() -> None:
    """Starts a detached, niced `rm -rf` of the trash (synchronous removal without rm)."""
    bin_ = Trash.folder
    if bin_ is None or not bin_.exists():
        return
    rm = shutil.which("rm")
    if rm is None:
        shutil.rmtree(bin_, ignore_errors=True)
        return
    nice = shutil.which("nice")
    cmd = [nice, "-n", "19", rm, "-rf", str(bin_)] if nice else [rm, "-rf", str(bin_)]
    subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
