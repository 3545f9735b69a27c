"""The ctypes binding to libloaderx: loading, one table of signatures, status -> exception.

This is the only module that touches ctypes. It is deliberately left out of mypyc: ctypes
objects are dynamic and gain nothing from compilation. Compiled modules call the small typed
functions below. ctypes releases the GIL for the whole duration of every foreign call.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from typing import Any, Final, NoReturn

from loaderx._os import descriptors
from loaderx.errors import (
    CodecError,
    CorruptStoreError,
    DescriptorLimitError,
    DictionaryError,
    LibraryNotFoundError,
    NotAStoreError,
    ReadOnlyStoreError,
    StoreFullError,
    StoreLockedError,
)

ABI_VERSION: Final = 19

c_u64p = ctypes.POINTER(ctypes.c_uint64)
# lx_maintenance_check: (context, operation, operation_size) -> nonzero to refuse.
MaintenanceCheck: Final = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char), ctypes.c_uint64
)


class Stats(ctypes.Structure):
    """Mirror of lx_stats."""

    _fields_ = [
        ("records", ctypes.c_uint64),
        ("live_bytes", ctypes.c_uint64),
        ("chunk_bytes", ctypes.c_uint64),
        ("reclaimable", ctypes.c_uint64),
    ]


class SamplerRequest(ctypes.Structure):
    """Mirror of lx_sampler_request."""

    _fields_ = [
        ("mode", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("length", ctypes.c_uint64),
        ("batch_size", ctypes.c_uint64),
        ("seed", ctypes.c_uint64),
        ("shard_index", ctypes.c_uint64),
        ("shard_count", ctypes.c_uint64),
    ]


class GatherStream(ctypes.Structure):
    """Mirror of lx_gather_stream."""

    _fields_ = [
        ("store", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("record_size", ctypes.c_uint64),
        ("out_bytes", ctypes.c_uint64),
    ]


class ArrayFacts(ctypes.Structure):
    """Mirror of lx_array_facts."""

    _fields_ = [
        ("data", ctypes.c_uint64),
        ("ndim", ctypes.c_uint64),
        ("length", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
        ("stride", ctypes.c_uint64),
    ]


class VerifyProblem(ctypes.Structure):
    """Mirror of lx_verify_problem."""

    _fields_ = [
        ("index", ctypes.c_uint64),
        ("reason", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class VerifySummary(ctypes.Structure):
    """Mirror of lx_verify_summary."""

    _fields_ = [
        ("records", ctypes.c_uint64),
        ("checksummed", ctypes.c_uint64),
        ("problem_count", ctypes.c_uint64),
        ("has_checksums", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


# lx_verify_problem.reason values (LX_VERIFY_* in loaderx.h) and their names.
VERIFY_ENTRY: Final = 1
VERIFY_CHUNK: Final = 2
VERIFY_CHECKSUM: Final = 3
VERIFY_FRAME: Final = 4
VERIFY_NO_DICTIONARY: Final = 5
VERIFY_REASONS: Final[dict[int, str]] = {
    VERIFY_ENTRY: "entry",
    VERIFY_CHUNK: "chunk",
    VERIFY_CHECKSUM: "checksum",
    VERIFY_FRAME: "frame",
    VERIFY_NO_DICTIONARY: "no_dictionary",
}


# Status codes, as in zig/include/loaderx.h (tests/native/test_abi.py and zig/src/c_abi/abi_test.zig check).
OK: Final = 0
INVALID_ARGUMENT: Final = 1
INDEX_OUT_OF_RANGE: Final = 2
NOT_FOUND: Final = 3
NOT_A_STORE: Final = 4
CORRUPT: Final = 5
RECORD_TOO_LARGE: Final = 6
STORE_FULL: Final = 7
NO_DICTIONARY: Final = 8
DICTIONARY_EXISTS: Final = 9
CODEC_FAILED: Final = 10
OUT_OF_MEMORY: Final = 11
IO: Final = 12
SIZE_MISMATCH: Final = 13
PERMISSION_DENIED: Final = 14
STORE_LOCKED: Final = 15
READ_ONLY: Final = 16
TOO_MANY_OPEN_FILES: Final = 17
VIEW_STALE: Final = 18


class ViewStaleError(ValueError):
    """A view's routing no longer matches its stores (a delete through the same handle changed
    a shard's length): the sharded store makes a new view and reads again. Never reaches a
    caller of the public API."""



# The one table from status to exception class.
_EXCEPTIONS: Final[dict[int, type[BaseException]]] = {
    INVALID_ARGUMENT: ValueError,
    INDEX_OUT_OF_RANGE: IndexError,
    NOT_FOUND: FileNotFoundError,
    NOT_A_STORE: NotAStoreError,
    CORRUPT: CorruptStoreError,
    RECORD_TOO_LARGE: ValueError,
    STORE_FULL: StoreFullError,
    NO_DICTIONARY: DictionaryError,
    DICTIONARY_EXISTS: DictionaryError,
    CODEC_FAILED: CodecError,
    OUT_OF_MEMORY: MemoryError,
    IO: OSError,
    SIZE_MISMATCH: ValueError,
    PERMISSION_DENIED: PermissionError,
    STORE_LOCKED: StoreLockedError,
    READ_ONLY: ReadOnlyStoreError,
    TOO_MANY_OPEN_FILES: DescriptorLimitError,
    VIEW_STALE: ViewStaleError,
}

OPEN_CREATE: Final = 1
OPEN_DURABLE: Final = 2
OPEN_READ_ONLY: Final = 4
OPEN_VERIFY_ALL: Final = 8
OPEN_VERIFY_NONE: Final = 16
# Flag of lx_{store,view}_gather_padded: cut a record longer than the last length to it.
PAD_TRUNCATE: Final = 1

# Limits of a store, as in loaderx.h (zig/src/base/limits.zig); tests/native/test_abi.py checks all
# three.
RECORD_SIZE_MAX: Final = 1 << 20
RECORD_COUNT_MAX: Final = 1 << 24
CHUNK_COUNT_MAX: Final = 1 << 12
CHUNK_SIZE_MAX: Final = 1 << 32
# Streams one lx_store_gather_streams call gathers at most.
GATHER_STREAMS_MAX: Final = 8

# Whether the pool's helpers join large gathers (LX_POOL_*; set_pool_policy).
POOL_AUTO: Final = 0
POOL_ALWAYS: Final = 1
POOL_NEVER: Final = 2

# How large raw gathers write their destination (LX_STORES_*; set_stores_policy).
STORES_AUTO: Final = 0
STORES_STREAMING: Final = 1
STORES_CACHED: Final = 2

SAMPLER_SEQUENTIAL: Final = 0
SAMPLER_IID: Final = 1
SAMPLER_CYCLIC: Final = 2


def library_file_name() -> str:
    """The file name Zig gives the shared library on this platform."""
    if sys.platform == "win32":
        return "loaderx.dll"
    if sys.platform == "darwin":
        return "libloaderx.dylib"
    return "libloaderx.so"


def library_path() -> str:
    """Where the library is loaded from: $LOADERX_LIBRARY, else loaderx/lib/ beside this file."""
    override = os.environ.get("LOADERX_LIBRARY")
    if override:
        return override
    # The library ships in loaderx/lib/, one folder above this module.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(package, "lib", library_file_name())


def _load() -> ctypes.CDLL:
    path = library_path()
    if not os.path.exists(path):
        raise LibraryNotFoundError(
            f"loaderx's native library was not found at {path!r}; "
            "build it with 'python3 build.py native' (or install a wheel)"
        )
    lib = ctypes.CDLL(path)
    _declare(lib)
    found = int(lib.lx_abi_version())
    if found != ABI_VERSION:
        raise LibraryNotFoundError(
            f"{path!r} has C ABI version {found}, this package needs {ABI_VERSION}; rebuild it"
        )
    return lib


# Deliberately untyped (argtypes None), with their restypes: these take only uint32_t halves
# (and lx_read_array_facts one pointer, passed with byref), which ctypes passes without a
# conversion call each. loaderx/array_fields.py checks that they work here before anything
# relies on them; tests/native/test_abi.py that their parameters are what untyped calls can pass.
_UNTYPED_CALLS: Final[dict[str, Any]] = {
    "lx_store_gather_arrays": ctypes.c_int,
    "lx_view_gather_arrays": ctypes.c_int,
    "lx_store_gather_packed_arrays": ctypes.c_int,
    "lx_view_gather_packed_arrays": ctypes.c_int,
    "lx_join_halves": ctypes.c_uint64,
    "lx_read_array_facts": ctypes.c_int,
}
UNTYPED_CALLS: Final = frozenset(_UNTYPED_CALLS)


def _declare(lib: ctypes.CDLL) -> None:
    """argtypes and restype for every exported function (never rely on ctypes' int default,
    except for those that take only 32-bit halves, which are checked at import)."""
    vp = ctypes.c_void_p
    u8, u32, u64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64
    st = ctypes.c_int
    table: dict[str, tuple[object, list[object] | None]] = {
        "lx_abi_version": (u32, []),
        "lx_status_name": (ctypes.c_char_p, [ctypes.c_int]),
        "lx_last_error": (ctypes.c_char_p, []),
        "lx_after_fork_child": (None, []),
        "lx_pool_set_policy": (st, [u32]),
        "lx_pool_policy": (u32, []),
        "lx_stores_set_policy": (st, [u32]),
        "lx_stores_policy": (u32, []),
        "lx_store_open": (st, [ctypes.c_char_p, u32, ctypes.POINTER(vp)]),
        "lx_store_close": (None, [vp]),
        "lx_store_length": (u64, [vp]),
        "lx_store_has_dict": (ctypes.c_int, [vp]),
        "lx_store_append": (st, [vp, vp, vp, u64, u8, c_u64p]),
        "lx_store_append_fixed": (st, [vp, vp, u64, u64, u8, c_u64p]),
        "lx_store_gather_fixed": (st, [vp, vp, u64, vp, u64]),
        "lx_store_record_lengths": (st, [vp, vp, u64, vp]),
        "lx_store_record_offsets": (st, [vp, vp, u64, u64, vp, vp]),
        "lx_store_gather_packed": (st, [vp, vp, u64, u64, vp, u64, vp, vp]),
        "lx_store_gather": (st, [vp, vp, u64, vp, vp]),
        "lx_store_gather_padded": (st, [vp, vp, u64, u64, vp, vp, u64, u32, vp, u64, vp, u64, vp, vp]),
        "lx_store_gather_streams": (st, [vp, u64, vp, u64]),
        "lx_store_delete": (st, [vp, vp, u64]),
        "lx_stores_delete": (st, [vp, u64, vp, vp]),
        "lx_store_compact": (st, [vp]),
        "lx_store_set_maintenance_check": (st, [vp, MaintenanceCheck, vp]),
        "lx_store_stats": (st, [vp, ctypes.POINTER(Stats)]),
        "lx_store_sync": (st, [vp]),
        "lx_store_verify": (st, [vp, vp, u64, ctypes.POINTER(VerifySummary)]),
        "lx_store_train_dict": (st, [vp, vp, vp, u64, u64]),
        "lx_view_open": (st, [vp, u64, ctypes.POINTER(vp)]),
        "lx_view_close": (None, [vp]),
        "lx_view_length": (u64, [vp]),
        "lx_view_gather_fixed": (st, [vp, vp, u64, vp, u64]),
        "lx_view_record_lengths": (st, [vp, vp, u64, vp]),
        "lx_view_record_offsets": (st, [vp, vp, u64, u64, vp, vp]),
        "lx_view_gather_packed": (st, [vp, vp, u64, u64, vp, u64, vp, vp]),
        "lx_view_gather": (st, [vp, vp, u64, vp, vp]),
        "lx_view_gather_padded": (st, [vp, vp, u64, u64, vp, vp, u64, u32, vp, u64, vp, u64, vp, vp]),
        "lx_sampler_fill": (st, [u32, u64, u64, u64, u64, u64, u64, vp]),
        "lx_sampler_batch": (st, [vp, u64, vp]),
        "lx_record_sums": (st, [vp, u64, vp, vp, vp, vp, u64, vp]),
        "lx_batch_pad": (st, [vp, u64, vp, u64, u64, vp, u64, vp, u64, vp, u64]),
        **{name: (restype, None) for name, restype in _UNTYPED_CALLS.items()},
    }
    for name, (restype, argtypes) in table.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as exc:
            raise LibraryNotFoundError(
                f"loaderx's native library lacks {name}; rebuild it ('python3 build.py native')"
            ) from exc
        fn.restype = restype
        fn.argtypes = argtypes


lib: Final = _load()


def typed_pointer(name: str, position: int, pointer_type: type[Any]) -> Any:
    """A second binding of export `name` (declared above) whose argument `position`, a void
    pointer in the table, is declared as `pointer_type` instead: a ctypes array of exactly that
    type then passes without conversion, about 40 ns less per call, which is 4% of a sampler
    batch of 256. The export and its ABI are the same; the table stays the one declaration."""
    declared = getattr(lib, name)
    argtypes = list(declared.argtypes)
    if argtypes[position] is not ctypes.c_void_p:
        raise TypeError(f"argument {position} of {name} is not a void pointer")
    argtypes[position] = pointer_type
    bound = type(declared)((name, lib))
    bound.restype = declared.restype
    bound.argtypes = argtypes
    return bound


def raise_status(code: int, context: str) -> NoReturn:
    """Raises the exception mapped to a non-zero status, with the native message appended."""
    detail = lib.lx_last_error()
    message = context
    if detail:
        message = f"{context}: {detail.decode('utf-8', 'replace')}"
    exc_type = _EXCEPTIONS.get(code)
    if exc_type is None:
        raise RuntimeError(f"{message} (unknown native status {code})")
    if code == IO and "(ENOSPC)" in message:
        # A full disk keeps its errno, so callers can tell it from other I/O failures.
        raise OSError(errno.ENOSPC, message)
    if code == TOO_MANY_OPEN_FILES:
        # EMFILE keeps its errno too; the message says what the limit is and what to do.
        raise descriptors.limit_error(message)
    raise exc_type(message)


def check(code: int, context: str) -> None:
    """Raises for a non-zero status; does nothing for LX_OK."""
    if code != OK:
        raise_status(code, context)


def read_status(call: Callable[[], int]) -> int:
    """The status of `call()`, a read (a gather, a verification), made once more when it met
    EMFILE and the soft descriptor limit could rise (loaderx._os.descriptors), as a store open
    is. A read maps each chunk on its first use, which takes a descriptor for a moment, so the
    first read after many opens can be the call that runs out; one that failed changed nothing
    but its output, which the second call writes again."""
    seen = descriptors.raised_count()
    code = call()
    if code == TOO_MANY_OPEN_FILES and descriptors.raise_soft_limit(seen):
        code = call()
    return code


def set_pool_policy(policy: int) -> None:
    """Whether the pool's helper threads join large gathers (and large padded batches),
    process-wide: POOL_AUTO (the default: each store and view learns it from its own gathers,
    padded batches from theirs), POOL_ALWAYS or POOL_NEVER.
    For benchmarks (benchmarks/probes/pool_phases.py) and processes that share a machine; the bytes a
    gather writes are the same under every policy. ValueError for any other value."""
    if type(policy) is not int or not 0 <= policy < 1 << 32:
        raise ValueError(f"pool policy must be POOL_AUTO, POOL_ALWAYS or POOL_NEVER, got {policy!r}")
    check(lib.lx_pool_set_policy(policy), "set the pool policy")


def pool_policy() -> int:
    """The policy in force (POOL_AUTO unless set_pool_policy changed it)."""
    return int(lib.lx_pool_policy())


def set_stores_policy(policy: int) -> None:
    """How large raw gathers (records of 1 KiB or more, 1 MiB or more in a batch) write their
    destination, process-wide: STORES_AUTO (the default: each store and view learns from its
    own gathers which way is faster), STORES_STREAMING (around the caches, where the CPU has
    such stores) or STORES_CACHED (through them, so the batch is still cached for a reader
    that comes at once). For measuring each way by itself (benchmarks/probes/loader_overhead.py); the
    bytes a gather writes are the same under every policy. ValueError for any other value."""
    if type(policy) is not int or not 0 <= policy < 1 << 32:
        raise ValueError(
            f"stores policy must be STORES_AUTO, STORES_STREAMING or STORES_CACHED, got {policy!r}"
        )
    check(lib.lx_stores_set_policy(policy), "set the stores policy")


def stores_policy() -> int:
    """The policy in force (STORES_AUTO unless set_stores_policy changed it)."""
    return int(lib.lx_stores_policy())


def _after_fork_in_child() -> None:
    lib.lx_after_fork_child()


if hasattr(os, "register_at_fork"):
    # The native thread pool does not survive fork(); the child gets a fresh one, and every open
    # store's locks start afresh (parent threads may have held them at the moment of fork).
    os.register_at_fork(after_in_child=_after_fork_in_child)
