"""pad_rows: a packed ragged batch padded to a length of rows, with its mask, in one native call.

A padded stream of a MixtureLoader (loaderx._loading.ragged_batch) calls it every step, on the
packed bytes its gathers wrote (a DataLoader's padded step is one gather_padded call instead),
and pad_into for arrays in memory: so the checks here are only those memory safety needs
before the call
(NumPy arrays, C-contiguous, int32 offsets); lx_batch_pad checks everything else (sizes,
offsets, overlaps) and writes nothing when it refuses.

Left interpreted: it is ctypes glue around one call.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._native.calls import address

_PAD: Final = _native.lib.lx_batch_pad
_OK: Final = _native.OK
_INT32: Final = np.dtype(np.int32)
_NDARRAY: Final = np.ndarray


def _address(array: Any, name: str) -> int:
    """The data pointer of array (calls.address), once it is a C-contiguous ndarray;
    TypeError or ValueError naming it."""
    if type(array) is not _NDARRAY:
        raise TypeError(f"{name} must be a numpy array, not {type(array).__name__}")
    if not array.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return address(array)


def _writable(array: Any, name: str) -> int:
    pointer = _address(array, name)
    if not array.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return pointer


def pad_rows(values: npt.NDArray[Any], cu: npt.NDArray[np.int32], row_size: int,
             pad_row: npt.NDArray[Any], length: int, out: npt.NDArray[Any],
             mask: npt.NDArray[Any]) -> None:
    """Record i, rows cu[i]..cu[i + 1] of values' bytes (rows of row_size bytes), into the
    first bytes of out as the (len(cu) - 1, length) rows of a padded batch: its first
    min(n_i, length) rows, then pad_row's row_size bytes repeated; mask's first
    (len(cu) - 1) * length bytes are 1 for a record row, 0 for a padding row. A longer record
    keeps its first rows.

    Every array is a C-contiguous ndarray of any dtype, taken as its bytes (out and mask may be
    larger than the batch needs; nothing past it is written); cu is int32. TypeError or
    ValueError, with nothing written, for anything else: offsets that are negative, decrease or
    run past values, out or mask too small, pad_row not row_size bytes, or buffers that overlap.
    """
    if type(cu) is not _NDARRAY or cu.dtype is not _INT32:
        raise TypeError(f"cu must be an int32 numpy array, not {getattr(cu, 'dtype', type(cu))}")
    if cu.ndim != 1 or len(cu) == 0:
        raise ValueError(f"cu must be one-dimensional with at least one offset, not of shape {cu.shape}")
    if not cu.flags.aligned:
        raise ValueError("cu must be aligned to 4 bytes (the library reads it as int32_t)")
    row_address = _address(pad_row, "pad_row")
    if pad_row.nbytes != row_size:
        raise ValueError(f"pad_row holds {pad_row.nbytes} bytes, not the row's {row_size}")
    code: int = _PAD(
        _address(values, "values"), values.nbytes, _address(cu, "cu"), len(cu) - 1, row_size,
        row_address, length, _writable(out, "out"), out.nbytes, _writable(mask, "mask"),
        mask.nbytes,
    )
    if code != _OK:
        _native.raise_status(code, "padding a ragged batch")


__all__ = ["pad_rows"]
