"""Opening the store a command names and reading its records' sizes in bounded windows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._data.open_any import open_dataset
from loaderx._data.ragged import RaggedDataset
from loaderx._os.paths import exists, is_file
from loaderx._os.urls import is_url
from loaderx._store.schema import SCHEMA_FILE, has_schema, read_schema
from loaderx._store.layout import META_FILE, shard_number
from loaderx._store.zrecord import Zrecord
from loaderx.cli.exits import Problem

Store = DenseDataset | RaggedDataset | Zrecord
# Records are read about this many bytes at a time (head, and the .npz reader's blocks).
READ_BYTES: Final = 1 << 24
# Record sizes are looked at this many at a time (8 MiB of lengths), so that info and stats
# of a dataset of any size take bounded memory.
LENGTH_WINDOW: Final = 1 << 20


def is_store(path: str) -> bool:
    """Whether path holds a dataset (its schema) or a bare Zrecord store (its meta.zr)."""
    return has_schema(path) or is_file(os.path.join(path, META_FILE))


def stores_inside(path: str) -> list[str]:
    """The names of the sub-folders of path that hold a store, sorted, when path is a folder
    and no store itself (what `convert x.npz out` and the Ray sink write: one per array)."""
    if not os.path.isdir(path) or is_store(path):
        return []
    with os.scandir(path) as entries:
        return sorted(entry.name for entry in entries
                      if entry.is_dir() and is_store(entry.path))


def open_store(path: str, readonly: bool = True) -> Store:
    """The dataset at path (by its schema), or the bare Zrecord store when it has none.

    Read-only unless the command writes: inspecting a store takes no writer lock, so it works
    while a training job or a conversion holds the store."""
    if is_url(path):
        return open_dataset(path)
    if not exists(path):
        raise Problem(f"{path}: no such file or folder")
    # is_file, not os.path.isfile: a store folder the user may not read is a PermissionError
    # naming it, not "no store here"; has_schema refuses a damaged schema file, rather than
    # open the dataset as its bare store (a compaction would then run on a damaged dataset).
    if has_schema(path):
        if read_schema(path).kind == "ragged":
            return RaggedDataset(path, readonly=readonly)
        return DenseDataset(path, readonly=readonly)
    if is_file(os.path.join(path, META_FILE)):
        return Zrecord(path, readonly=readonly)
    inside = stores_inside(path)
    if inside:  # what a conversion of an .npz or a Parquet file writes: name one of them
        shown = ", ".join(inside[:5]) + (", ..." if len(inside) > 5 else "")
        raise Problem(f"{path}: a folder of {len(inside)} stores ({shown}), not one store: "
                      f"give one of them, e.g. {os.path.join(path, inside[0])}")
    raise Problem(f"{path}: not a loaderx dataset or Zrecord store (no {SCHEMA_FILE}, no meta.zr)")


def record_lengths(opened: RaggedDataset | Zrecord, window: slice) -> npt.NDArray[np.uint64]:
    """The logical (decompressed) size of the records in a window."""
    if isinstance(opened, RaggedDataset):
        return opened.lengths(window).astype(np.uint64) * np.uint64(opened.row_size)
    return opened.record_lengths(window)


def record_sizes(opened: Store) -> tuple[int, int, int]:
    """(smallest, largest, total) logical record size of a store that holds records. A dense
    dataset's are its record size; the others' are read a window at a time."""
    if isinstance(opened, DenseDataset):
        return opened.record_size, opened.record_size, opened.record_size * len(opened)
    smallest, largest, total = -1, 0, 0
    count = len(opened)
    for start in range(0, count, LENGTH_WINDOW):
        window = record_lengths(opened, slice(start, min(count, start + LENGTH_WINDOW)))
        low = int(window.min())
        smallest = low if smallest < 0 else min(smallest, low)
        largest = max(largest, int(window.max()))
        total += int(window.sum(dtype=np.uint64))
    return smallest, largest, total


def record_blocks(opened: RaggedDataset | Zrecord, count: int) -> Iterator[slice]:
    """Consecutive slices of 0..count holding about READ_BYTES of records each (at least one
    record)."""
    start = 0
    while start < count:
        window = record_lengths(opened, slice(start, min(count, start + LENGTH_WINDOW)))
        fit = int(np.searchsorted(np.cumsum(window, dtype=np.uint64), READ_BYTES, side="right"))
        stop = start + max(1, fit)
        yield slice(start, stop)
        start = stop


def shard_names(opened: Store) -> list[str] | None:
    """The shard folders of a sharded dataset; None for a single store."""
    if isinstance(opened, Zrecord) or not opened.sharded:
        return None
    return [str(shard["name"]) for shard in opened.shard_stats()]


def usage_of(opened: Store, path: str) -> tuple[int, int]:
    """disk_usage of a local store; for a dataset opened from a URL, (its size in the object
    store, what its records take in the local cache)."""
    if not isinstance(opened, Zrecord):
        remote = opened.remote_usage()
        if remote is not None:
            return remote
    return disk_usage(path)


def disk_usage(path: str) -> tuple[int, int]:
    """(apparent size, allocated bytes) of the files in a store folder and its shard folders."""
    apparent = allocated = 0
    for entry in os.scandir(path):
        if entry.is_file(follow_symlinks=False):
            info = entry.stat(follow_symlinks=False)
            apparent += info.st_size
            allocated += info.st_blocks * 512
        elif entry.is_dir(follow_symlinks=False) and shard_number(entry.name) is not None:
            inner = disk_usage(entry.path)
            apparent += inner[0]
            allocated += inner[1]
    return apparent, allocated
