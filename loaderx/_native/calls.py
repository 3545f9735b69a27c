"""NativeCalls: what a Python object over one native handle (a Zrecord's store, a View's view)
needs around its calls: the calls in flight, so that close() waits for them and later calls
raise ValueError; a fresh lock in a forked child; and the dense read's fast path, the hottest
call of the library, written once for both.

Calls in flight are the items of a list past its placeholders (the dense fast path's, each a
None) and of a set (every other call's, each an object of the caller's own). With a GIL they
enter and leave without the lock: list.append and set.add are single atomic operations and
every Python step is sequentially consistent, so "mark, then read _closed" in a call and "set
_closed, then count the marks" in close() can never both miss each other. Free-threaded builds
give no such ordering between a container and an attribute, so there the lock guards the
marking. A GIL can be re-enabled at run time but never disabled, so deciding at import is safe.

Ctrl-C must not leave a call marked in flight, or close() would wait for it forever. The
interpreter raises a signal handler's exception only after a call returns or as a Python
function starts, never before a call runs. So a call's mark is taken as the first call inside
the `try` whose `finally` takes it back, and taken back by one call of a C method
(`_marks.discard(mark)`, `_calls.pop()`): an interrupt that lands after the mark is taken lands
inside the `try`, and the `finally` cannot be cut short before the mark is gone. A mark of the
caller's own (`mark = object()`, made before the `try`) makes the discard right also when the
interrupt came before _enter took it (as _enter starts, interpreted): it then removes nothing,
where removing "a mark" would take another call's. Calls other than the fast path do not
notify close(); it looks at the marks again every _CLOSE_POLL_SECONDS. Before this, a mark was
left by an interrupt landing as _enter returned: 289 in 5,000 SIGALRMs raised in a loop of
len(store), each a close() that waited forever.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._native import array_fields
from loaderx._os.kept_locks import release_kept

# The one fallback of mypyc_attr, which the compiled classes import from here: read by mypyc at
# compile time, and a no-op where a user's environment lacks mypy_extensions.
try:
    from mypy_extensions import mypyc_attr as mypyc_attr
except ImportError:  # pragma: no cover - exercised only without mypy installed

    def mypyc_attr(  # type: ignore[misc]
        *_args: object, **_kwargs: object
    ) -> Callable[[type[Any]], type[Any]]:
        return lambda cls: cls

LOCK_FREE_CALLS: Final = bool(getattr(sys, "_is_gil_enabled", lambda: True)())
# Whether the dense and packed reads pass their arrays by their fields, in 32-bit halves
# (array_fields.py).
ARRAY_CALLS: Final = array_fields.WORKS
_LOW: Final = array_fields.LOW
_FIELDS: Final = array_fields.OFFSET

_OK: Final = _native.OK
_INDEX_OUT_OF_RANGE: Final = _native.INDEX_OUT_OF_RANGE
_INVALID_ARGUMENT: Final = _native.INVALID_ARGUMENT
_VIEW_STALE: Final = _native.VIEW_STALE
_TOO_MANY_OPEN_FILES: Final = _native.TOO_MANY_OPEN_FILES
_SIZE_MISMATCH: Final = _native.SIZE_MISMATCH
_INT64: Final = np.dtype(np.int64)
_UINT64: Final = np.dtype(np.uint64)
_INT32: Final = np.dtype(np.int32)
# Held here: compiled code reads a Final from a static, where np.ndarray is an attribute lookup
# on the numpy module at every call (four of them on the fast path of a small read).
NDARRAY: Final = np.ndarray
_BYTE: Final = ctypes.c_char
# A writable array's address as _addressof(_first_byte(array)): about half the cost of
# ndarray.ctypes.data; from_buffer refuses read-only and non-contiguous buffers.
_first_byte: Final[Callable[[Any], ctypes.c_char]] = ctypes.c_char.from_buffer
_addressof: Final = ctypes.addressof


# A list of calls in flight starts with this many placeholders: one that empties entirely
# frees its storage on the pop and allocates it again on the next append (about 50 ns a call in
# a scratch timeit on the VM with an 8 MiB L3).
_IDLE_LENGTH: Final = 4


# How often close() counts the calls in flight again when no call notified it.
_CLOSE_POLL_SECONDS: Final = 0.01


def _idle_calls() -> list[None]:
    return [None] * _IDLE_LENGTH


def _wake_closer(owner: NativeCalls) -> None:
    """Wakes a close() waiting for the calls in flight on `owner` (it also looks again by
    itself, so an interrupt that skips this costs it a poll, no more)."""
    try:
        with owner._lock:
            owner._idle.notify_all()
    except BaseException:
        release_kept(owner._lock)  # no level is held here by design (kept_locks)
        raise


def leave_all(owners: Sequence[NativeCalls], mark: object) -> None:
    """Takes `mark` back from every owner (from those _enter marked; discard ignores the
    others): one compiled call, so that no interrupt lands between two owners and leaves a
    later one's mark (module docstring)."""
    for owner in owners:
        owner._marks.discard(mark)


@mypyc_attr(allow_interpreted_subclasses=True)
class NativeCalls:
    """The calls in flight on `_handle`; subclasses set `_gather_fixed_native`,
    `_gather_arrays_native` (the exports gather_fixed calls), `_gather_packed_arrays_native`
    and `_gather_packed_native` (the ones gather_packed calls) and name themselves for messages:
    `_describe()` ("Zrecord '/data/x'") and `_label()` ("'/data/x'", what a failed gather is
    "from")."""

    _handle: int
    _handle_low: object
    _handle_high: object
    _calls: list[None]
    _marks: set[object]
    _closed: bool
    _lock: threading.RLock
    _idle: threading.Condition
    _gather_fixed_native: Any
    _gather_arrays_native: Any
    _gather_packed_arrays_native: Any
    _gather_packed_native: Any

    def _init_calls(self) -> None:
        """Closed, with no handle yet: the subclass opens one, then sets _closed to False."""
        self._handle = 0
        self._handle_low = 0
        self._handle_high = 0
        self._calls = _idle_calls()
        self._marks = set()
        self._closed = True
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)

    def _set_handle(self, handle: int) -> None:
        """The native handle, with its two 32-bit halves boxed once here rather than at every
        fast-path call (two allocations a call otherwise)."""
        self._handle = handle
        self._handle_low = handle & _LOW
        self._handle_high = handle >> 32

    def _describe(self) -> str:
        raise NotImplementedError

    def _label(self) -> str:
        raise NotImplementedError

    def _closed_error(self) -> ValueError:
        return ValueError(f"{self._describe()} is closed")

    def _reset_after_fork(self) -> None:
        """In a forked child: the parent's threads (and their calls in flight) do not exist here,
        and one of them may have held the lock at the moment of fork."""
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._calls = _idle_calls()
        self._marks = set()

    def _enter(self, mark: object) -> int:
        """Marks a call in flight with `mark` (an object of the caller's own) and returns the
        handle; ValueError once closed. The first call inside the `try` whose `finally` calls
        `_marks.discard(mark)`, also when this raises (module docstring)."""
        if LOCK_FREE_CALLS:
            self._marks.add(mark)
            if not self._closed:
                return self._handle
        else:
            try:
                with self._lock:
                    if not self._closed:
                        self._marks.add(mark)
                        return self._handle
            except BaseException:
                release_kept(self._lock)  # no level is held here by design (kept_locks)
                raise
        raise self._closed_error()

    def _in_flight(self) -> int:
        return len(self._calls) - _IDLE_LENGTH + len(self._marks)

    def _close_handle(self, release: Callable[[int], object]) -> None:
        """Marks the object closed, waits for the calls in flight, then releases the handle."""
        try:
            with self._lock:
                self._closed = True
                while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                    if not self._in_flight():
                        break
                    # Only the fast path notifies, and an interrupt may cut that short.
                    self._idle.wait(_CLOSE_POLL_SECONDS)
                if self._handle:
                    handle = self._handle
                    self._set_handle(0)
                    release(handle)
        except BaseException:
            release_kept(self._lock)  # no level is held here by design (kept_locks)
            raise

    def gather_fixed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> bool:
        """The dense read's fast path (the module function gather_fixed, which compiled callers
        call directly)."""
        return gather_fixed(self, indices, out, record_size)


def gather_fixed(
    owner: NativeCalls, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
) -> bool:
    """The dense read with nothing but the checks memory safety needs: True once done.

    False, with nothing copied, when the fast path does not apply: indices not a non-empty,
    C-contiguous, one-dimensional native int64 array, out not a writable C-contiguous array of
    len(indices) * record_size bytes, or any index outside 0 <= i < len (negative ones
    included). The caller then takes its general path, which normalises the index and raises
    the documented errors. The bounds check is native: the indices are scanned once, before
    any byte moves.

    With ARRAY_CALLS the arrays go by their fields and the native side makes every check past
    the dtype (out's size from its first dimension and strides[0]). What it cannot prove that
    way (a batch of one record: NumPy lets a dimension of 1 have any stride) it declines before
    any byte moves, and a second call passes out's size as NumPy gives it; what the fields way
    does not take at all (misaligned indices) goes through the data pointers.

    A function rather than the method: compiled callers call it directly, where a method of a
    class that interpreted classes subclass is looked up by name at every call.
    """
    if type(indices) is not NDARRAY or indices.dtype is not _INT64 or type(out) is not NDARRAY:
        return False
    if ARRAY_CALLS and 0 < record_size <= _LOW:
        # array_fields.fields_address, written out: an interpreted call per array here.
        first = id(indices) + _FIELDS
        second = id(out) + _FIELDS
        code = _gather(owner, first, 0, second, record_size, True)
        if code != _INVALID_ARGUMENT:
            return _finish(owner, code, indices)
        size = out.nbytes
        if 0 < size <= _LOW and indices.ndim == 1 and size == len(indices) * record_size:
            code = _gather(owner, first, size, second, record_size, True)
            if code != _INVALID_ARGUMENT:
                return _finish(owner, code, indices)
    return _gather_by_pointers(owner, indices, out, record_size)


def _gather_by_pointers(
    owner: NativeCalls, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
) -> bool:
    """gather_fixed through the arrays' data pointers, with the shape checks made here. Indices
    that are not aligned (a view at an odd offset) are the general path's: it copies them, since
    the library may read int64_t only at an 8-byte boundary."""
    if indices.ndim != 1 or not indices.flags.aligned:
        return False
    count = len(indices)
    if not count or out.nbytes != count * record_size:
        return False
    try:
        # Both calls refuse read-only and non-contiguous buffers (the slow path's business).
        first = _addressof(_first_byte(indices))
        second = _addressof(_first_byte(out))
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return False
    return _finish(owner, _gather(owner, first, count, second, record_size, False), indices)


def _finish(owner: NativeCalls, code: int, indices: npt.NDArray[np.int64]) -> bool:
    """gather_fixed's answer for a native status other than a declined argument."""
    if code == _OK:
        return True
    if code == _INDEX_OUT_OF_RANGE or code == _VIEW_STALE or code == _TOO_MANY_OPEN_FILES:
        # The general path reports the index, reads through a new view, or reads again once
        # the descriptor limit rose (library.read_status).
        return False
    _native.raise_status(code, f"gather of {len(indices)} records from {owner._label()}")


def _gather(
    owner: NativeCalls, first: int, count: int, second: int, record_size: int, by_fields: bool
) -> int:
    """One dense gather of records of `record_size` bytes, as a call in flight on `owner`.
    When `by_fields`, `first` and `second` are the index and out arrays' fields (the native
    side reads the count there) and `count` is out's size in bytes, or 0 for the native side to
    prove it; otherwise they are the arrays' data pointers and `count` the number of records."""
    if LOCK_FREE_CALLS:
        # _enter written out, with a None for the mark: a Python frame and an object are a
        # visible share of a small read. Taken first inside the try (module docstring).
        in_flight = owner._calls
        try:
            in_flight.append(None)
            if owner._closed:
                raise owner._closed_error()
            return _call(owner, first, count, second, record_size, by_fields)
        finally:
            in_flight.pop()
            if owner._closed:
                _wake_closer(owner)
    mark = object()
    try:
        owner._enter(mark)
        return _call(owner, first, count, second, record_size, by_fields)
    finally:
        owner._marks.discard(mark)


def _call(
    owner: NativeCalls, first: int, count: int, second: int, record_size: int, by_fields: bool
) -> int:
    """The native call itself (see _gather)."""
    # The status is an int (restype c_int): annotated, not converted, compiled code only checks it.
    code: int
    if by_fields:
        code = owner._gather_arrays_native(
            owner._handle_low,
            owner._handle_high,
            first & _LOW,
            first >> 32,
            second & _LOW,
            second >> 32,
            record_size,
            count,
        )
    else:
        code = owner._gather_fixed_native(owner._handle, first, count, second, record_size)
    return code


# gather_packed's answers besides True (copied) and False (out too small).
PACKED_DECLINED: Final = -1


def gather_packed(
    owner: NativeCalls, indices: object, row_size: int, out: object, offsets: object,
    rows: object,
) -> int:
    """A loader's packed gather (Zrecord.gather_packed) with nothing but the checks memory
    safety needs: 1 once copied, 0 when out is too small (offsets[-1] then says what the
    records need), PACKED_DECLINED with nothing copied for anything else. That is: arrays not
    of the exact types a loader passes (native int64 indices, uint64 offsets and, when given,
    int32 rows, each one-dimensional with one entry more than the indices; a writable,
    C-contiguous out), or a native refusal. The caller then takes the store's own method, which
    checks every argument, names what is wrong and raises the native error with its message.

    Compiled, where the interpreted path (loaderx._store.shared_calls) cost several
    microseconds a step: with records of a few tokens, a visible share of a loader's step.
    The dtypes are checked here (the fields do not show them); with ARRAY_CALLS the arrays then
    go by their fields and the native side checks the rest (lx_*_gather_packed_arrays). What
    it refuses (an out that is not one-dimensional bytes of at least 2, a read-only or strided
    array) goes through the data pointers, as before the fields way existed.
    """
    if (type(indices) is not NDARRAY or type(out) is not NDARRAY
            or type(offsets) is not NDARRAY):
        return PACKED_DECLINED
    if indices.dtype is not _INT64 or offsets.dtype is not _UINT64:
        return PACKED_DECLINED
    checked_rows: npt.NDArray[Any] | None = None
    if rows is not None:
        if type(rows) is not NDARRAY or rows.dtype is not _INT32:
            return PACKED_DECLINED
        checked_rows = rows
    if ARRAY_CALLS and 0 < row_size <= _LOW:
        code = _packed_by_fields(owner, indices, row_size, out, offsets, checked_rows)
        if code != _INVALID_ARGUMENT:
            return _packed_answer(code)
    return _packed_by_pointers(owner, indices, row_size, out, offsets, checked_rows)


def _packed_by_fields(
    owner: NativeCalls, indices: object, row_size: int, out: object, offsets: object,
    rows: object,
) -> int:
    """The status of lx_*_gather_packed_arrays: each array by the address of its fields
    (array_fields.fields_address written out), rows' halves both 0 for no rows."""
    first = id(indices) + _FIELDS
    second = id(out) + _FIELDS
    third = id(offsets) + _FIELDS
    fourth = 0 if rows is None else id(rows) + _FIELDS
    if LOCK_FREE_CALLS:
        # Marked as _gather marks (a loader's ragged step comes here once per stream).
        in_flight = owner._calls
        try:
            in_flight.append(None)
            if owner._closed:
                raise owner._closed_error()
            code: int = owner._gather_packed_arrays_native(
                owner._handle_low, owner._handle_high, first & _LOW, first >> 32,
                second & _LOW, second >> 32, third & _LOW, third >> 32, fourth & _LOW,
                fourth >> 32, row_size)
        finally:
            in_flight.pop()
            if owner._closed:
                _wake_closer(owner)
        return code
    mark = object()
    try:
        owner._enter(mark)
        code = owner._gather_packed_arrays_native(
            owner._handle_low, owner._handle_high, first & _LOW, first >> 32,
            second & _LOW, second >> 32, third & _LOW, third >> 32, fourth & _LOW, fourth >> 32,
            row_size)
    finally:
        owner._marks.discard(mark)
    return code


def _packed_by_pointers(
    owner: NativeCalls, indices: npt.NDArray[Any], row_size: int, out: npt.NDArray[Any],
    offsets: npt.NDArray[Any], rows: npt.NDArray[Any] | None,
) -> int:
    """gather_packed through the arrays' data pointers, with the shape checks made here. An
    array that is not aligned for its dtype is declined: the library may read and write its
    elements only at their own alignment, and the checked path names the array."""
    if indices.ndim != 1 or offsets.ndim != 1:
        return PACKED_DECLINED
    if not (indices.flags.aligned and offsets.flags.aligned
            and (rows is None or rows.flags.aligned)):
        return PACKED_DECLINED
    count = len(indices)
    size = out.nbytes
    if not count or not size or len(offsets) != count + 1:
        return PACKED_DECLINED
    rows_at: int | None = None
    try:
        # from_buffer refuses read-only and non-contiguous buffers: those are declined too.
        if rows is not None:
            if rows.ndim != 1 or len(rows) != count + 1:
                return PACKED_DECLINED
            rows_at = _addressof(_first_byte(rows))
        first = _addressof(_first_byte(indices))
        second = _addressof(_first_byte(out))
        third = _addressof(_first_byte(offsets))
    except (TypeError, ValueError, BufferError, NotImplementedError):
        return PACKED_DECLINED
    mark = object()
    try:
        handle = owner._enter(mark)
        code: int = owner._gather_packed_native(
            handle, first, count, row_size, second, size, third, rows_at)
    finally:
        owner._marks.discard(mark)
    return _packed_answer(code)


def _packed_answer(code: int) -> int:
    """gather_packed's answer for a native status."""
    if code == _OK:
        return 1
    if code == _SIZE_MISMATCH:
        return 0
    return PACKED_DECLINED


def address(array: npt.NDArray[Any]) -> int:
    """The data pointer of a non-empty C-contiguous array (the caller keeps the array alive):
    ctypes' from_buffer is several times cheaper than ndarray.ctypes.data, but needs a writable
    buffer; other arrays (read-only, or of an element type the buffer protocol cannot describe,
    such as datetime64) take the slower path."""
    try:
        return ctypes.addressof(_BYTE.from_buffer(array.data))
    except (TypeError, ValueError, NotImplementedError):
        return int(array.ctypes.data)


_GATHER_STREAMS: Final = _native.lib.lx_store_gather_streams


class StreamsCall:
    """One native call that gathers several dense streams at the same indices: a loader's step
    (lx_store_gather_streams; the largest stream runs on the pool, the others beside it, off
    the step's critical path). The call's stream structs are kept for each slot of the
    loader's ring and change only when a slot's output array is replaced (set_out).

    `owners` are the streams' stores, each a NativeCalls whose handle is an lx_store: every
    call marks itself in flight on each of them, so none closes under it.
    """

    def __init__(
        self, owners: list[NativeCalls], record_sizes: list[int], count: int, slots: int
    ) -> None:
        assert 2 <= len(owners) <= _native.GATHER_STREAMS_MAX
        assert len(record_sizes) == len(owners)
        self.owners: list[NativeCalls] = owners
        self._record_sizes: list[int] = record_sizes
        self._count: int = count
        self._structs: list[Any] = []
        self._addresses: list[int] = []
        for _ in range(slots):
            self.grow()

    @property
    def slots(self) -> int:
        return len(self._structs)

    def grow(self) -> None:
        """Adds a slot, with no output array yet (set_out sets each before its first call)."""
        structs = (_native.GatherStream * len(self.owners))()
        for k, owner in enumerate(self.owners):
            structs[k].store = owner._handle
            structs[k].out = None
            structs[k].record_size = self._record_sizes[k]
            structs[k].out_bytes = self._count * self._record_sizes[k]
        self._structs.append(structs)
        self._addresses.append(ctypes.addressof(structs))

    def set_out(self, slot: int, stream: int, out: npt.NDArray[Any]) -> None:
        """Stream `stream` of slot `slot` gathers into `out` from now on: a writable,
        C-contiguous array of count records that the caller keeps alive while it is the
        slot's."""
        self._structs[slot][stream].out = address(out)

    def gather(self, slot: int, indices_address: int) -> bool:
        """Gathers every stream of `slot` at the count int64 indices at `indices_address`:
        True once done. False with a store closed, or any native status but LX_OK: the caller
        then gathers stream by stream, which raises the documented errors (what this call may
        have written is in the caller's own arrays, which it writes again)."""
        owners = self.owners
        mark = object()
        try:
            for owner in owners:
                if not _enter_open(owner, mark):
                    return False
            code: int = _GATHER_STREAMS(
                indices_address, self._count, self._addresses[slot], len(owners)
            )
        finally:
            leave_all(owners, mark)
        return code == _OK


def _enter_open(owner: NativeCalls, mark: object) -> bool:
    """Marks a call in flight on `owner` with `mark`; False once it is closed (the caller's
    leave_all takes the mark back all the same)."""
    try:
        owner._enter(mark)
    except ValueError:
        return False
    return True
