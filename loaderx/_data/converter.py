"""Converters into dataset folders: from_numpy (dense), from_iterator (ragged) and recode.

Every converter builds its result in a private staging folder beside the destination and moves
it into place only when everything was written and made durable (loaderx._os.folder_swap), so a failed,
interrupted or killed conversion leaves the old or the new destination, never neither. An existing destination is replaced only with overwrite=True, and only
when it holds nothing but a loaderx store's own files. Memory stays bounded: data moves in
blocks of about chunk_bytes, and a dictionary trains on a strided sample of bounded size.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._os.folder_swap import StagedFolder
from loaderx._data.dataset import DenseDataset, RaggedDataset
from loaderx._os.paths import PathArg, fs_path, is_file
from loaderx._data.progress import Progress, ProgressOption, check_progress
from loaderx._store.schema import (
    Codec,
    Schema,
    check_codec,
    check_dtype,
    check_item_shape,
    make_schema,
    read_schema,
    resolve_dict_size,
    schema_path,
)
from loaderx._store.sharded_store import check_shard_records
from loaderx._store.layout import (META_FILE, RECORD_COUNT_MAX, SHARD_RECORDS_MAX, manifest_path,
                                   shard_number)

CHUNK_BYTES_DEFAULT: Final = 64 << 20
# A dictionary trains on about this many bytes of samples per byte of dictionary (zstd's advice).
DICT_SAMPLE_FACTOR: Final = 100
# zstd's trainer refuses fewer than 7 samples (codec.zig's dict_sample_count_min); a sample is
# never cut below this many records even when they are large, so training has material.
DICT_SAMPLE_COUNT_MIN: Final = 7
_SAMPLE_COUNT_FLOOR: Final = 32
# Ragged stores: how many record lengths are looked at at once when cutting blocks.
_LENGTH_WINDOW: Final = 1 << 16
# Marks the end of an iterator (None could be a record, if a wrong one).
_END: Final = object()
# What a store folder may hold: the schema, the Zrecord files, and their temporary siblings.
# A store's own files, plus a sharded dataset's manifest, commit lock, shard folders and the
# staging folders a crashed rollover or commit may leave.
_STORE_FILE: Final = re.compile(
    r"(schema\.msgpack|meta\.zr|sums\.zr|dict\.zr|redo\.zr|[0-9]+\.zr|shards\.msgpack|shards\.lock"
    r"|shard-[0-9]{6,7}|\.staging-[0-9]+-[0-9a-f]+|open\.lock|writer\.lock|maintenance\.lock)"
    r"(\.tmp[-.\w]*)?"
)


# --- destinations -----------------------------------------------------------------------------


def _foreign_entries(folder: str) -> list[str]:
    """Names in folder that are not a loaderx store's own files."""
    return sorted(n for n in os.listdir(folder) if not _STORE_FILE.fullmatch(n))


def _is_store(folder: str) -> bool:
    return os.path.isfile(schema_path(folder)) or os.path.isfile(os.path.join(folder, META_FILE))


def _check_append_or_overwrite(append: bool, overwrite: bool) -> None:
    """The two ask for opposite things; refuse the pair rather than pick one silently."""
    if append and overwrite:
        raise ValueError(
            "append=True adds records to the dataset at path and overwrite=True replaces it: "
            "pass one of them"
        )


def _refuse_shard_folder(path: str) -> None:
    """A shard folder of a sharded dataset is no destination: a new store there has another
    count (or schema) than the manifest lists, so the dataset no longer opens, and a folder
    with a shard's name that the manifest does not list is removed by its next commit."""
    parent, name = os.path.split(os.path.realpath(path))
    if shard_number(name) is not None and os.path.exists(manifest_path(parent)):
        raise FileExistsError(
            f"{path!r} is a shard folder of the sharded dataset {parent!r}; refusing to write a "
            "store there even with overwrite=True (convert into another path)"
        )


def _check_destination(path: str, overwrite: bool) -> bool:
    """Raises unless path may be written; returns whether an old store has to be replaced.

    An empty folder counts as free. Anything else needs overwrite=True and must be a loaderx
    store holding only its own files: nothing else is ever deleted.
    """
    _refuse_shard_folder(path)
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
        return False
    if not overwrite:
        raise FileExistsError(
            f"{path!r} already exists; pass overwrite=True to replace the store there"
        )
    if os.path.islink(path) or not os.path.isdir(path) or not _is_store(path):
        raise FileExistsError(
            f"{path!r} exists and is not a loaderx store; refusing to remove it even with "
            "overwrite=True (delete it yourself or pick another path)"
        )
    foreign = _foreign_entries(path)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise FileExistsError(
            f"{path!r} is a loaderx store but also holds other files ({shown}); refusing to "
            "remove them even with overwrite=True"
        )
    return True


def _stage(path: str, overwrite: bool) -> tuple[StagedFolder, bool]:
    """A staging folder for path (after recovering any interrupted earlier conversion) and
    whether an old store has to be replaced on commit."""
    staging = StagedFolder(path)
    try:
        replace = _check_destination(staging.final, overwrite)
    except BaseException:
        staging.abort()
        raise
    return staging, replace


def _commit(staging: StagedFolder, replace: bool) -> None:
    # Checked again right before the swap: the folder may have changed while the conversion ran.
    staging.commit(replace, recheck=lambda: _check_destination(staging.final, True))


def _check_chunk_bytes(chunk_bytes: int) -> int:
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, (int, np.integer)):
        raise TypeError(f"chunk_bytes must be an int, got {chunk_bytes!r}")
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    return int(chunk_bytes)


def _sample_positions(count: int, record_bytes: float, dict_size: int) -> npt.NDArray[np.int64]:
    """Evenly strided positions over 0..count whose records total about 100x dict_size bytes."""
    budget = DICT_SAMPLE_FACTOR * dict_size
    wanted = int(budget // max(record_bytes, 1.0))
    taken = min(count, max(_SAMPLE_COUNT_FLOOR, wanted))
    return np.unique(np.linspace(0, count - 1, taken).astype(np.int64))


# --- from_numpy -------------------------------------------------------------------------------


def from_numpy(
    path: PathArg,
    array: npt.ArrayLike,
    codec: Codec = "zstd",
    dict_size: str | int = "balanced",
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: bool = False,
    progress: ProgressOption = None,
    workers: int = 1,
    append: bool = False,
    shard_records: int = SHARD_RECORDS_MAX,
    start_method: str | None = None,
) -> int:
    """Writes array as a dense dataset at path, one record per slice along axis 0.

    A 1-D array becomes a dataset of scalars. The array is read in blocks of about chunk_bytes,
    so an np.memmap (or np.load(..., mmap_mode='r')) of any size is never loaded whole. With
    codec="zstd_dict" the dictionary is trained first on an evenly strided sample of the whole
    array (about 100x dict_size bytes), so the result is appendable at once. Returns the number
    of records written.

    workers=N > 1 converts with N processes, each writing a contiguous part of the rows as its
    own shard(s) of at most shard_records records, and publishes them only when all succeeded
    (loaderx._data.parallel). append=True adds the new records as new shards of the dataset at path
    in one atomic commit (creating it if absent). start_method picks how worker processes
    start (default "fork" where available).
    """
    path = fs_path(path)
    _check_append_or_overwrite(append, overwrite)
    progress = check_progress(progress)
    data = array if isinstance(array, np.ndarray) else np.asarray(array)
    if data.ndim == 0:
        raise ValueError("from_numpy needs an array with at least one dimension (axis 0: records)")
    schema = make_schema("dense", data.dtype, data.shape[1:], codec, dict_size)
    block_bytes = _check_chunk_bytes(chunk_bytes)
    count = int(data.shape[0])
    if count > RECORD_COUNT_MAX:  # before any worker starts
        raise ValueError(
            f"{count} records exceed a dataset's limit of {RECORD_COUNT_MAX} (2^20 shards)"
        )
    if workers != 1 or append:
        return _from_numpy_parallel(path, data, schema, workers, append, shard_records,
                                    start_method, overwrite, block_bytes, codec, dict_size)
    _check_trainable(schema.codec, count)
    staging, replace = _stage(os.fspath(path), overwrite)
    try:
        with DenseDataset(
            staging.path, schema.dtype, schema.item_shape, schema.codec, dict_size
        ) as ds:
            if schema.codec == "zstd_dict" and count > 0:
                positions = _sample_positions(count, ds.record_size, schema.dict_size)
                ds.train_dict(np.ascontiguousarray(data[positions]))
            rows = max(1, block_bytes // ds.record_size)
            with Progress(f"from_numpy {os.fspath(path)}", count, progress) as report:
                for start in range(0, count, rows):
                    block = np.ascontiguousarray(data[start : start + rows])
                    ds.append(block)
                    report.update(block.shape[0], block.nbytes)
                    del block
                report.finish()
        _commit(staging, replace)
    except BaseException:
        staging.abort()
        raise
    return count


def _from_numpy_parallel(
    path: str | os.PathLike[str], data: npt.NDArray[Any], schema: Schema, workers: int,
    append: bool, shard_records: int, start_method: str | None, overwrite: bool,
    block_bytes: int, codec: Codec, dict_size: str | int,
) -> int:
    from loaderx._data import parallel

    count_workers = parallel.check_workers(workers)
    per_shard = check_shard_records(shard_records)
    count = int(data.shape[0])
    if count == 0 and not append:
        return from_numpy(path, data, codec, dict_size, block_bytes, overwrite, False)
    _check_trainable(schema.codec, min(count, per_shard, -(-count // count_workers)))
    options: dict[str, Any] = {"codec": codec, "dict_size": dict_size,
                               "chunk_bytes": block_bytes, "progress": False}
    return parallel.convert_numpy(os.fspath(path), data, schema, count_workers, options,
                                  overwrite, append, per_shard, start_method)


# --- from_iterator ----------------------------------------------------------------------------


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


def from_iterator(
    path: PathArg,
    iterable: Iterable[Any],
    codec: Codec = "zstd",
    dtype: DTypeLike | None = None,
    item_shape: SupportsIndex | Sequence[SupportsIndex] | None = None,
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: bool = False,
    progress: ProgressOption = None,
    workers: int | None = None,
    append: bool = False,
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
    _check_append_or_overwrite(append, overwrite)
    progress = check_progress(progress)
    if workers is not None or append:
        return _from_iterator_parallel(path, iterable, codec, dtype, item_shape, chunk_bytes,
                                       overwrite, workers, append, shard_records, start_method)
    _refuse_dictionary(codec)
    check_codec(codec)
    block_bytes = _check_chunk_bytes(chunk_bytes)
    given_dtype = check_dtype(dtype) if dtype is not None else None
    given_shape = check_item_shape(item_shape) if item_shape is not None else None
    if given_dtype is not None:
        make_schema("ragged", given_dtype, given_shape or (), codec, "balanced")
    # Everything that needs no record is checked before the first is taken: a refused call
    # must leave the caller's iterator as it was (a retry with overwrite=True lost record 0).
    _check_destination(os.fspath(path), overwrite)
    records: Iterator[Any] = iter(iterable)
    first: object = next(records, _END)
    if dtype is None and first is _END:
        raise ValueError("from_iterator got no records and no dtype; pass dtype= for an empty store")
    found_dtype = given_dtype if given_dtype is not None else np.asarray(first).dtype
    if given_shape is not None:
        shape = given_shape
    elif first is _END:
        shape = ()
    else:
        first_shape = _as_record(first, found_dtype).shape
        if len(first_shape) == 0:
            raise ValueError("records must have at least one dimension (L, *item_shape)")
        shape = tuple(first_shape[1:])
    schema = make_schema("ragged", found_dtype, shape, codec, "balanced")
    total = len(iterable) if isinstance(iterable, Sequence) else None
    staging, replace = _stage(os.fspath(path), overwrite)
    try:
        with RaggedDataset(staging.path, schema.dtype, schema.item_shape, schema.codec) as ds:
            with Progress(f"from_iterator {os.fspath(path)}", total, progress) as report:
                _stream_records(ds, first, records, block_bytes, report)
            count = len(ds)
        _commit(staging, replace)
    except BaseException:
        staging.abort()
        raise
    return count


def _refuse_dictionary(codec: str) -> None:
    if codec == "zstd_dict":
        raise ValueError(
            "from_iterator cannot write 'zstd_dict': a dictionary must be trained on the "
            "complete data. Convert with codec='zstd' first, then "
            "recode(src, dst, codec='zstd_dict') once the data is final"
        )


def _from_iterator_parallel(
    path: str | os.PathLike[str], sources: Iterable[Any], codec: Codec, dtype: DTypeLike | None,
    item_shape: SupportsIndex | Sequence[SupportsIndex] | None, chunk_bytes: int,
    overwrite: bool, workers: int | None, append: bool, shard_records: int,
    start_method: str | None,
) -> int:
    from loaderx._data import parallel

    if isinstance(sources, (str, bytes, np.ndarray)) or not isinstance(sources, Sequence):
        raise TypeError(
            "from_iterator(..., workers=N) takes a list of sources (iterables of records, or "
            f"zero-argument callables returning one), got {type(sources).__name__}"
        )
    _refuse_dictionary(codec)
    check_codec(codec)
    if dtype is not None:
        make_schema("ragged", dtype, () if item_shape is None else item_shape, codec, "balanced")
    count_workers = parallel.check_workers(1 if workers is None else workers)
    options: dict[str, Any] = {"codec": codec, "chunk_bytes": _check_chunk_bytes(chunk_bytes),
                               "progress": False}
    return parallel.convert_iterables(os.fspath(path), list(sources), count_workers, dtype,
                                      item_shape, options, overwrite, append,
                                      check_shard_records(shard_records), start_method)


def _stream_records(
    ds: RaggedDataset, first: object, rest: Iterator[Any], block_bytes: int, report: Progress
) -> None:
    pending: list[npt.NDArray[Any]] = []
    pending_bytes = 0
    current = first
    while current is not _END:
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


# --- recode -----------------------------------------------------------------------------------


def _same_place(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _inside(path: str, folder: str) -> bool:
    """True when path lies inside folder (both resolved, so symlinks and '..' count)."""
    real_path, real_folder = os.path.realpath(path), os.path.realpath(folder)
    return real_path != real_folder and os.path.commonpath([real_path, real_folder]) == real_folder


def _dense_blocks(count: int, record_size: int, block_bytes: int) -> Iterator[tuple[int, int]]:
    rows = max(1, block_bytes // record_size)
    for start in range(0, count, rows):
        yield start, min(count, start + rows)


def _ragged_blocks(src: RaggedDataset, block_bytes: int) -> Iterator[tuple[int, int]]:
    """Consecutive [start, stop) ranges of about block_bytes each (at least one record)."""
    count = len(src)
    start = 0
    while start < count:
        window = src.lengths(slice(start, min(count, start + _LENGTH_WINDOW)))
        sizes = np.cumsum(window * src.row_size)
        fit = int(np.searchsorted(sizes, block_bytes, side="right"))
        stop = start + max(1, fit)
        yield start, stop
        start = stop


def _ragged_sample(src: RaggedDataset, dict_size: int) -> list[npt.NDArray[Any]]:
    """An evenly strided sample of non-empty records of about 100x dict_size bytes."""
    count = len(src)
    probe = src.lengths(np.unique(np.linspace(0, count - 1, min(count, 4096)).astype(np.int64)))
    mean_bytes = float(probe.mean()) * src.row_size if len(probe) else 1.0
    positions = _sample_positions(count, mean_bytes, dict_size)
    records: list[npt.NDArray[Any]] = src[positions]
    return [r for r in records if r.shape[0] > 0]


def _check_trainable(codec: str, count: int) -> None:
    """A zstd_dict conversion needs enough records to train on (none at all is fine)."""
    if codec == "zstd_dict" and 0 < count < DICT_SAMPLE_COUNT_MIN:
        raise ValueError(
            f"'zstd_dict' trains a dictionary on the records, which needs at least "
            f"{DICT_SAMPLE_COUNT_MIN} of them (ideally hundreds); there are {count}: use 'zstd'"
        )


def recode(
    src: PathArg,
    dst: PathArg,
    codec: Codec = "zstd",
    dict_size: str | int = "balanced",
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: bool = False,
    progress: ProgressOption = None,
) -> int:
    """Rewrites the dataset at src into dst with another codec (any codec to any codec).

    Records are copied in ascending index order, so datasets recoded together stay aligned;
    the schema is carried over with only the codec (and dict_size) replaced. For "zstd_dict"
    the dictionary is trained first on a strided sample of the whole source. Memory is bounded
    by chunk_bytes plus that sample. Returns the number of records written.
    """
    src_path = fs_path(src)
    dst_path = fs_path(dst)
    progress = check_progress(progress)
    if _same_place(src_path, dst_path):
        raise ValueError(f"recode needs a destination other than its source ({src_path!r})")
    if _inside(src_path, dst_path):
        # Replacing dst (a sharded dataset, say, recoded from one of its shards) would delete
        # the source along with it.
        raise ValueError(
            f"recode needs a destination that does not hold its source ({src_path!r} is inside "
            f"{dst_path!r}, and replacing that would delete it)"
        )
    # Checked here so that the error names the source, not the schema file read_schema opens.
    if not is_file(schema_path(src_path)):
        raise FileNotFoundError(f"no loaderx dataset at {src_path!r} to recode")
    found = read_schema(src_path)
    target = found.with_codec(codec, dict_size)
    block_bytes = _check_chunk_bytes(chunk_bytes)
    _check_destination(dst_path, overwrite)  # before a dictionary's sample is read
    # verify=True: a damaged raw record must stop the recode, not be re-checksummed into a
    # destination that then verifies clean. The source is opened, and a dictionary's sample
    # taken (too few records refused), before the staging folder (or a missing parent folder
    # of the destination) is made: a refused recode changes nothing.
    label = f"recode {src_path} -> {target.codec}"
    if found.kind == "dense":
        with DenseDataset(src_path, readonly=True, verify=True) as dense:
            dense_sample = _dense_training(dense, target)
            return _recode_into(dst_path, overwrite, lambda staged: _recode_dense(
                dense, staged, target, dense_sample, block_bytes, label, progress))
    with RaggedDataset(src_path, readonly=True, verify=True) as ragged:
        ragged_sample = _ragged_training(ragged, target)
        return _recode_into(dst_path, overwrite, lambda staged: _recode_ragged(
            ragged, staged, target, ragged_sample, block_bytes, label, progress))


def _recode_into(dst_path: str, overwrite: bool, write: Callable[[str], int]) -> int:
    """write(staging folder) for dst_path, committed in its place; returns write's count."""
    staging, replace = _stage(dst_path, overwrite)
    try:
        count = write(staging.path)
        _commit(staging, replace)
    except BaseException:
        staging.abort()
        raise
    return count


def _dense_training(src: DenseDataset, target: Schema) -> npt.NDArray[Any] | None:
    """The records a zstd_dict recode trains its dictionary on (None for another codec or no
    records); ValueError when there are too few."""
    if target.codec != "zstd_dict":
        return None
    count = len(src)
    _check_trainable(target.codec, count)
    if count == 0:
        return None
    sample: npt.NDArray[Any] = src[_sample_positions(count, src.record_size, target.dict_size)]
    return sample


def _ragged_training(src: RaggedDataset, target: Schema) -> list[npt.NDArray[Any]] | None:
    """_dense_training for a ragged source: a sample of its non-empty records."""
    count = len(src)
    if target.codec != "zstd_dict" or count == 0:
        return None
    sample = _ragged_sample(src, target.dict_size)
    if len(sample) < DICT_SAMPLE_COUNT_MIN:
        raise ValueError(
            f"'zstd_dict' needs at least {DICT_SAMPLE_COUNT_MIN} non-empty records to "
            f"train a dictionary; a strided sample of {count} records found "
            f"{len(sample)}: use 'zstd'"
        )
    return sample


def _recode_dense(
    src: DenseDataset, dst_path: str, target: Schema, sample: npt.NDArray[Any] | None,
    block_bytes: int, label: str, progress: ProgressOption,
) -> int:
    with DenseDataset(
        dst_path, target.dtype, target.item_shape, target.codec, _dict_arg(target)
    ) as dst:
        count = len(src)
        if sample is not None:
            dst.train_dict(sample)
        with Progress(label, count, progress) as report:
            for start, stop in _dense_blocks(count, src.record_size, block_bytes):
                block = src[start:stop]
                dst.append(block)
                report.update(stop - start, block.nbytes)
            report.finish()
        return len(dst)


def _recode_ragged(
    src: RaggedDataset, dst_path: str, target: Schema, sample: list[npt.NDArray[Any]] | None,
    block_bytes: int, label: str, progress: ProgressOption,
) -> int:
    with RaggedDataset(
        dst_path, target.dtype, target.item_shape, target.codec, _dict_arg(target)
    ) as dst:
        count = len(src)
        if sample is not None:
            dst.train_dict(sample)
        with Progress(label, count, progress) as report:
            for start, stop in _ragged_blocks(src, block_bytes):
                records: list[npt.NDArray[Any]] = src[start:stop]
                dst.append(records)
                report.update(stop - start, sum(r.nbytes for r in records))
            report.finish()
        return len(dst)


def _dict_arg(schema: Schema) -> str | int:
    return schema.dict_size if schema.codec == "zstd_dict" else "balanced"


__all__ = ["CHUNK_BYTES_DEFAULT", "from_iterator", "from_numpy", "recode", "resolve_dict_size"]
