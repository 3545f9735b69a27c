"""Conversions in this process: an array into a dense dataset, records into a ragged one.

Data moves in blocks of about chunk_bytes, so memory stays bounded whatever the input's size,
and the result is written in a staging folder that replaces the destination only once complete
(loaderx._data.destination). The public converters (loaderx._data.converter) and the workers of
a parallel conversion (loaderx._data.parallel) both convert through here.
"""

from __future__ import annotations

import os
import shutil
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.dense import DenseDataset
from loaderx._data.destination import check_destination, write_in_place
from loaderx._data.dictionary_sample import check_trainable, sample_positions
from loaderx._data.progress import Elapsed, Progress, ProgressOption, check_progress
from loaderx._data.ragged import RaggedDataset
from loaderx._data.shard_budget import check_shard_count, stream_refusal
from loaderx._store import layout
from loaderx._store.schema import (
    Codec,
    Schema,
    check_codec,
    check_dtype,
    check_item_shape,
    make_schema,
)
from loaderx._store.layout import DICT_FILE, SHARD_RECORDS_MAX

CHUNK_BYTES_DEFAULT: Final = 64 << 20
# Marks the end of an iterator (None could be a record, if a wrong one).
_END: Final = object()


def check_chunk_bytes(chunk_bytes: int) -> int:
    """chunk_bytes as a positive int; TypeError or ValueError otherwise."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)):
        raise TypeError(f"chunk_bytes must be an int, got {chunk_bytes!r}")
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return int(chunk_bytes)


# --- arrays -----------------------------------------------------------------------------------


def check_array(
    array: npt.ArrayLike, codec: Codec, dict_size: str | int, chunk_bytes: int
) -> tuple[npt.NDArray[Any], Schema, int]:
    """The array from_numpy converts, its dense schema and the block size it moves in;
    raises, before any work, on an argument it cannot convert."""
    data = array if isinstance(array, np.ndarray) else np.asarray(array)
    if data.ndim == 0:
        raise ValueError("from_numpy needs an array with at least one dimension (axis 0: records)")
    schema = make_schema("dense", data.dtype, data.shape[1:], codec, dict_size)
    block_bytes = check_chunk_bytes(chunk_bytes)
    check_record_count(int(data.shape[0]))  # before any worker starts
    return data, schema, block_bytes


def check_record_count(count: int) -> None:
    """ValueError when count records are more than any dataset holds (the limit read from
    loaderx._store.layout at each call, as shard_budget reads its own)."""
    if count > layout.RECORD_COUNT_MAX:
        raise ValueError(
            f"{count} records exceed a dataset's limit of {layout.RECORD_COUNT_MAX} (2^20 shards)"
        )


def dictionary_sample(data: npt.NDArray[Any], dict_size: int) -> npt.NDArray[Any]:
    """The rows of data a zstd_dict dictionary is trained on: evenly strided, about 100x
    dict_size bytes in all."""
    record_bytes = data.dtype.itemsize * int(np.prod(data.shape[1:], dtype=np.int64))
    return np.ascontiguousarray(data[sample_positions(len(data), record_bytes, dict_size)])


def train_dictionary(ds: DenseDataset, rows: npt.NDArray[Any], folder: str, path: str) -> None:
    """ds.train_dict(rows) for the dataset being written in `folder`, a ValueError naming
    `path` (what the caller asked for), not the hidden folder, when zstd cannot train on them."""
    try:
        ds.train_dict(rows)
    except ValueError as error:
        raise ValueError(str(error).replace(repr(folder), repr(path))) from None


def array_to_dataset(
    path: str, array: npt.ArrayLike, codec: Codec, dict_size: str | int, chunk_bytes: int,
    overwrite: bool, progress: ProgressOption, shard_records: int = SHARD_RECORDS_MAX,
    dictionary: str | None = None,
) -> int:
    """from_numpy in this process: array written as a dense dataset at path, rolling over into
    a new shard every shard_records records; the record count. A zstd_dict dataset takes the
    dictionary file `dictionary` when given (a parallel conversion's, trained once on the
    whole array), else trains one on a sample of array."""
    progress = check_progress(progress)
    data, schema, block_bytes = check_array(array, codec, dict_size, chunk_bytes)
    count = int(data.shape[0])
    # Before any byte is written: the store's commit would refuse the shard past the limit
    # only once every shard before it was written.
    check_shard_count(path, [(0, count)], shard_records, False)
    trains = schema.codec == "zstd_dict" and count > 0 and dictionary is None
    if dictionary is None:
        check_trainable(schema.codec, count)

    def write(staged: str) -> int:
        if dictionary is not None:  # before the store is made, as a rollover's new shard
            os.makedirs(staged, exist_ok=True)
            shutil.copyfile(dictionary, os.path.join(staged, DICT_FILE))
        with DenseDataset(
            staged, schema.dtype, schema.item_shape, schema.codec, dict_size,
            shard_records=shard_records,
        ) as ds:
            if trains:
                sample = dictionary_sample(data, schema.dict_size)
                with Elapsed(f"training dictionary for {path}", progress):
                    train_dictionary(ds, sample, staged, path)
                del sample
            rows = max(1, block_bytes // ds.record_size)
            with Progress(f"converting to {path}", count, progress) as report:
                for start in range(0, count, rows):
                    block = np.ascontiguousarray(data[start : start + rows])
                    ds.append(block)
                    report.update(block.shape[0], block.nbytes)
                    del block
                report.finish()
        return count

    return write_in_place(path, overwrite, write)


# --- records ----------------------------------------------------------------------------------


def _as_record(record: object, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """An array record as it is (the dataset checks its dtype); other sequences via np.asarray,
    refused when the cast would change a value (as pad() refuses its padding value)."""
    if isinstance(record, np.ndarray):
        return record
    values = np.asarray(record)
    if values.dtype == dtype:
        return values
    if values.dtype.kind not in "biufc":  # ragged lists and the like: NumPy says what is wrong
        return np.asarray(record, dtype=dtype)
    # The cast may warn about what _kept then refuses with a clearer message.
    with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        cast = values.astype(dtype)
        if not _kept(values, cast, dtype):
            raise ValueError(
                f"a record of {values.dtype} values does not fit dtype {dtype} without changing "
                f"them (np.asarray would truncate or wrap): convert it yourself first"
            )
    return cast


def _kept(values: npt.NDArray[Any], cast: npt.NDArray[Any], dtype: np.dtype[Any]) -> bool:
    """Whether cast holds the same values: a float dtype may round, but not turn a finite value
    infinite or drop an imaginary part; any other dtype must keep every value exactly."""
    if dtype.kind in "fc":
        return bool(
            np.array_equal(np.isfinite(cast), np.isfinite(values))
            and np.array_equal(np.isnan(cast), np.isnan(values))
            and (dtype.kind == "c" or not np.any(np.imag(values)))
        )
    return bool(np.array_equal(cast, values))


def refuse_dictionary(codec: str) -> None:
    """zstd_dict is refused for a stream: its dictionary must be trained on the final data."""
    if codec == "zstd_dict":
        raise ValueError(
            "from_iterator cannot write 'zstd_dict': a dictionary must be trained on the "
            "complete data. Convert with codec='zstd' first, then "
            "recode(src, dst, codec='zstd_dict') once the data is final"
        )


def records_to_dataset(
    path: str,
    iterable: Iterable[Any],
    codec: Codec = "zstd",
    dtype: DTypeLike | None = None,
    item_shape: SupportsIndex | Sequence[SupportsIndex] | None = None,
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: bool = False,
    progress: ProgressOption = None,
    shard_records: int = SHARD_RECORDS_MAX,
) -> int:
    """from_iterator in this process: the records written as a ragged dataset at path, rolling
    over into a new shard every shard_records records; their count."""
    progress = check_progress(progress)
    refuse_dictionary(codec)
    check_codec(codec)
    block_bytes = check_chunk_bytes(chunk_bytes)
    given_dtype = check_dtype(dtype) if dtype is not None else None
    given_shape = check_item_shape(item_shape) if item_shape is not None else None
    if given_dtype is not None:
        make_schema("ragged", given_dtype, given_shape or (), codec, "balanced")
    # Everything that needs no record is checked before the first is taken: a refused call
    # must leave the caller's iterator as it was (a retry with overwrite=True lost record 0).
    check_destination(path, overwrite)
    total = len(iterable) if isinstance(iterable, Sequence) else None
    if total is not None:  # as from_numpy refuses as many records
        check_record_count(total)
        check_shard_count(path, [(0, total)], shard_records, False)
    records: Iterator[Any] = iter(iterable)
    first: object = next(records, _END)
    if dtype is None and first is _END:
        raise ValueError(
            "from_iterator got no records and no dtype; pass dtype= for an empty store"
        )
    found_dtype = given_dtype if given_dtype is not None else np.asarray(first).dtype
    shape = given_shape if given_shape is not None else _item_shape(first, found_dtype)
    schema = make_schema("ragged", found_dtype, shape, codec, "balanced")
    # A stream's length is known only as it is read: the first record past the limit stops it.
    limit = layout.SHARD_COUNT_MAX * shard_records

    def write(staged: str) -> int:
        with RaggedDataset(staged, schema.dtype, schema.item_shape, schema.codec,
                           shard_records=shard_records) as ds:
            with Progress(f"converting to {path}", total, progress) as report:
                _stream_records(ds, first, records, block_bytes, report,
                                (limit, stream_refusal(path, shard_records)))
            return len(ds)

    return write_in_place(path, overwrite, write)


def _item_shape(first: object, dtype: np.dtype[Any]) -> tuple[int, ...]:
    """The item shape the first record gives a stream (() when there is none)."""
    if first is _END:
        return ()
    first_shape = _as_record(first, dtype).shape
    if len(first_shape) == 0:
        raise ValueError("records must have at least one dimension (L, *item_shape)")
    return tuple(first_shape[1:])


def _stream_records(
    ds: RaggedDataset, first: object, rest: Iterator[Any], block_bytes: int, report: Progress,
    limit: tuple[int, str],
) -> None:
    """The records into ds in blocks of about block_bytes; limit: the most records the dataset
    may take, and the ValueError's message for the first record past them."""
    pending: list[npt.NDArray[Any]] = []
    pending_bytes = 0
    taken = 0
    records_max, refusal = limit
    current = first
    while current is not _END:
        taken += 1
        if taken > records_max:
            raise ValueError(refusal)
        record = _as_record(current, ds.dtype)
        pending.append(record)
        pending_bytes += record.nbytes
        if pending_bytes >= block_bytes:
            ds.append(pending)
            report.update(len(pending), pending_bytes)
            pending = []
            pending_bytes = 0
        current = next(rest, _END)
    if pending:
        ds.append(pending)
        report.update(len(pending), pending_bytes)
    report.finish()


__all__ = ["CHUNK_BYTES_DEFAULT", "array_to_dataset", "check_array", "check_chunk_bytes",
           "check_record_count",
           "dictionary_sample", "train_dictionary",
           "records_to_dataset", "refuse_dictionary"]
