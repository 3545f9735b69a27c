"""The checks of a ragged gather into a caller's buffer (gather_packed; or record_offsets, then
gather_ragged_into; or gather_padded; on Zrecord, View and ShardedStore).

gather_packed sizes and copies in one native call, into a buffer of any size: when it is too
small nothing is copied, and the offsets say how many bytes it needs.

The caller sizes the records first (record_offsets: their running byte offsets, and row offsets
for a packed batch, in one native call) and passes those offsets to the gather, so that one
buffer can be reused from step to step, or filled by several stores in turn (a mixture's
sources): record indices[i] goes to out's bytes [offsets[i], offsets[i + 1]).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

_INT64: Final = np.dtype(np.int64)
_UINT64: Final = np.dtype(np.uint64)
_INT32: Final = np.dtype(np.int32)


def _one_dimensional(array: object, name: str, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    if not isinstance(array, np.ndarray) or array.dtype != dtype:
        raise TypeError(f"{name} must be a {dtype} numpy array")
    if array.ndim != 1 or not array.flags.c_contiguous:
        raise ValueError(f"{name} must be a one-dimensional C-contiguous array")
    if not array.flags.aligned:
        # The library reads and writes these elements as C integers, only at their alignment.
        raise ValueError(
            f"{name} is not aligned to its {array.dtype.itemsize}-byte elements (a view at an "
            f"odd byte offset): pass an aligned array, such as {name}.copy()"
        )
    return array


def check_ragged_into(indices: object, out: object, offsets: object) -> int:
    """The record count of a gather_ragged_into call, or TypeError / ValueError naming what
    is wrong with its arguments (indices are range-checked by the native call)."""
    checked = _one_dimensional(indices, "indices", _INT64)
    bounds = _one_dimensional(offsets, "offsets", _UINT64)
    count = len(checked)
    if len(bounds) != count + 1:
        raise ValueError(f"offsets has {len(bounds)} entries; {count} records need {count + 1}")
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writable C-contiguous numpy array")
    if count and int(bounds[-1]) > out.nbytes:
        raise ValueError(f"out holds {out.nbytes} bytes; the offsets end at {int(bounds[-1])}")
    return count


def check_record_offsets(indices: object, offsets: object, rows: object) -> int:
    """The record count of a record_offsets call, or TypeError / ValueError naming what is
    wrong: offsets (uint64) and rows (int32, or None) need one entry more than indices, and
    must be writable."""
    checked = _one_dimensional(indices, "indices", _INT64)
    count = len(checked)
    for name, array, dtype in (("offsets", offsets, _UINT64), ("rows", rows, _INT32)):
        if array is None and name == "rows":
            continue
        out = _one_dimensional(array, name, dtype)
        if len(out) != count + 1:
            raise ValueError(f"{name} has {len(out)} entries; {count} records need {count + 1}")
        if not out.flags.writeable:
            raise ValueError(f"{name} must be writable")
    return count


def check_packed(indices: object, out: object, offsets: object, rows: object) -> int:
    """The record count of a gather_packed call (record_offsets' arguments and a writable
    C-contiguous out of any size), or TypeError / ValueError naming what is wrong."""
    count = check_record_offsets(indices, offsets, rows)
    if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writable C-contiguous numpy array")
    return count


def _writable(array: object, name: str) -> npt.NDArray[Any]:
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{name} must be a writable C-contiguous numpy array")
    return array


def check_padded(indices: object, row_size: int, pad_row: object, lengths: object,
                 out: object, mask: object, rows: object) -> int:
    """The record count of a gather_padded call, or TypeError / ValueError naming what is
    wrong: int64 indices; pad_row a C-contiguous array of row_size bytes; lengths uint64,
    increasing, each at least 1 (may be empty); out and mask writable and C-contiguous, of
    any size; rows writable uint64 with one entry more than indices. The native call checks
    the rest (overlaps, sizes that overflow) and writes nothing when it refuses."""
    count = len(_one_dimensional(indices, "indices", _INT64))
    allowed = _one_dimensional(lengths, "lengths", _UINT64)
    if len(allowed) and (int(allowed[0]) < 1 or bool((allowed[1:] <= allowed[:-1]).any())):
        raise ValueError(f"lengths must increase from at least 1, got {allowed.tolist()}")
    if not isinstance(pad_row, np.ndarray) or not pad_row.flags.c_contiguous:
        raise ValueError("pad_row must be a C-contiguous numpy array")
    if row_size < 1 or pad_row.nbytes != row_size:
        raise ValueError(f"pad_row holds {pad_row.nbytes} bytes, not the row's {row_size}")
    _writable(out, "out")
    _writable(mask, "mask")
    counts = _one_dimensional(rows, "rows", _UINT64)
    if len(counts) != count + 1:
        raise ValueError(f"rows has {len(counts)} entries; {count} records need {count + 1}")
    _writable(counts, "rows")
    return count


__all__ = ["check_packed", "check_padded", "check_ragged_into", "check_record_offsets"]
