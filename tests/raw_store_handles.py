"""Stores opened straight through the C ABI, for tests that hold raw handles (views over them,
stale handles, routing checks)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from loaderx._native import library as _native

lib = _native.lib
RECORD = 4


def open_store(folder: Path, first_byte: int, count: int) -> int:
    """A new store in `folder` whose record i is RECORD bytes of first_byte + i."""
    folder.mkdir()
    handle = ctypes.c_void_p()
    code = lib.lx_store_open(os.fsencode(folder), _native.OPEN_CREATE, ctypes.byref(handle))
    assert code == _native.OK, lib.lx_last_error()
    assert handle.value
    data = bytes(b for i in range(count) for b in [first_byte + i] * RECORD)
    first = ctypes.c_uint64(99)
    code = lib.lx_store_append_fixed(handle.value, data, RECORD, count, 0, ctypes.byref(first))
    assert code == _native.OK, lib.lx_last_error()
    assert first.value == 0
    return handle.value
