"""recode: a dataset rewritten into another folder with another codec, record for record."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._data.destination import check_destination, write_in_place
from loaderx._data.dictionary_sample import DICT_SAMPLE_COUNT_MIN, check_trainable, sample_positions
from loaderx._data.progress import Elapsed, Progress, ProgressOption, check_progress
from loaderx._data.ragged import RaggedDataset
from loaderx._data.serial import CHUNK_BYTES_DEFAULT, check_chunk_bytes
from loaderx._data.remote_write import write_to_url
from loaderx._os.urls import is_url, refuse_url
from loaderx._os.paths import PathArg, fs_path
from loaderx._store.flags import Flag, check_flag
from loaderx._store.schema import Codec, Schema, has_schema, read_schema

# Ragged stores: how many record lengths are looked at at once when cutting blocks.
_LENGTH_WINDOW: Final = 1 << 16


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
    positions = sample_positions(count, mean_bytes, dict_size)
    records: list[npt.NDArray[Any]] = src[positions]
    return [r for r in records if r.shape[0] > 0]


def recode(
    src: PathArg,
    dst: PathArg,
    codec: Codec = "zstd",
    dict_size: str | int = "balanced",
    chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    overwrite: Flag = False,
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
    overwrite = check_flag("overwrite", overwrite)
    refuse_url(src_path, "recode's source", "recode reads a local dataset (its destination may be a URL)")
    progress = check_progress(progress)
    if is_url(dst_path):
        return write_to_url(dst_path, False, overwrite, lambda local: recode(
            src_path, local, codec, dict_size, chunk_bytes, False, progress))
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
    if not has_schema(src_path):
        raise FileNotFoundError(f"no loaderx dataset at {src_path!r} to recode")
    found = read_schema(src_path)
    target = found.with_codec(codec, dict_size)
    block_bytes = check_chunk_bytes(chunk_bytes)
    check_destination(dst_path, overwrite)  # before a dictionary's sample is read
    if _inside(dst_path, src_path):
        # A store nested in the source's folder (a shard folder's name is refused above, as
        # for every converter): the source's folder would then hold a second dataset.
        raise ValueError(
            f"recode needs a destination outside its source ({dst_path!r} is inside "
            f"{src_path!r})"
        )
    # verify=True: a damaged raw record must stop the recode, not be re-checksummed into a
    # destination that then verifies clean. The source is opened, and a dictionary's sample
    # taken (too few records refused), before the staging folder (or a missing parent folder
    # of the destination) is made: a refused recode changes nothing.
    label = f"recoding {src_path} to {target.codec}"
    if found.kind == "dense":
        with DenseDataset(src_path, readonly=True, verify=True) as dense:
            dense_sample = _dense_training(dense, target)
            return write_in_place(dst_path, overwrite, lambda staged: _recode_dense(
                dense, staged, target, dense_sample, block_bytes, label, progress))
    with RaggedDataset(src_path, readonly=True, verify=True) as ragged:
        ragged_sample = _ragged_training(ragged, target)
        return write_in_place(dst_path, overwrite, lambda staged: _recode_ragged(
            ragged, staged, target, ragged_sample, block_bytes, label, progress))


def _dense_training(src: DenseDataset, target: Schema) -> npt.NDArray[Any] | None:
    """The records a zstd_dict recode trains its dictionary on (None for another codec or no
    records); ValueError when there are too few."""
    if target.codec != "zstd_dict":
        return None
    count = len(src)
    check_trainable(target.codec, count)
    if count == 0:
        return None
    sample: npt.NDArray[Any] = src[sample_positions(count, src.record_size, target.dict_size)]
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
            with Elapsed(f"{label}: training dictionary", progress):
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
            with Elapsed(f"{label}: training dictionary", progress):
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


__all__ = ["recode"]
