"""The reads a Zrecord and a View make the same way, each through its own native function (the
lx_store_* and lx_view_* of each call take the same arguments): the checked fixed-size gather,
record lengths, a ragged gather into a new buffer, and the ragged gathers into a caller's buffer
(the packed gather, which sizes and copies in one call, and record_offsets then
gather_ragged_into, which do it in two).

A ragged loader makes one such call a step, so its Python side is kept short: arrays of the
exact types a loader passes (native int64 indices, uint64 offsets, int32 rows, writable and
C-contiguous) go straight to the call, their addresses taken by ctypes' from_buffer, which
refuses read-only and non-contiguous buffers by itself. Anything else takes check_packed's
path, which names what is wrong. On the VM with an 8 MiB L3 the checked path cost about 11 us
a call more than the dense read's (benchmarks/reports/ragged-loader.md).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._native.calls import NativeCalls, address
from loaderx._native.result_buffers import empty_bytes
from loaderx._store.ragged_into import (
    check_packed, check_padded, check_ragged_into, check_record_offsets,
)
from loaderx._store.record_batches import gather_arguments

_NDARRAY: Final = np.ndarray
_INT64: Final = np.dtype(np.int64)
_UINT64: Final = np.dtype(np.uint64)
_INT32: Final = np.dtype(np.int32)
_first_byte: Final[Callable[[Any], ctypes.c_char]] = ctypes.c_char.from_buffer
_addressof: Final = ctypes.addressof
# Sizing and copying a ragged gather are two native calls. A delete or compact from another
# thread may move records in between (each call is atomic, the pair is not); the copy then finds
# a slot of the wrong size and refuses to write, and the pair runs again, up to this many times.
_RAGGED_GATHER_ATTEMPTS: Final = 8


def gather_fixed(
    owner: NativeCalls, native: Callable[..., int], label: str, indices: npt.NDArray[np.int64],
    out: npt.NDArray[Any], record_size: int,
) -> None:
    """Record indices[i] into bytes [i*record_size, (i+1)*record_size) of out through `native`
    on `owner`'s handle, every argument checked first (record_batches.gather_arguments); the
    native error raised with `label` (what the records are "from")."""
    plain, count = gather_arguments(indices, out, record_size)
    handle = owner._enter()  # also for no records: a closed store or view raises all the same
    try:
        if count:
            first, second = address(plain), address(out)
            code = _native.read_status(lambda: native(handle, first, count, second, record_size))
            if code:
                _native.raise_status(code, f"gather of {count} records from {label}")
    finally:
        owner._leave()


def record_lengths(
    native: Callable[..., int], handle: int, indices: npt.NDArray[np.int64], label: str
) -> npt.NDArray[np.uint64]:
    """The logical size of each record of `indices` (normalised) by `native` on a handle the
    caller holds; the native error raised with `label` (where the records are)."""
    lengths = np.empty(len(indices), dtype=np.uint64)
    if len(indices):
        code = native(handle, indices.ctypes.data, len(indices), lengths.ctypes.data)
        _native.check(code, f"record lengths in {label}")
    return lengths


def gather_ragged(
    lengths: Callable[..., int], gather: Callable[..., int], handle: int,
    indices: npt.NDArray[np.int64], label: str,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
    """The records of `indices` (normalised) in one new uint8 buffer plus count+1 offsets into
    it, sized by `lengths` and copied by `gather` on a handle the caller holds; sized again
    when a record moved in between (_RAGGED_GATHER_ATTEMPTS)."""
    count = len(indices)
    offsets = np.zeros(count + 1, dtype=np.uint64)
    for _attempt in range(_RAGGED_GATHER_ATTEMPTS):
        np.cumsum(record_lengths(lengths, handle, indices, label), out=offsets[1:])
        data = empty_bytes(int(offsets[-1]))
        if not count:
            return data, offsets
        code = _native.read_status(lambda: gather(
            handle, indices.ctypes.data, count, data.ctypes.data, offsets.ctypes.data
        ))
        if code != _native.SIZE_MISMATCH:
            break
    _native.check(code, f"gather of {count} records from {label}")
    return data, offsets


def _fast_addresses(
    indices: object, out: object, offsets: object, rows: object
) -> tuple[int, int, int, int, int, int | None] | None:
    """(count, out's bytes, and the addresses of indices, out, offsets and rows) when every
    array is what a loader passes; None sends the call through the checked path."""
    if (type(indices) is not _NDARRAY or type(out) is not _NDARRAY
            or type(offsets) is not _NDARRAY):
        return None
    if indices.dtype is not _INT64 or offsets.dtype is not _UINT64 or indices.ndim != 1:
        return None
    count = len(indices)
    size = out.nbytes
    if not count or not size or offsets.ndim != 1 or len(offsets) != count + 1:
        return None
    if rows is not None and (type(rows) is not _NDARRAY or rows.dtype is not _INT32
                             or rows.ndim != 1 or len(rows) != count + 1):
        return None
    try:
        # from_buffer refuses read-only and non-contiguous buffers: those take the checked
        # path, which accepts read-only indices and says what is wrong with the rest.
        return (count, size, _addressof(_first_byte(indices)), _addressof(_first_byte(out)),
                _addressof(_first_byte(offsets)),
                None if rows is None else _addressof(_first_byte(rows)))
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return None


def gather_packed(
    owner: NativeCalls, native: Callable[..., int], label: str,
    indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
    offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None,
) -> bool:
    """One packed gather through `native` on `owner`'s handle (see Zrecord.gather_packed):
    False, with nothing copied, when out is too small; the native error raised with `label`
    (what the records are "from") otherwise."""
    fast = _fast_addresses(indices, out, offsets, rows)
    if fast is not None:
        count, size, first, second, third, fourth = fast
        handle = owner._enter()
        try:
            code = native(handle, first, count, row_size, second, size, third, fourth)
        finally:
            owner._leave()
    else:
        count = check_packed(indices, out, offsets, rows)
        handle = owner._enter()
        try:
            code = native(
                handle, address(indices) if count else None, count, row_size,
                address(out) if out.nbytes else None, out.nbytes, address(offsets),
                None if rows is None else address(rows),
            )
        finally:
            owner._leave()
    if code == _native.SIZE_MISMATCH:
        return False
    if code:
        _native.check(code, f"gather of {count} records from {label}")
    return True


def gather_padded(
    owner: NativeCalls, native: Callable[..., int], label: str,
    indices: npt.NDArray[np.int64], row_size: int, pad_row: npt.NDArray[Any],
    lengths: npt.NDArray[np.uint64], truncate: bool, out: npt.NDArray[Any],
    mask: npt.NDArray[Any], rows: npt.NDArray[np.uint64],
) -> bool:
    """One padded gather through `native` on `owner`'s handle (see Zrecord.gather_padded):
    False, with only rows written, when the batch does not fit out and mask or a record is
    longer than every allowed length; the native error raised with `label` otherwise."""
    count = check_padded(indices, row_size, pad_row, lengths, out, mask, rows)
    rows_address = address(rows)
    handle = owner._enter()
    try:
        code = native(
            handle, address(indices) if count else None, count, row_size, address(pad_row),
            address(lengths) if len(lengths) else None, len(lengths),
            _native.PAD_TRUNCATE if truncate else 0,
            address(out) if out.nbytes else None, out.nbytes,
            address(mask) if mask.nbytes else None, mask.nbytes,
            rows_address if count else None, rows_address + 8 * count,
        )
    finally:
        owner._leave()
    if code == _native.SIZE_MISMATCH:
        return False
    if code:
        _native.check(code, f"padded gather of {count} records from {label}")
    return True


def record_offsets(
    owner: NativeCalls, native: Callable[..., int], label: str,
    indices: npt.NDArray[np.int64], row_size: int, offsets: npt.NDArray[np.uint64],
    rows: npt.NDArray[np.int32] | None,
) -> None:
    """One record_offsets call through `native` on `owner`'s handle (see
    Zrecord.record_offsets); the native error raised with `label` (where the records are)."""
    count = check_record_offsets(indices, offsets, rows)
    handle = owner._enter()
    try:
        code = native(
            handle, address(indices) if count else None, count, row_size, address(offsets),
            None if rows is None else address(rows),
        )
    finally:
        owner._leave()
    if code:
        _native.check(code, f"record offsets in {label}")


def gather_ragged_into(
    owner: NativeCalls, native: Callable[..., int], label: str,
    indices: npt.NDArray[np.int64], out: npt.NDArray[Any], offsets: npt.NDArray[np.uint64],
) -> bool:
    """One gather into given offsets through `native` on `owner`'s handle (see
    Zrecord.gather_ragged_into): False when a record no longer has its slot's size; the
    native error raised with `label` (what the records are "from") otherwise."""
    count = check_ragged_into(indices, out, offsets)
    if count == 0:
        return True
    handle = owner._enter()
    try:
        code = native(handle, address(indices), count, address(out), address(offsets))
    finally:
        owner._leave()
    if code == _native.SIZE_MISMATCH:
        return False
    _native.check(code, f"gather of {count} records from {label}")
    return True


__all__ = ["gather_fixed", "gather_packed", "gather_padded", "gather_ragged", "gather_ragged_into", "record_lengths",
           "record_offsets"]
