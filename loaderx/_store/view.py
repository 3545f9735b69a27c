"""View: several open Zrecord stores read as one index space, a thin layer over lx_view_*.

A gather through a view is one native call whatever the number of stores: the library routes
each global index to its store (prefix sums of the lengths, taken when the view is made; the
last store's range follows its live length) and runs the whole batch on its pool with the GIL
released. The view borrows the stores' handles, so it holds the stores (a store collected under
it would free its handle), and closing a store closes every view over it first.
Like Zrecord, calls in flight are tracked (NativeCalls, lock-free with a GIL), so close()
waits for them.
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._native.calls import NativeCalls, leave_all
from loaderx._store import shared_calls
from loaderx._store.zrecord import Zrecord



class View(NativeCalls):
    """The stores, in order, as one sequence of records (global indices 0 .. len - 1)."""

    name: str
    _stores: tuple[Zrecord, ...]
    _finalizer: weakref.finalize[Any, Any]

    def __init__(self, stores: Sequence[Zrecord], name: str) -> None:
        self.name = name
        self._init_calls()
        if not stores:
            raise ValueError("a view needs at least one store")
        self._stores = tuple(stores)
        # Each store counts this as a call in flight until the view is on its list: a close()
        # meanwhile waits, then closes the view with it (never a view over a freed store).
        mark = object()
        try:
            for store in self._stores:
                store._enter(mark)
            self._open()
        finally:
            leave_all(self._stores, mark)
        # Looked up once: the attribute chain costs as much as a small gather's bookkeeping.
        self._gather_fixed_native = _native.lib.lx_view_gather_fixed
        self._gather_arrays_native = _native.lib.lx_view_gather_arrays
        self._gather_packed_arrays_native = _native.lib.lx_view_gather_packed_arrays
        self._gather_packed_native = _native.lib.lx_view_gather_packed
        self._closed = False
        _OPEN_VIEWS.add(self)

    def _open(self) -> None:
        """The native view over the stores, entered on each store's list of views."""
        count = len(self._stores)
        handles = (ctypes.c_void_p * count)(*[store._handle for store in self._stores])
        out = ctypes.c_void_p()
        code = _native.lib.lx_view_open(handles, count, ctypes.byref(out))
        _native.check(code, f"cannot open a view over the {count} shards of {self.name!r}")
        if not out.value:
            raise RuntimeError(f"opening a view over {self.name!r} returned no handle")
        self._set_handle(out.value)
        # Frees the native view if this object is collected without close() (never its
        # stores); not at exit, for the reason Zrecord gives.
        self._finalizer = weakref.finalize(self, _native.lib.lx_view_close, out.value)
        self._finalizer.atexit = False
        for store in self._stores:
            store._views.add(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def _describe(self) -> str:
        return f"the view over {self.name!r}"

    def _label(self) -> str:
        return repr(self.name)

    def close(self) -> None:
        """Closes the view after calls already in flight return (never its stores)."""
        self._close_handle(lambda _handle: self._finalizer())
        self._stores = ()

    def __len__(self) -> int:
        mark = object()
        try:
            handle = self._enter(mark)
            return int(_native.lib.lx_view_length(handle))
        finally:
            self._marks.discard(mark)

    def gather_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> None:
        """Record indices[i] (global) into bytes [i*record_size, (i+1)*record_size) of out.

        The same contract as Zrecord.gather_into: indices a C-contiguous int64 array, out a
        writable C-contiguous array of exactly len(indices) * record_size bytes.
        """
        shared_calls.gather_fixed(
            self, _native.lib.lx_view_gather_fixed, repr(self.name), indices, out, record_size)

    def record_lengths(self, indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """The logical size of each selected (global, normalised) record."""
        mark = object()
        try:
            handle = self._enter(mark)
            return shared_calls.record_lengths(
                _native.lib.lx_view_record_lengths, handle, indices, repr(self.name))
        finally:
            self._marks.discard(mark)

    def gather_ragged(
        self, indices: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        """The selected (global, normalised) records in one buffer plus count+1 offsets."""
        mark = object()
        try:
            handle = self._enter(mark)
            return shared_calls.gather_ragged(
                _native.lib.lx_view_record_lengths, _native.lib.lx_view_gather, handle, indices,
                repr(self.name))
        finally:
            self._marks.discard(mark)

    def gather_packed(
        self, indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None = None,
    ) -> bool:
        """See Zrecord.gather_packed (global indices)."""
        return shared_calls.gather_packed(
            self, _native.lib.lx_view_gather_packed, repr(self.name), indices, row_size, out,
            offsets, rows)

    def gather_padded(
        self, indices: npt.NDArray[np.int64], row_size: int, pad_row: npt.NDArray[Any],
        lengths: npt.NDArray[np.uint64], truncate: bool, out: npt.NDArray[Any],
        mask: npt.NDArray[Any], rows: npt.NDArray[np.uint64],
    ) -> bool:
        """See Zrecord.gather_padded (global indices)."""
        return shared_calls.gather_padded(
            self, _native.lib.lx_view_gather_padded, repr(self.name), indices, row_size,
            pad_row, lengths, truncate, out, mask, rows)

    def record_offsets(
        self, indices: npt.NDArray[np.int64], row_size: int, offsets: npt.NDArray[np.uint64],
        rows: npt.NDArray[np.int32] | None = None,
    ) -> None:
        """See Zrecord.record_offsets (global indices)."""
        shared_calls.record_offsets(
            self, _native.lib.lx_view_record_offsets, repr(self.name), indices, row_size, offsets,
            rows)

    def gather_ragged_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], offsets: npt.NDArray[np.uint64]
    ) -> bool:
        """Global record indices[i] into out's bytes [offsets[i], offsets[i + 1]); the same
        contract as Zrecord.gather_ragged_into."""
        return shared_calls.gather_ragged_into(
            self, _native.lib.lx_view_gather, repr(self.name), indices, out, offsets)

# Every open View, for the fork handler below (weak: never keeps a view alive).
_OPEN_VIEWS: Final[weakref.WeakSet[View]] = weakref.WeakSet()


def _reset_views_after_fork() -> None:
    for view in list(_OPEN_VIEWS):
        view._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_views_after_fork)
