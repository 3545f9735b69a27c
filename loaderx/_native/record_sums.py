"""The checksum sums.zr holds for each of some records that a caller fetched itself.

The remote cache (loaderx._remote.fetcher) checks every record it downloads against the
dataset's sums.zr before a reader may see it; the sum is computed by the same native code that
wrote it, so the two can never disagree on the algorithm (CRC32C of the stored bytes, then the
logical length and the codec byte: docs/format.md).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native

_ONE_BYTE: Final = np.zeros(1, dtype=np.uint8)  # a valid pointer when the data is empty


def record_sums(
    data: bytes | bytearray | memoryview,
    starts: npt.NDArray[np.uint64],
    stored: npt.NDArray[np.uint32],
    logical: npt.NDArray[np.uint32],
    codecs: npt.NDArray[np.uint8],
) -> npt.NDArray[np.uint32]:
    """The sum of record i, stored[i] bytes at data[starts[i]:], with its logical length and
    codec. ValueError (nothing computed) for a record past the data or an unknown codec."""
    count = len(starts)
    if not len(stored) == len(logical) == len(codecs) == count:
        raise ValueError("starts, stored, logical and codecs must have one value per record")
    out = np.empty(count, dtype=np.uint32)
    if count == 0:
        return out
    buffer = np.frombuffer(data, dtype=np.uint8) if len(data) else _ONE_BYTE
    columns: list[npt.NDArray[Any]] = [
        np.ascontiguousarray(starts, dtype=np.uint64),
        np.ascontiguousarray(stored, dtype=np.uint32),
        np.ascontiguousarray(logical, dtype=np.uint32),
        np.ascontiguousarray(codecs, dtype=np.uint8),
    ]
    code = _native.lib.lx_record_sums(
        buffer.ctypes.data, len(data), *(column.ctypes.data for column in columns), count,
        out.ctypes.data,
    )
    _native.check(code, "checksumming fetched records")
    return out


__all__ = ["record_sums"]
