"""The converters into dataset folders: from_numpy (dense) and from_iterator (ragged).

A URL destination (s3://, gs://, az://) is built locally and uploaded (remote_write.py).
Each one checks its arguments and converts in this process (loaderx._data.serial) or, with
workers or append=True, with several processes into new shards (loaderx._data.parallel). A
failed, interrupted or killed conversion leaves the old or the new destination, never neither
(loaderx._data.destination). recode lives in loaderx._data.recode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, SupportsIndex

import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.destination import check_append_or_overwrite
from loaderx._data.parallel import from_iterator_parallel, from_numpy_parallel
from loaderx._data.progress import ProgressOption, check_progress
from loaderx._data.serial import (
    CHUNK_BYTES_DEFAULT,
    array_to_dataset,
    check_array,
    records_to_dataset,
)
from loaderx._data.remote_write import write_to_url
from loaderx._os.paths import PathArg, fs_path
from loaderx._os.urls import is_url
from loaderx._store.choices import START_METHODS, check_optional_choice
from loaderx._store.flags import Flag, check_flag
from loaderx._store.schema import Codec
from loaderx._store.layout import SHARD_RECORDS_MAX
from loaderx._store.sharded_store import check_shard_records


def from_numpy(
    path: PathArg,
    array: npt.ArrayLike,
    codec: Codec = "zstd",
    dict_size: str | int = "balanced",
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: Flag = False,
    progress: ProgressOption = None,
    workers: int = 1,
    append: Flag = False,
    shard_records: int = SHARD_RECORDS_MAX,
    start_method: str | None = None,
) -> int:
    """Writes array as a dense dataset at path, one record per slice along axis 0.

    A 1-D array becomes a dataset of scalars. The array is read in blocks of about chunk_bytes,
    so an np.memmap (or np.load(..., mmap_mode='r')) of any size is never loaded whole. With
    codec="zstd_dict" the dictionary is trained first on an evenly strided sample of the whole
    array (about 100x dict_size bytes), so the result is appendable at once. Returns the number
    of records written.

    shard_records cuts the dataset into shards of at most that many records (in one process it
    rolls over as appends do). workers=N > 1 converts with N processes, each writing a
    contiguous part of the rows as its own shard(s), and publishes them only when all
    succeeded (loaderx._data.parallel); a zstd_dict conversion trains one dictionary on a
    sample of the whole array, here, and every shard takes a copy. append=True adds the new records as new shards of the dataset at path
    in one atomic commit (creating it if absent). start_method picks how worker processes
    start (default "fork" where available).
    """
    path = fs_path(path)
    overwrite = check_flag("overwrite", overwrite)
    append = check_flag("append", append)
    check_append_or_overwrite(append, overwrite)
    # Checked also where no worker process starts, as the loaders check it.
    start_method = check_optional_choice("start_method", start_method, START_METHODS)
    if is_url(path):
        return write_to_url(path, append, overwrite, lambda local: from_numpy(
            local, array, codec, dict_size, chunk_bytes, False, progress, workers, False,
            shard_records, start_method))
    if workers == 1 and not append:
        return array_to_dataset(path, array, codec, dict_size, chunk_bytes, overwrite, progress,
                                check_shard_records(shard_records))
    check_progress(progress)  # refused as in one process, though the workers show none
    data, schema, block_bytes = check_array(array, codec, dict_size, chunk_bytes)
    return from_numpy_parallel(path, data, schema, workers, append, shard_records,
                               start_method, overwrite, block_bytes, codec, dict_size)


def from_iterator(
    path: PathArg,
    iterable: Iterable[Any],
    codec: Codec = "zstd",
    dtype: DTypeLike | None = None,
    item_shape: SupportsIndex | Sequence[SupportsIndex] | None = None,
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: Flag = False,
    progress: ProgressOption = None,
    workers: int | None = None,
    append: Flag = False,
    shard_records: int = SHARD_RECORDS_MAX,
    start_method: str | None = None,
) -> int:
    """Writes a ragged dataset at path from an iterable of (L, *item_shape) arrays.

    dtype and item_shape default to the first record's dtype and trailing shape. Array records
    must have that dtype exactly; non-array records (lists) are converted to dtype, and refused
    (ValueError) when that would change a value (1.5 into an int dtype, 300 into uint8).
    Records are appended in batches of about chunk_bytes. "zstd_dict" is refused: a dictionary
    must be trained on final data, so stream with "zstd" and recode afterwards. Returns the
    number of records written.

    With workers=N, iterable is instead a sequence of sources, each an iterable of records or
    a zero-argument callable returning one (callables pickle, generators do not: use them with
    start_method "spawn"/"forkserver"). One process per source, at most N at once, writes
    that source's records as its own shard(s) of at most shard_records records; the shards
    are published in source order only when every source succeeded (loaderx._data.parallel).
    append=True adds them to the dataset at path in one atomic commit.
    """
    path = fs_path(path)
    overwrite = check_flag("overwrite", overwrite)
    append = check_flag("append", append)
    check_append_or_overwrite(append, overwrite)
    # Checked also where no worker process starts, as the loaders check it.
    start_method = check_optional_choice("start_method", start_method, START_METHODS)
    if is_url(path):
        return write_to_url(path, append, overwrite, lambda local: from_iterator(
            local, iterable, codec, dtype, item_shape, chunk_bytes, False, progress, workers,
            False, shard_records, start_method))
    if workers is None and not append:
        return records_to_dataset(path, iterable, codec, dtype, item_shape, chunk_bytes,
                                  overwrite, progress, check_shard_records(shard_records))
    check_progress(progress)  # refused as in one process, though the workers show none
    return from_iterator_parallel(path, iterable, codec, dtype, item_shape, chunk_bytes,
                                  overwrite, workers, append, shard_records, start_method)


__all__ = ["from_iterator", "from_numpy"]
