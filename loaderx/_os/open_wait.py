"""Waits, where a Ctrl-C can interrupt it, while another handle holds a store exclusively.

Opening a store takes open.lock shared, and a delete, compact or train_dict holds it exclusively
for its whole length. The native open waits for such a holder (up to 60 s, lock.zig's
shared_wait_ms), but inside one call with the GIL released: Python runs a Ctrl-C's handler only
between bytecodes, so the KeyboardInterrupt came when the wait ended. Zrecord therefore waits
here first, polling the lock from Python with short sleeps, and calls the native open once a
shared lock could be taken. Another handle may still take the store between the two (the
native open then waits as before); this wait only makes the common case interruptible.

The probe's descriptor is a registered lock descriptor (loaderx._os.lock_descriptors): a copy that
a fork in another thread handed to a child while the probe held the shared lock would keep it
for the child's life.

Left interpreted: it runs once per open.
"""

from __future__ import annotations

import os
import time
from typing import Final

from loaderx.errors import StoreLockedError
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor

try:
    import fcntl
except ImportError:  # pragma: no cover - no flock on this platform: the native open waits
    fcntl = None  # type: ignore[assignment]

OPEN_LOCK_FILE: Final = "open.lock"  # lock.zig's open_file_name
# The native open's own limit (lock.zig's shared_wait_ms), so an open waits as long as before.
WAIT_SECONDS: Final = 60.0
# Between tries (lock.zig polls every 5 ms; a Ctrl-C is seen within one poll).
POLL_SECONDS: Final = 0.005


def wait_until_openable(folder: str) -> None:
    """Returns once no other handle holds `folder`'s store exclusively (at once when none does,
    or when open.lock is absent or cannot be read: the native open then decides).
    StoreLockedError after WAIT_SECONDS, with the native open's wording."""
    if fcntl is None:
        return
    try:
        fd = open_descriptor(os.path.join(folder, OPEN_LOCK_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
            if _try_shared(fd):
                break
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"cannot open Zrecord store {folder!r}: another handle has held the store "
                    f"exclusively (a delete, compact or train_dict holding {OPEN_LOCK_FILE}) for "
                    f"over {WAIT_SECONDS:.0f} s; try again later"
                )
            time.sleep(POLL_SECONDS)
    finally:
        close_descriptor(fd)  # releases the probe's shared lock


def _try_shared(fd: int) -> bool:
    """Whether a shared flock on fd could be taken now (True too when flock itself fails: the
    native open reports what is wrong with the lock file)."""
    assert fcntl is not None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True
