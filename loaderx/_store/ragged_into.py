"""The checks of a ragged gather into a caller's buffer (gather_packed; or record_offsets, then
gather_ragged_into; on Zrecord, View and ShardedStore).

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


__all__ = ["check_packed", "check_ragged_into", "check_record_offsets"]
