"""The reads a Zrecord and a View make the same way, each through its own native function (the
lx_store_* and lx_view_* of each call take the same arguments): the checked fixed-size gather,
record lengths, a ragged gather into a new buffer, and the ragged gathers into a caller's buffer
(the packed gather, which sizes and copies in one call, and record_offsets then
gather_ragged_into, which do it in two).

A ragged loader makes one packed gather a step. The arrays it passes take a compiled short path
first (loaderx._native.calls.gather_packed, from RaggedDataset.gather_packed); what that path
declines comes here, where check_packed names what is wrong before the call
(benchmarks/reports/ragged-loader.md).
"""

from __future__ import annotations

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
    mark = object()
    try:
        handle = owner._enter(mark)  # also for no records: a closed store or view raises all the same
        if count:
            first, second = address(plain), address(out)
            code = _native.read_status(lambda: native(handle, first, count, second, record_size))
            if code:
                _native.raise_status(code, f"gather of {count} records from {label}")
    finally:
        owner._marks.discard(mark)


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


def gather_packed(
    owner: NativeCalls, native: Callable[..., int], label: str,
    indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
    offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None,
) -> bool:
    """One packed gather through `native` on `owner`'s handle (see Zrecord.gather_packed),
    every argument checked first: False, with nothing copied, when out is too small; the native
    error raised with `label` (what the records are "from") otherwise. A loader's arrays take
    the compiled short path before this (loaderx._native.calls.gather_packed, from
    RaggedDataset.gather_packed)."""
    count = check_packed(indices, out, offsets, rows)
    mark = object()
    try:
        handle = owner._enter(mark)
        code = native(
            handle, address(indices) if count else None, count, row_size,
            address(out) if out.nbytes else None, out.nbytes, address(offsets),
            None if rows is None else address(rows),
        )
    finally:
        owner._marks.discard(mark)
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
    mark = object()
    try:
        handle = owner._enter(mark)
        code = native(
            handle, address(indices) if count else None, count, row_size, address(pad_row),
            address(lengths) if len(lengths) else None, len(lengths),
            _native.PAD_TRUNCATE if truncate else 0,
            address(out) if out.nbytes else None, out.nbytes,
            address(mask) if mask.nbytes else None, mask.nbytes,
            rows_address if count else None, rows_address + 8 * count,
        )
    finally:
        owner._marks.discard(mark)
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
    mark = object()
    try:
        handle = owner._enter(mark)
        code = native(
            handle, address(indices) if count else None, count, row_size, address(offsets),
            None if rows is None else address(rows),
        )
    finally:
        owner._marks.discard(mark)
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
    mark = object()
    try:
        handle = owner._enter(mark)
        code = native(handle, address(indices), count, address(out), address(offsets))
    finally:
        owner._marks.discard(mark)
    if code == _native.SIZE_MISMATCH:
        return False
    _native.check(code, f"gather of {count} records from {label}")
    return True


__all__ = ["gather_fixed", "gather_packed", "gather_padded", "gather_ragged", "gather_ragged_into", "record_lengths",
           "record_offsets"]
