"""Appends through an open native store's handle, each all or nothing and retried after EMFILE."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._os import descriptors


def _appended(call: Any, context: str) -> int:
    """Runs call(first) (a native append that sets `first`, the index of its first record)
    and returns that index. A failed append changes nothing, so one out of descriptors
    (writer.lock, a chunk) runs again once the soft limit rose (descriptors.py)."""
    first = ctypes.c_uint64()
    descriptors.retrying(lambda: _native.check(call(ctypes.byref(first)), context), context)
    return int(first.value)


def append_packed(
    handle: int, data: bytes | None, offsets: npt.NDArray[np.uint64], tag: int, context: str
) -> int:
    """Appends the len(offsets) - 1 records packed in data (see pack_records), all with the
    codec `tag`; returns the index of the first."""
    count = len(offsets) - 1
    return _appended(
        lambda first: _native.lib.lx_store_append(
            handle, data, offsets.ctypes.data, count, tag, first
        ),
        context,
    )


def append_rows(
    handle: int, rows: npt.NDArray[Any], record_size: int, count: int, tag: int, context: str
) -> int:
    """Appends `count` records of record_size bytes each from the C-contiguous array rows;
    returns the index of the first."""
    return _appended(
        lambda first: _native.lib.lx_store_append_fixed(
            handle, rows.ctypes.data, record_size, count, tag, first
        ),
        context,
    )
