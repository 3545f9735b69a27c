"""A real tmpfs mounted for a test (the tests run as root, here and in CI): a full disk, or one
out of inodes, is then the kernel's, not a mock's."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """A tmpfs with `options` (size=16m, nr_inodes=64, ...) at mount, unmounted on exit. Fails
    the test (never skips it) where it cannot be mounted."""
    mount.mkdir(exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs ({options}) at {mount}: {result.stderr.strip()} -- "
                    "the full-disk tests need root (mount) and are not skipped")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def leave_free(mount: Path, free: int) -> Path:
    """Fills the file system until only about `free` bytes are left; returns the filler."""
    filler = mount / "filler"
    stats = os.statvfs(mount)
    with open(filler, "wb") as out:
        with contextlib.suppress(OSError):
            out.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - free))
    return filler
