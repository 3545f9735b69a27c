"""Parallel conversion: N processes each write their own shard(s); one commit publishes them.

`from_numpy(..., workers=N)` and `from_iterator(path, sources, workers=N)` (loaderx._data.converter)
hand their work to this module. Each worker process converts its part with the single-process
converter (loaderx._data.serial) into a part folder of a hidden staging folder beside the
destination (loaderx._data.parallel_parts). Only when every worker has succeeded are the parts
published, in order, as the shards of the destination: a new dataset moves into place as a whole
(the converters' overwrite rules apply), an append adds them with one atomic manifest commit. A
worker that raises or dies (even by SIGKILL) stops the others (loaderx._os.process_pool); the
staging folder is removed and the destination is left exactly as it was.

Processes start with "fork" where the platform has it, so the array and the sources reach the
workers without being pickled; with start_method="spawn" or "forkserver" every source must be
picklable (pass zero-argument callables such as functools.partial objects, not generators).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.dense import DenseDataset
from loaderx._data.destination import check_destination
from loaderx._data.parallel_parts import (
    Part,
    check_append_target,
    common_schema,
    make_staging,
    part_folder,
    publish,
)
from loaderx._data.serial import (
    array_to_dataset,
    check_chunk_bytes,
    dictionary_sample,
    records_to_dataset,
    refuse_dictionary,
    train_dictionary,
)
from loaderx._data.dictionary_sample import check_trainable
from loaderx._data.shard_budget import ShardBudget, check_shard_count, shards_held
from loaderx._os import claims
from loaderx._os.process_pool import check_workers, pool_context, run_workers
from loaderx._store.layout import DICT_FILE
from loaderx._store.schema import Codec, Schema, check_codec, make_schema, read_schema
from loaderx._store.sharded_store import check_shard_records

_END: Final = object()

Source = Iterable[Any] | Callable[[], Iterable[Any]]


# --- the entry points of the converters -------------------------------------------------------


def from_numpy_parallel(
    path: str, data: npt.NDArray[Any], schema: Schema, workers: int, append: bool,
    shard_records: int, start_method: str | None, overwrite: bool, block_bytes: int,
    codec: Codec, dict_size: str | int,
) -> int:
    """from_numpy(..., workers=N) or (..., append=True), its array and schema already checked."""
    count_workers = check_workers(workers)
    per_shard = check_shard_records(shard_records)
    count = int(data.shape[0])
    if count == 0 and not append:
        return array_to_dataset(path, data, codec, dict_size, block_bytes, overwrite, False)
    check_trainable(schema.codec, count)
    options: dict[str, Any] = {"codec": codec, "dict_size": dict_size,
                               "chunk_bytes": block_bytes, "progress": False}
    return convert_numpy(path, data, schema, count_workers, options, overwrite, append,
                         per_shard, start_method)


def from_iterator_parallel(
    path: str, sources: Iterable[Any], codec: Codec, dtype: DTypeLike | None,
    item_shape: SupportsIndex | Sequence[SupportsIndex] | None, chunk_bytes: int,
    overwrite: bool, workers: int | None, append: bool, shard_records: int,
    start_method: str | None,
) -> int:
    """from_iterator(path, sources, workers=N) or (..., append=True): checks its arguments."""
    if isinstance(sources, (str, bytes, np.ndarray)) or not isinstance(sources, Sequence):
        raise TypeError(
            "from_iterator(..., workers=N) takes a list of sources (iterables of records, or "
            f"zero-argument callables returning one), got {type(sources).__name__}"
        )
    refuse_dictionary(codec)
    check_codec(codec)
    if dtype is not None:
        make_schema("ragged", dtype, () if item_shape is None else item_shape, codec, "balanced")
    count_workers = check_workers(1 if workers is None else workers)
    options: dict[str, Any] = {"codec": codec, "chunk_bytes": check_chunk_bytes(chunk_bytes),
                               "progress": False}
    return convert_iterables(path, list(sources), count_workers, dtype, item_shape, options,
                             overwrite, append, check_shard_records(shard_records), start_method)


# --- from_numpy -------------------------------------------------------------------------------


def split_ranges(count: int, parts: int) -> list[tuple[int, int]]:
    """count records cut into `parts` contiguous ranges whose sizes differ by at most one."""
    bounds = [count * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i] < bounds[i + 1]]


def pieces(start: int, stop: int, shard_records: int) -> list[tuple[int, int]]:
    """[start, stop) cut into ranges of at most shard_records records."""
    return [(a, min(stop, a + shard_records)) for a in range(start, stop, shard_records)]


class _NumpyJob:
    """One worker's share of from_numpy: its contiguous rows, in shards of shard_records."""

    def __init__(self, staging: str, index: int, rows: npt.NDArray[Any], shard_records: int,
                 options: dict[str, Any]) -> None:
        self.staging = staging
        self.index = index
        self.rows = rows  # a view (fork) or the pickled rows themselves (spawn, forkserver)
        # Kept apart: NumPy may unpickle an array of non-native byte order as native order
        # (same values), which would write shards of another dtype than the schema's.
        self.dtype = rows.dtype
        self.options = options
        self.shard_records = shard_records

    def __call__(self) -> list[Part]:
        rows = self.rows if self.rows.dtype == self.dtype else self.rows.astype(self.dtype)
        written: list[Part] = []
        for piece, (a, b) in enumerate(pieces(0, len(rows), self.shard_records)):
            folder = part_folder(self.staging, self.index, piece)
            count = array_to_dataset(folder, rows[a:b], overwrite=False, **self.options)
            written.append((folder, count))
        return written


def shared_dictionary(staging: str, data: npt.NDArray[Any], schema: Schema, final: str) -> str:
    """Trains the dictionary every shard of a zstd_dict conversion takes, once, here, on a
    sample of the whole array (what one process would train on); returns its file. So a
    part's last shard of a few records has one too, all shards share it as rollovers do, and
    data zstd cannot train on is refused before any worker starts."""
    folder = os.path.join(staging, ".dictionary")
    with DenseDataset(folder, schema.dtype, schema.item_shape, "zstd_dict",
                      schema.dict_size) as ds:
        train_dictionary(ds, dictionary_sample(data, schema.dict_size), folder, final)
    return os.path.join(folder, DICT_FILE)


def convert_numpy(path: str, data: npt.NDArray[Any], schema: Schema, workers: int,
                  options: dict[str, Any], overwrite: bool, append: bool,
                  shard_records: int, start_method: str | None) -> int:
    """from_numpy with `workers` processes, each writing contiguous rows as its own shard(s)."""
    final = os.path.abspath(path)
    if append:
        check_append_target(final, schema)
    else:
        check_destination(final, overwrite)
    count = int(data.shape[0])
    ranges = split_ranges(count, workers)
    check_shard_count(final, ranges, shard_records, append)
    staging = make_staging(final)
    try:
        if schema.codec == "zstd_dict":
            options = {**options, "dictionary": shared_dictionary(staging, data, schema, final)}
        jobs = [_NumpyJob(staging, i, data[a:b], shard_records, options)
                for i, (a, b) in enumerate(ranges)]
        results = run_workers(jobs, workers, start_method,
                              lambda i: f"records {ranges[i][0]} to {ranges[i][1] - 1}")
        parts: list[Part] = [part for written in results for part in written]
        publish(final, parts, schema, overwrite, append)
    finally:
        claims.discard(staging)
    return count


# --- from_iterator ----------------------------------------------------------------------------


def _records_of(source: Source) -> Iterator[Any]:
    """A source is an iterable of records, or a zero-argument callable that returns one."""
    if callable(source):
        return iter(source())
    return iter(source)


class _IteratorJob:
    """One worker's share of a parallel from_iterator: one source, rolled into shards."""

    def __init__(self, staging: str, index: int, source: Source, dtype: DTypeLike | None,
                 item_shape: SupportsIndex | Sequence[SupportsIndex] | None,
                 options: dict[str, Any], shard_records: int, budget: ShardBudget) -> None:
        self.staging = staging
        self.budget = budget
        self.index = index
        self.source = source
        self.dtype = dtype
        self.item_shape = item_shape
        self.options = options
        self.shard_records = shard_records

    def __call__(self) -> list[Part]:
        records = _records_of(self.source)
        dtype, item_shape = self.dtype, self.item_shape
        written: list[Part] = []
        for piece in itertools.count():
            first = next(records, _END)
            if first is _END:
                return written
            self.budget.take()  # before the shard's first byte
            block = itertools.chain([first], itertools.islice(records, self.shard_records - 1))
            folder = part_folder(self.staging, self.index, piece)
            count = records_to_dataset(folder, block, dtype=dtype, item_shape=item_shape,
                                       **self.options)
            written.append((folder, count))
            if dtype is None:  # later pieces keep the first piece's inferred schema
                found = read_schema(folder)
                dtype, item_shape = found.dtype, found.item_shape
        raise AssertionError("unreachable")


def convert_iterables(path: str, sources: Sequence[Source], workers: int,
                      dtype: DTypeLike | None,
                      item_shape: SupportsIndex | Sequence[SupportsIndex] | None,
                      options: dict[str, Any], overwrite: bool, append: bool,
                      shard_records: int, start_method: str | None) -> int:
    """from_iterator over several sources, one process per source (at most `workers` at once).

    The records of source k come after those of source k-1 in the result, whatever order the
    workers finish in. A source that yields nothing contributes no shard.
    """
    final = os.path.abspath(path)
    if not append:
        check_destination(final, overwrite)
    budget = ShardBudget(pool_context(start_method), final, shard_records,
                         shards_held(final, append))
    staging = make_staging(final)
    try:
        jobs = [_IteratorJob(staging, i, s, dtype, item_shape, options, shard_records, budget)
                for i, s in enumerate(sources)]
        results = run_workers(jobs, workers, start_method, lambda i: f"source {i}")
        parts: list[Part] = [part for written in results for part in written]
        owners = [i for i, written in enumerate(results) for _ in written]
        if not parts:
            if append:
                return 0
            if dtype is None:
                raise ValueError("from_iterator's sources gave no records and no dtype; pass "
                                 "dtype= for an empty store")
            return records_to_dataset(final, [], dtype=dtype, item_shape=item_shape,
                                      overwrite=overwrite, **options)
        schema = common_schema(parts, lambda p: f"source {owners[p]}")
        if append:
            check_append_target(final, schema)
        publish(final, parts, schema, overwrite, append)
        return sum(count for _, count in parts)
    finally:
        claims.discard(staging)


__all__ = ["convert_iterables", "convert_numpy", "from_iterator_parallel",
           "from_numpy_parallel", "pieces", "split_ranges"]
