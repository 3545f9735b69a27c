"""Record batches for the native store calls: codec tags, verify flags, records in one buffer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native

CODECS: Final = {"raw": 0, "zstd": 1, "zstd_dict": 2}
RECORD_SIZE_MAX: Final = _native.RECORD_SIZE_MAX
RECORD_COUNT_MAX: Final = _native.RECORD_COUNT_MAX

_INT64: Final = np.dtype(np.int64)

# A batch of records: a sequence of bytes-like objects, or an array whose rows are the records.
Records: TypeAlias = "Sequence[Any] | npt.NDArray[Any]"


def verify_flags(verify: bool | None) -> int:
    """lx_store_open's flags for a gather verification setting (None: the default), checked
    by loaderx._store.flags.check_optional_flag first."""
    if verify is None:
        return 0
    return _native.OPEN_VERIFY_ALL if verify else _native.OPEN_VERIFY_NONE


def codec_id(name: str) -> int:
    """The native tag of a codec name; ValueError listing the valid names otherwise."""
    tag = CODECS.get(name) if isinstance(name, str) else None
    if tag is None:
        valid = ", ".join(repr(known) for known in CODECS)
        raise ValueError(f"unknown codec {name!r}; valid codecs are {valid}")
    return tag


def _record_view(record: object, position: int) -> memoryview:
    """A flat, C-contiguous byte view of one record (numpy arrays and memoryviews included)."""
    if isinstance(record, (bytes, bytearray)):
        return memoryview(record)
    if isinstance(record, np.ndarray):
        if record.dtype.hasobject:
            raise TypeError(f"record {position} is an object array; records must be bytes-like")
        return np.ascontiguousarray(record).reshape(-1).view(np.uint8).data
    if isinstance(record, str):
        raise TypeError(f"record {position} is a str; encode it to bytes first")
    try:
        view = memoryview(record)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(
            f"record {position} is {type(record).__name__}; records must be bytes-like "
            "(bytes, bytearray, memoryview or a numpy array)"
        ) from None
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        return view
    if view.c_contiguous:
        try:
            return view.cast("B")
        except TypeError:
            pass  # an exotic element format: fall back to a copy
    return memoryview(view.tobytes())


def pack_records(records: Records) -> tuple[bytes, npt.NDArray[np.uint64]]:
    """One contiguous buffer plus count+1 offsets, after checking every record's type and size."""
    if isinstance(records, (bytes, bytearray, memoryview, str)):
        raise TypeError(
            "records must be a sequence of bytes-like records, not a single "
            f"{type(records).__name__}; wrap one record in a list"
        )
    if not isinstance(records, (Sequence, np.ndarray)):
        raise TypeError(
            f"records must be a sequence of bytes-like records, not {type(records).__name__}"
        )
    views = [_record_view(record, position) for position, record in enumerate(records)]
    sizes = [view.nbytes for view in views]
    for position, size in enumerate(sizes):
        if size > RECORD_SIZE_MAX:
            raise ValueError(
                f"record {position} is {size} bytes; a record holds at most "
                f"{RECORD_SIZE_MAX} bytes (1 MiB)"
            )
    offsets = np.zeros(len(views) + 1, dtype=np.uint64)
    if views:
        np.cumsum(np.array(sizes, dtype=np.uint64), out=offsets[1:])
    return b"".join(views), offsets


def fixed_records(data: object, record_size: object) -> tuple[npt.NDArray[Any], int, int]:
    """An append_fixed batch checked: the array made C-contiguous, the record size as an int,
    and the number of records it holds."""
    if not isinstance(data, np.ndarray):
        raise TypeError(f"data must be a numpy array, not {type(data).__name__}")
    if data.dtype.hasobject:
        raise TypeError("data is an object array; its bytes are pointers, not records")
    if isinstance(record_size, bool) or not isinstance(record_size, (int, np.integer)):
        raise TypeError(f"record_size must be an int, not {type(record_size).__name__}")
    size = int(record_size)
    if size <= 0 or size > RECORD_SIZE_MAX:
        raise ValueError(
            f"record_size must be in 1..{RECORD_SIZE_MAX} bytes, got {size}"
        )
    if data.nbytes % size:
        raise ValueError(
            f"data holds {data.nbytes} bytes, not a whole number of {size}-byte records"
        )
    contiguous = np.ascontiguousarray(data)
    count = contiguous.nbytes // size
    return contiguous, size, count


def gather_arguments(
    indices: object, out: object, record_size: int
) -> tuple[npt.NDArray[np.int64], int]:
    """Zrecord.gather_into's checks off its fast path, in order, each with its own message:
    indices as a plain one-dimensional C-contiguous int64 array, and their count."""
    if record_size <= 0:
        raise ValueError(f"record_size must be at least 1 byte, got {record_size}")
    if not isinstance(indices, np.ndarray) or indices.dtype != _INT64:
        raise TypeError("indices must be an int64 numpy array (see loaderx._store.indexing)")
    plain: npt.NDArray[np.int64] = np.asarray(indices)  # a subclass (np.memmap) as its plain array
    if not plain.flags.c_contiguous or plain.ndim != 1:
        raise ValueError("indices must be a one-dimensional C-contiguous array")
    if not plain.flags.aligned:
        plain = plain.copy()  # the library reads int64_t only at an 8-byte boundary
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writable C-contiguous array")
    count = plain.shape[0]
    if out.nbytes != count * record_size:
        raise ValueError(
            f"out holds {out.nbytes} bytes but {count} records of {record_size} bytes "
            f"need {count * record_size}"
        )
    return plain, count
