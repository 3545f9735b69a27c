"""Opening native stores, and the process's open stores, which a forked child resets."""

from __future__ import annotations

import ctypes
import os
import weakref
from typing import Final

from loaderx._native import library as _native
from loaderx._native.calls import NativeCalls
from loaderx._os import descriptors
from loaderx._os.open_wait import wait_until_openable

# Every open store, for the fork handler below (weak: a store is still closed by close() or
# collection, never kept alive by this set).
_OPEN_STORES: Final[weakref.WeakSet[NativeCalls]] = weakref.WeakSet()


def open_store_handle(path: str, flags: int) -> int:
    """lx_store_open of the store at path: its handle, or the status's exception."""
    handle = ctypes.c_void_p()
    context = f"cannot open Zrecord store {path!r}"

    def open_native() -> None:
        # A wait for another handle's delete, compact or train_dict, where Ctrl-C can end it.
        wait_until_openable(path)
        code = _native.lib.lx_store_open(os.fsencode(path), flags, ctypes.byref(handle))
        _native.check(code, context)

    # Out of descriptors, the soft limit rises towards the hard one (descriptors.py).
    descriptors.make_room(len(_OPEN_STORES))
    descriptors.retrying(open_native, context)
    if not handle.value:
        raise RuntimeError(f"opening {path!r} returned no store handle")
    return handle.value


def track_open(store: NativeCalls) -> None:
    """Counts `store` among the open stores, which a forked child resets (until collected)."""
    _OPEN_STORES.add(store)


def _reset_stores_after_fork() -> None:
    for store in list(_OPEN_STORES):
        store._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_stores_after_fork)
