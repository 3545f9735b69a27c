"""Index normalisation: any NumPy-style index over a length becomes a C-contiguous int64 array.

Accepted forms follow NumPy's rules for a one-dimensional array: an integer (negative counts
from the end), a slice, a sequence or array of integers, a boolean mask of exactly the length,
NumPy integer scalars, any object with __index__, and array-likes that NumPy converts (a torch
tensor, a JAX array: anything with __array__). Everything else is a TypeError; an index outside
the length is an IndexError that names the index and the length. The result is what the native
store expects: every value in 0 <= i < length.

normalize_selection adds what a dense read returns around the samples: one sample for a scalar
index, and for an integer array of two or more dimensions the array's own shape, as NumPy's
a[idx] does (the records are gathered flat, in C order).
"""

from __future__ import annotations

import operator
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt

IndexArray = npt.NDArray[np.int64]

_INT64: Final = np.dtype(np.int64)
_EMPTY: Final[IndexArray] = np.empty(0, dtype=np.int64)


def normalize_index(index: object, length: int) -> IndexArray:
    """Returns the records `index` selects from `length` records as an int64 array.

    An int64 array that is already one-dimensional, C-contiguous and in range is returned as
    it is (no copy), so callers that already hold normalised indices pay only a bounds check.
    """
    if length < 0:
        raise ValueError(f"length must be non-negative, got {length}")
    if isinstance(index, np.ndarray):
        # A subclass (np.memmap, a masked array) indexes as its plain array, as NumPy does; the
        # native gather and the general path take exactly np.ndarray.
        return _from_array(np.asarray(index), length)
    if isinstance(index, slice):
        start, stop, step = index.indices(length)
        return np.arange(start, stop, step, dtype=np.int64)
    if isinstance(index, (bool, np.bool_)):
        raise TypeError(
            "a bool is not a record index; use an integer, a slice, an integer array or a "
            "bool mask array"
        )
    if isinstance(index, (int, np.integer)):
        return np.array([_scalar(int(index), length)], dtype=np.int64)
    if isinstance(index, range):
        return _from_range(index, length)
    if isinstance(index, (list, tuple)):
        return _from_sequence(index, length)
    if isinstance(index, (float, np.floating, complex, str, bytes)):
        raise TypeError(f"record indices must be integers, not {type(index).__name__}")
    if _is_array_like(index):
        return _from_array(np.asarray(index), length)
    if isinstance(index, SupportsIndex):
        return np.array([_scalar(operator.index(index), length)], dtype=np.int64)
    raise TypeError(
        f"cannot index records with {type(index).__name__}; use an integer, a slice, an "
        "integer sequence or array, or a bool mask"
    )


def normalize_selection(index: object, length: int) -> tuple[IndexArray, tuple[int, ...]]:
    """normalize_index, and the shape a dense read's result has before item_shape: () for one
    record, the index's own shape for an integer array of two or more dimensions, else
    (len(indices),)."""
    array: npt.NDArray[Any] | None = None
    if isinstance(index, np.ndarray):
        array = np.asarray(index)  # a subclass (np.matrix, np.memmap) as its plain array
    elif _is_array_like(index):
        array = np.asarray(index)
    if array is not None and array.ndim >= 2 and array.dtype.kind in "iu":
        return normalize_index(array.reshape(-1), length), array.shape
    indices = normalize_index(index if array is None else array, length)
    if is_scalar_index(index if array is None else array):
        return indices, ()
    return indices, (len(indices),)


def is_scalar_index(index: object) -> bool:
    """True for an index that selects one record (a read returns one sample, not a batch): an
    int, a NumPy integer, a 0-d array or array-like, or another object with __index__."""
    if isinstance(index, np.ndarray):
        return index.ndim == 0
    if isinstance(index, (bool, np.bool_)):
        return False
    if isinstance(index, (int, np.integer)):
        return True
    if isinstance(index, _NOT_SCALAR):
        return False
    if _is_array_like(index):
        return bool(np.ndim(index) == 0)  # type: ignore[arg-type]
    return isinstance(index, SupportsIndex)


# Index forms that are never one record (or are refused), checked before __index__ is asked.
_NOT_SCALAR: Final = (slice, list, tuple, range, float, np.floating, complex, str, bytes)


def _is_array_like(index: object) -> bool:
    """An object NumPy indexes as an array although it is none (a torch tensor, a JAX array)."""
    return not isinstance(index, np.ndarray) and hasattr(type(index), "__array__")


def _scalar(value: int, length: int) -> int:
    """One integer index, negative counting from the end, checked against the length."""
    if value < -length or value >= length:
        raise IndexError(f"index {value} is out of range for length {length}")
    return value + length if value < 0 else value


def _from_sequence(index: list[Any] | tuple[Any, ...], length: int) -> IndexArray:
    if len(index) == 0:
        return _EMPTY.copy()
    for item in index:
        # np.asarray would turn floats into a float array and mixed objects into an object array;
        # check the items so the message names what was wrong.
        if isinstance(item, (bool, np.bool_, int, np.integer)):
            continue
        # Rarer items (0-d tensors or arrays, __index__ objects): converted only once one is met.
        index = [_sequence_item(item) for item in index]
        break
    bools = sum(1 for item in index if isinstance(item, (bool, np.bool_)))
    if bools == len(index):
        return _from_array(np.array(index, dtype=np.bool_), length)
    if bools:
        raise TypeError("a mask must contain only bools; mixing bools and integers is ambiguous")
    values = [int(item) for item in index]
    low = min(values)
    high = max(values)
    # Checked on Python ints, so values beyond 64 bits are reported, not wrapped.
    if high >= length:
        raise IndexError(f"index {high} is out of range for length {length}")
    if low < -length:
        raise IndexError(f"index {low} is out of range for length {length}")
    result = np.array(values, dtype=np.int64)
    if low < 0:
        result[result < 0] += length
    return result


def _from_range(index: range, length: int) -> IndexArray:
    """A range, its ends checked on Python ints before anything is allocated: a range that
    reaches past the length is an IndexError, whatever its size, not an int64 overflow or an
    allocation of its whole length (len() itself overflows past 2**63 items)."""
    if not index:
        return _EMPTY.copy()
    first = index[0]
    last = index[-1]
    low = min(first, last)
    high = max(first, last)
    if high >= length:
        raise IndexError(f"index {high} is out of range for length {length}")
    if low < -length:
        raise IndexError(f"index {low} is out of range for length {length}")
    # Between two in-range ends the step fits int64 too; a range of one value may have any step.
    step = index.step if first != last else 1
    stop = last + (1 if step > 0 else -1)
    return _from_array(np.arange(first, stop, step, dtype=np.int64), length)


def _sequence_item(item: object) -> bool | np.bool_ | int | np.integer[Any]:
    """One item of an index sequence as a bool or an int: a 0-d integer or bool array or
    array-like (a torch tensor, without importing torch) as its value, an object with
    __index__ as that; anything else (a float, a string, a longer array) is a TypeError."""
    if isinstance(item, (bool, np.bool_, int, np.integer)):
        return item
    if isinstance(item, np.ndarray) or _is_array_like(item):
        array = np.asarray(item)
        if array.ndim == 0 and array.dtype.kind in "biu":
            return bool(array) if array.dtype.kind == "b" else int(array)
    elif not isinstance(item, _NOT_SCALAR) and isinstance(item, SupportsIndex):
        return operator.index(item)
    raise TypeError(
        f"record indices must be integers (or all bools for a mask), found "
        f"{type(item).__name__} ({item!r})"
    )


def _from_array(array: npt.NDArray[Any], length: int) -> IndexArray:
    kind = array.dtype.kind
    if array.ndim == 0:
        if kind == "b":
            raise TypeError("a 0-d bool array is not a record index; use a 1-d bool mask")
        if kind not in "iu":
            raise TypeError(f"record indices must be integers, not {array.dtype} values")
        return np.array([_scalar(int(array), length)], dtype=np.int64)
    if array.ndim != 1:
        raise IndexError(f"record indices must be one-dimensional, got shape {array.shape}")
    if kind == "b":
        if array.shape[0] != length:
            raise IndexError(
                f"bool mask has {array.shape[0]} entries but there are {length} records"
            )
        return np.flatnonzero(array).astype(np.int64, copy=False)
    if kind not in "iu":
        # Even an empty float array is refused, as NumPy refuses it: its dtype says the caller
        # built the indices wrongly (np.array([]) is float64; use np.array([], dtype=np.int64)).
        raise TypeError(f"record indices must be integers, not {array.dtype} values")
    if array.size == 0:
        return _EMPTY.copy()
    low = int(array.min())
    high = int(array.max())
    if high >= length:
        raise IndexError(f"index {high} is out of range for length {length}")
    if low < -length:
        raise IndexError(f"index {low} is out of range for length {length}")
    # A misaligned int64 array (a view at an odd byte offset) is copied: the library reads
    # indices as int64_t, which C and Zig may only read at an 8-byte boundary.
    flags = array.flags
    if low >= 0 and array.dtype == _INT64 and flags.c_contiguous and flags.aligned:
        return array
    result = np.array(array, dtype=np.int64, order="C", copy=True)
    if low < 0:
        result[result < 0] += length
    return result
