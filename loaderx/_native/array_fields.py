"""The dense and packed reads' cheapest way into native code: NumPy arrays by the address of
their fields, every 64-bit value as two 32-bit halves, through untyped ctypes calls.

Why: on the read of 256 small records, the Python side used to cost more than the copy. Asking
ctypes for an array's data pointer (from_buffer, then addressof) is two Python calls per
array; `id(array)` is none, and NumPy's fields (data, nd, dimensions, strides, base, descr,
flags) follow the object header at a fixed place, NumPy's C ABI. A typed ctypes argument costs
a conversion call each; an untyped int is passed as a C int at a fraction of that, and
lx_*_gather_arrays read each such argument as a uint32_t half.

Both are facts about this interpreter, this NumPy and this ctypes, so `WORKS` is decided once,
at import, by asking the library to give back what it was passed: halves that need every bit
(lx_join_halves), then what it reads from the fields of a few arrays against what NumPy says
of them (lx_read_array_facts). If anything differs, or LOADERX_ARRAY_CALLS=0 is set, the fast
path keeps its older way (typed arguments and from_buffer) and nothing else changes.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Final

import numpy as np

from loaderx._native import library as _native

# NumPy's NPY_ARRAY_* bits. tests/native/test_array_fields.py checks these against NumPy's own table;
# zig/src/batch/numpy_array.zig has the same, checked there by which arrays the gathers take and
# decline (read-only, strided, misaligned).
C_CONTIGUOUS: Final = 0x0001
ALIGNED: Final = 0x0100
WRITEABLE: Final = 0x0400

LOW: Final = 0xFFFF_FFFF
# Where an array's fields start after id(array): the size of CPython's object header (16 bytes
# with a GIL, 32 on free-threaded builds).
OFFSET: Final = int(object.__basicsize__)


def fields_address(array: object) -> int:
    """The address of an ndarray's NumPy fields (the caller keeps the array alive)."""
    return id(array) + OFFSET


def _halves_pass(lib: Any) -> bool:
    """Whether untyped ints reach a uint32_t parameter with every bit, the top one included."""
    for low, high in ((0, 0), (1, 0), (LOW, 0x7FFF_FFFF), (0x8000_0000, 1), (0x1234_5678, LOW)):
        if int(lib.lx_join_halves(low, high)) != (high << 32) | low:
            return False
    return True


def _facts_agree(lib: Any, array: np.ndarray[Any, Any]) -> bool:
    """Whether the library reads from the array's fields what NumPy says of the array."""
    facts = _native.ArrayFacts()
    at = fields_address(array)
    if lib.lx_read_array_facts(at & LOW, at >> 32, ctypes.byref(facts)) != _native.OK:
        return False
    flags = array.flags
    wanted = (
        (C_CONTIGUOUS if flags.c_contiguous else 0)
        | (ALIGNED if flags.aligned else 0)
        | (WRITEABLE if flags.writeable else 0)
    )
    return bool(
        facts.data == array.__array_interface__["data"][0]
        and facts.ndim == array.ndim
        and facts.length == (array.shape[0] if array.ndim else 0)
        and facts.stride == (array.strides[0] % (1 << 64) if array.ndim else 0)
        and facts.flags & (C_CONTIGUOUS | ALIGNED | WRITEABLE) == wanted
    )


def probe_arrays() -> list[np.ndarray[Any, Any]]:
    """Arrays whose facts differ from each other in every field the gathers read."""
    vector = np.arange(7, dtype=np.int64)
    read_only = np.arange(5, dtype=np.int64)
    read_only.flags.writeable = False
    unaligned = np.zeros(17, dtype=np.uint8)[1:].view(np.int64)
    return [
        vector,
        vector[::2],
        read_only,
        np.zeros((3, 4), dtype=np.uint8),
        np.zeros((3, 4), dtype=np.uint8).T,
        np.zeros((3, 4), dtype=np.uint16)[::-1],
        np.zeros(0, dtype=np.int64),
        np.zeros((), dtype=np.int64),
        unaligned,
    ]


def calls_work(lib: Any) -> bool:
    """Whether lx_*_gather_arrays and lx_*_gather_packed_arrays may be called here (see the
    module's docstring)."""
    try:
        return _halves_pass(lib) and all(_facts_agree(lib, a) for a in probe_arrays())
    except (ctypes.ArgumentError, OverflowError, TypeError, ValueError):
        return False


def wanted() -> bool:
    """False when LOADERX_ARRAY_CALLS=0 asks for the older way (to compare the two, or as an
    escape hatch should a future NumPy or Python break what the probe checks)."""
    return os.environ.get("LOADERX_ARRAY_CALLS", "1") != "0"


WORKS: Final = wanted() and calls_work(_native.lib)
