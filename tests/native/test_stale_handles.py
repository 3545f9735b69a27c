"""Closed handles at the C ABI: a second close does nothing, and a call through a closed (stale)
handle is refused as a NULL handle is, even once a store or view opened since has taken the
closed one's memory; the new object keeps working.

Called through loaderx._native.library's declarations, as the library's own wrappers call it.
zig/src/c_abi/exports_handles_test.zig tests the same from Zig, where it also shows that the new store does
reuse the freed memory.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

from raw_store_handles import RECORD, open_store

from loaderx._native import library as _native

lib = _native.lib


def open_view(store: int) -> int:
    """A view over the one store."""
    handle = ctypes.c_void_p()
    code = lib.lx_view_open((ctypes.c_void_p * 1)(store), 1, ctypes.byref(handle))
    assert code == _native.OK, lib.lx_last_error()
    assert handle.value
    return handle.value


def gather(function: Callable[..., int], handle: int, indices: list[int]) -> tuple[int, bytes]:
    """(status, bytes written) of a dense gather; the buffer starts as 0xEE bytes."""
    index_array = (ctypes.c_int64 * len(indices))(*indices)
    out = (ctypes.c_uint8 * (RECORD * len(indices)))(*([0xEE] * (RECORD * len(indices))))
    code = function(handle, index_array, len(indices), out, RECORD)
    return code, bytes(out)


def expect_refused(code: int, fragment: str) -> None:
    assert code == _native.INVALID_ARGUMENT
    message = lib.lx_last_error().decode()
    assert fragment in message, message


def test_a_stale_store_handle_is_refused_and_the_new_store_keeps_working(tmp_path: Path) -> None:
    stale = open_store(tmp_path / "old", 0, 10)
    lib.lx_store_close(stale)
    lib.lx_store_close(stale)  # a second close does nothing
    fresh = open_store(tmp_path / "new", 100, 3)
    assert fresh != stale
    assert lib.lx_store_length(stale) == 0
    assert lib.lx_store_has_dict(stale) == 0
    code, written = gather(lib.lx_store_gather_fixed, stale, [0])
    expect_refused(code, "not an open lx_store")
    assert written == b"\xee" * RECORD
    lengths = (ctypes.c_uint64 * 1)(77)
    expect_refused(
        lib.lx_store_record_lengths(stale, (ctypes.c_int64 * 1)(0), 1, lengths),
        "not an open lx_store",
    )
    assert lengths[0] == 77
    expect_refused(
        lib.lx_store_append_fixed(stale, b"zzzz", RECORD, 1, 0, None), "not an open lx_store"
    )
    expect_refused(lib.lx_store_delete(stale, (ctypes.c_int64 * 1)(0), 1), "not an open lx_store")
    expect_refused(lib.lx_store_stats(stale, ctypes.byref(_native.Stats())), "not an open lx_store")
    expect_refused(lib.lx_store_sync(stale), "not an open lx_store")
    expect_refused(lib.lx_store_compact(stale), "not an open lx_store")
    view = ctypes.c_void_p()
    expect_refused(
        lib.lx_view_open((ctypes.c_void_p * 1)(stale), 1, ctypes.byref(view)),
        "store 0 is not an open lx_store",
    )
    assert not view.value
    expect_refused(
        lib.lx_store_gather_arrays(stale & 0xFFFFFFFF, stale >> 32, 0, 0, 0, 0, RECORD, 0),
        "not open",
    )
    lib.lx_store_close(stale)  # still nothing
    # The new store is untouched by all of it.
    assert lib.lx_store_length(fresh) == 3
    code, written = gather(lib.lx_store_gather_fixed, fresh, [2, 0])
    assert code == _native.OK
    assert written == bytes([102] * RECORD + [100] * RECORD)
    lib.lx_store_close(fresh)
    assert lib.lx_store_length(fresh) == 0


def test_a_stale_view_handle_is_refused_and_a_view_over_a_closed_store_too(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s", 0, 4)
    stale = open_view(store)
    lib.lx_view_close(stale)
    lib.lx_view_close(stale)  # a second close does nothing
    fresh = open_view(store)
    assert fresh != stale
    assert lib.lx_view_length(stale) == 0
    code, written = gather(lib.lx_view_gather_fixed, stale, [1])
    expect_refused(code, "not an open lx_view")
    assert written == b"\xee" * RECORD
    code, written = gather(lib.lx_view_gather_fixed, fresh, [3])
    assert code == _native.OK
    assert written == bytes([3] * RECORD)
    # The store closed under the view (the caller broke the borrow), and a new store opened,
    # perhaps in its memory: the view refuses instead of reading the newcomer.
    lib.lx_store_close(store)
    newcomer = open_store(tmp_path / "n", 50, 4)
    assert lib.lx_view_length(fresh) == 0
    code, written = gather(lib.lx_view_gather_fixed, fresh, [0])
    expect_refused(code, "closed before the view")
    assert written == b"\xee" * RECORD
    lib.lx_view_close(fresh)
    assert lib.lx_store_length(newcomer) == 4
    lib.lx_store_close(newcomer)
