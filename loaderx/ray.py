"""Ray Data integration: write a ray.data.Dataset as loaderx datasets, read one back.

Optional (`pip install loaderx[ray]`): ray is imported here and nowhere else in loaderx.

Writing. `write_dataset(ds, path, columns=...)` writes each chosen column of the Ray dataset
as its own loaderx dataset under path (column "image" to path/image by default), so all of
them have the same length and the same row order. Every Ray write task writes its blocks as
its own shard(s) into a hidden staging folder beside path; path must therefore be on a file
system every node sees. Nothing is visible until `on_write_complete`, on the driver, which
publishes the shards in write-task order: a new destination appears with all its columns at
once (one rename), an append adds every column's shards in one commit that lands in all
columns or in none, even if the driver is killed (see "Appending to every column at once").
A failed write (`on_write_failed`) removes the staging folder and leaves path as it was.

Reading. `read_dataset(path)` is a `ray.data.Dataset` over the same layout (or over one
dataset folder), read by a `Datasource` whose tasks each gather a contiguous range of records.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import ray.data
from ray.data.block import Block, BlockAccessor, BlockMetadata
from ray.data.datasource import Datasink, Datasource, ReadTask, WriteResult

from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._data.parallel import split_ranges
from loaderx._data.parallel_parts import Part, common_schema
from loaderx._data.open_any import open_dataset
from loaderx._data.remote_write import write_columns_to_url
from loaderx._os.paths import PathArg, fs_path
from loaderx._os.urls import is_url
from loaderx._store.sharded_store import check_shard_records
from loaderx._data.column_append import append_all, recover_appends, refuse_some_new
from loaderx._store.flags import Flag, check_flag
from loaderx._store.schema import Codec, Schema, check_codec, differences, read_schema, schema_path
from loaderx._store.layout import SHARD_RECORDS_MAX

if TYPE_CHECKING:
    from ray.data._internal.execution.interfaces import TaskContext

CHUNK_BYTES_READ: Final = 32 << 20
# What one write task returns: its index and, per column, the parts it wrote in order.
TaskParts = dict[str, Any]


# --- column mapping ---------------------------------------------------------------------------


def _check_columns(columns: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """{column: dataset folder relative to the destination}; refuses clashes and escapes."""
    if isinstance(columns, str):
        raise TypeError("columns must be a list of column names or a {column: folder} mapping")
    mapping = dict(columns) if isinstance(columns, Mapping) else {c: c for c in columns}
    if not mapping:
        raise ValueError("columns is empty: name at least one column to write")
    for column, folder in mapping.items():
        parts = os.path.normpath(folder).split(os.sep)
        if os.path.isabs(folder) or ".." in parts or folder in ("", "."):
            raise ValueError(f"column {column!r}: folder {folder!r} must be a plain relative name")
    if len({os.path.normpath(f) for f in mapping.values()}) != len(mapping):
        raise ValueError(f"two columns map to the same folder: {mapping}")
    return mapping


def _refuse_hidden(mapping: dict[str, str]) -> None:
    """Hidden names under the destination are the writer's own: an append recovers (or
    removes) every .loaderx-append-* and .loaderx-appended-* folder there as its journal, and
    read_dataset(path) skips them, so a column written to one would be lost."""
    for column, folder in mapping.items():
        if any(part.startswith(".") for part in os.path.normpath(folder).split(os.sep)):
            raise ValueError(f"column {column!r}: folder {folder!r} must not be hidden (start "
                             "with '.'): hidden names under path are kept for append journals")


# --- one column's shards inside one write task ------------------------------------------------


def _nested(value: Any) -> Any:
    """One row as one array. Ray gives an Arrow list column as an object array holding each
    row's array, and a list of lists as object arrays of such arrays: those are stacked, so a
    fixed-size list becomes a fixed-shape sample. Anything else is left to the dataset's own
    checks (which refuse strings and objects)."""
    if not isinstance(value, np.ndarray) or value.dtype != object or len(value) == 0:
        return value
    return _stacked(value)


def _stacked(values: Any) -> Any:
    """The rows in values (an object array of per-row arrays, or an array already) as one
    array; rows of different shapes raise ValueError naming two of them."""
    if not isinstance(values, np.ndarray) or values.dtype != object or len(values) == 0:
        return values
    rows = [np.asarray(_nested(v)) for v in values]
    shapes = {row.shape for row in rows}
    if len(shapes) > 1:
        first, other = sorted(shapes)[:2]
        raise ValueError(f"rows of different shapes ({first} and {other}) cannot be stored "
                         "as fixed-shape samples")
    return np.stack(rows)



class _ColumnWriter:
    """Appends one column's values to shard folders of at most shard_records records each."""

    def __init__(self, column: str, prefix: str, ragged: bool, codec: Codec,
                 shard_records: int) -> None:
        self.column = column
        self.prefix = prefix
        self.ragged = ragged
        self.codec = codec
        self.shard_records = shard_records
        self.parts: list[Part] = []
        self.current: DenseDataset | RaggedDataset | None = None

    def _open_next(self, sample: Any) -> DenseDataset | RaggedDataset:
        self.close_current()
        folder = f"{self.prefix}-{len(self.parts):06d}"
        try:
            if self.ragged:
                first = np.asarray(sample)
                if first.ndim == 0:
                    raise ValueError("a ragged column needs records of at least one dimension")
                return RaggedDataset(folder, first.dtype, first.shape[1:], self.codec)
            return DenseDataset(folder, sample.dtype, sample.shape[1:], self.codec)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"column {self.column!r}: {exc}") from exc

    def add(self, values: Any) -> None:
        try:
            rows: Any = ([_nested(v) for v in values] if self.ragged
                         else np.ascontiguousarray(_stacked(values)))
        except ValueError as exc:
            hint = "" if self.ragged else f"; pass ragged=[{self.column!r}] to keep each length"
            raise ValueError(f"column {self.column!r}: {exc}{hint}") from exc
        offset = 0
        while offset < len(rows):
            if self.current is None or len(self.current) >= self.shard_records:
                self.current = self._open_next(rows[offset] if self.ragged else rows)
            take = rows[offset : offset + self.shard_records - len(self.current)]
            try:
                self.current.append(take)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"column {self.column!r}: {exc}") from exc
            offset += len(take)

    def close_current(self) -> None:
        if self.current is not None:
            self.parts.append((self.current.path, len(self.current)))
            self.current.close()
            self.current = None


# --- the Datasink -----------------------------------------------------------------------------


class LoaderxDatasink(Datasink[TaskParts]):
    """Writes chosen columns of a Ray dataset as loaderx datasets under one destination.

    See write_dataset for the arguments. The staging folder's name is fixed when the sink is
    made, so every write task, wherever it runs, stages into the same shared folder.
    """

    def __init__(self, path: PathArg, columns: Mapping[str, str] | Sequence[str],
                 codec: str = "zstd", ragged: Sequence[str] = (), append: Flag = False,
                 shard_records: int = SHARD_RECORDS_MAX) -> None:
        append = check_flag("append", append)
        self.path = os.path.abspath(fs_path(path))
        self.columns = _check_columns(columns)
        _refuse_hidden(self.columns)
        unknown = sorted(set(ragged) - set(self.columns))
        if unknown:
            raise ValueError(f"ragged names columns that are not written: {unknown}")
        if codec == "zstd_dict":
            raise ValueError("write_dataset cannot train a dictionary while streaming: write "
                             "with codec='zstd', then recode each column to 'zstd_dict'")
        self.codec = check_codec(codec)
        self.ragged = frozenset(ragged)
        self.append = append
        self.shard_records = check_shard_records(shard_records)
        if not append:
            _check_new_destination(self.path)
        parent, name = os.path.split(self.path)
        self.staging = os.path.join(parent, f".{name}.loaderx-ray-{uuid.uuid4().hex[:12]}")
        self.records = 0

    def on_write_start(self, schema: Any = None) -> None:
        os.makedirs(self.staging, exist_ok=True)

    def write(self, blocks: Iterable[Block], ctx: TaskContext) -> TaskParts:
        # A retried task writes under a fresh name; only the attempt that returns is committed.
        attempt = uuid.uuid4().hex[:8]
        writers = {
            column: _ColumnWriter(
                column,
                os.path.join(self.staging, folder, f"task-{ctx.task_idx:06d}-{attempt}"),
                column in self.ragged, self.codec, self.shard_records,
            )
            for column, folder in self.columns.items()
        }
        for folder in self.columns.values():
            os.makedirs(os.path.join(self.staging, folder), exist_ok=True)
        for block in blocks:
            accessor = BlockAccessor.for_block(block)
            if accessor.num_rows() == 0:
                continue
            batch = accessor.to_numpy(list(self.columns))
            assert isinstance(batch, dict)
            for column, writer in writers.items():
                writer.add(batch[column])
        for writer in writers.values():
            writer.close_current()
        return {"task": ctx.task_idx, "parts": {c: w.parts for c, w in writers.items()}}

    def on_write_complete(self, write_result: WriteResult[TaskParts]) -> None:
        try:
            returns = sorted(write_result.write_returns, key=lambda r: int(r["task"]))
            per_column = {c: [p for r in returns for p in r["parts"][c]] for c in self.columns}
            schemas = {c: _column_schema(c, parts, self.ragged) for c, parts in per_column.items()}
            if self.append:
                self._commit_append(per_column, schemas)
            else:
                self._commit_new(per_column, schemas)
            first = next(iter(per_column.values()))
            self.records = sum(count for _, count in first)
        finally:
            shutil.rmtree(self.staging, ignore_errors=True)

    def on_write_failed(self, error: Exception) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def _commit_new(self, per_column: dict[str, list[Part]], schemas: dict[str, Schema]) -> None:
        """Builds every column's dataset in staging, then moves the whole folder into place."""
        from loaderx._store.shard_commit import commit_shards

        built = os.path.join(self.staging, "result")
        for column, folder in self.columns.items():
            commit_shards(os.path.join(built, folder), [f for f, _ in per_column[column]],
                          schemas[column])
        _check_new_destination(self.path)  # again: it may have appeared meanwhile
        if os.path.isdir(self.path):
            os.rmdir(self.path)  # the empty folder that was there
        os.rename(built, self.path)

    def _commit_append(self, per_column: dict[str, list[Part]],
                       schemas: dict[str, Schema]) -> None:
        """Adds every column's shards in one commit that lands in all columns or in none
        (see "Appending to every column at once" below)."""
        if os.path.isdir(self.path):
            recover_appends(self.path)  # finish an append that a killed driver left halfway
        targets = {c: os.path.join(self.path, f) for c, f in self.columns.items()}
        fresh = not os.path.lexists(self.path) or (os.path.isdir(self.path)
                                                    and not os.listdir(self.path))
        if fresh:  # nothing to append to: create path with all its columns in one rename
            self._commit_new(per_column, schemas)
            return
        for column, target in targets.items():  # fail early, before any lock is taken
            if os.path.isfile(schema_path(target)):
                lines = differences(read_schema(target), schemas[column])
                if lines:
                    raise ValueError(f"cannot append column {column!r} to {target!r}: "
                                     + "; ".join(lines))
        refuse_some_new({folder: not os.path.isfile(schema_path(targets[column]))
                          for column, folder in self.columns.items()})
        append_all(self.path, self.staging,
                    [(folder, [f for f, _ in per_column[column]], schemas[column])
                     for column, folder in self.columns.items()])


def _check_new_destination(path: str) -> None:
    if os.path.lexists(path) and not (os.path.isdir(path) and not os.listdir(path)):
        raise FileExistsError(f"{path!r} already exists; write_dataset creates a new destination "
                              "(pass append=True to add shards to the datasets there)")


def _column_schema(column: str, parts: list[Part], ragged: frozenset[str]) -> Schema:
    if not parts:
        raise ValueError(f"the Ray dataset has no rows for column {column!r}: nothing to write")
    return common_schema(parts, lambda p: f"column {column!r}, part {p}")


def write_dataset(ds: ray.data.Dataset, path: PathArg,
                  columns: Mapping[str, str] | Sequence[str] | None = None, codec: str = "zstd",
                  ragged: Sequence[str] = (), append: Flag = False,
                  shard_records: int = SHARD_RECORDS_MAX) -> int:
    """Writes columns of ds as loaderx datasets under path; returns the records written per
    column (with append=True the rows added, not the new total, as from_numpy returns).

    columns: a list of column names (column c goes to path/c) or a {column: folder} mapping;
    None takes every column. Columns in `ragged` become RaggedDatasets (each row an array of
    its own length), the others DenseDatasets (each row one fixed-shape sample). Rows keep
    Ray's output order (set DataContext.execution_options.preserve_order for a deterministic
    one); every column gets the same rows in the same order. append=True adds shards to the
    existing datasets (in every column or, on a failure, in none) instead of creating path.
    """
    append = check_flag("append", append)  # before any work, as the converters check it
    check_codec(codec)
    chosen = columns if columns is not None else ds.columns()
    if chosen is None:  # Ray knows no schema for a dataset without rows
        raise ValueError("the Ray dataset has no rows (and so no columns): nothing to write")
    where = fs_path(path)
    if is_url(where):
        # Built on local disk, then each column uploaded to where/<column> (docs/remote.md).
        return write_columns_to_url(where, False, lambda local: write_dataset(
            ds, local, chosen, codec, ragged, False, shard_records), append=append)
    sink = LoaderxDatasink(path, chosen, codec, ragged, append, shard_records)
    ds.write_datasink(sink)
    # Ray calls on_write_complete on this very object, in this process, once all is committed.
    return sink.records


# --- reading ----------------------------------------------------------------------------------


def _find_columns(path: str, columns: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    """{column: dataset folder}: the named ones, every dataset under path, or path itself. A
    URL names one dataset, or its columns= name the datasets under it (an object store is
    not listed for them)."""
    if is_url(path):
        base = path.rstrip("/")
        if columns is not None:
            return {c: f"{base}/{f}" for c, f in _check_columns(columns).items()}
        return {base.rsplit("/", 1)[-1]: base}
    if columns is not None:
        return {c: os.path.join(path, f) for c, f in _check_columns(columns).items()}
    if os.path.isfile(schema_path(path)):
        return {os.path.basename(path.rstrip(os.sep)): path}
    found = _dataset_folders(path)
    if not found:
        raise FileNotFoundError(f"no loaderx dataset at {path!r} or in its subfolders")
    return found


def _dataset_folders(path: str) -> dict[str, str]:
    """{relative folder: folder} of every dataset under path, at any depth: write_dataset takes
    folders such as "parts/label", and a column there must not be dropped. Hidden names (the
    append journals, the staging folders) are skipped, and nothing inside a dataset is
    looked at."""
    found: dict[str, str] = {}
    for root, dirs, _ in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in list(dirs):
            folder = os.path.join(root, name)
            if os.path.isfile(schema_path(folder)):
                found[os.path.relpath(folder, path).replace(os.sep, "/")] = folder
                dirs.remove(name)  # a dataset's own folders are no columns
    return dict(sorted(found.items()))


def _open(folder: str) -> DenseDataset | RaggedDataset:
    """Read-only: a read needs no writer lock, and works on a read-only file system. A URL
    reads through the default cache (docs/remote.md)."""
    return open_dataset(folder, readonly=True)


def _native(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """array in native byte order (a converted copy if it is not): Ray's tensor columns ignore
    the byte order and would read '>f4' rows as little-endian garbage."""
    if array.dtype.isnative:
        return array
    return array.astype(array.dtype.newbyteorder("="))


def _column_block(ds: DenseDataset | RaggedDataset, start: int, stop: int) -> Any:
    values = ds[start:stop]
    if isinstance(values, list):  # ragged: an object array of per-row arrays
        column = np.empty(len(values), dtype=object)
        column[:] = [_native(row) for row in values]
        return column
    return _native(values)


# Records whose lengths estimate a ragged column's record size (read from the table only).
_SIZE_SAMPLE: Final = 1024


def _record_bytes(ds: DenseDataset | RaggedDataset, schema: Schema) -> int:
    """Bytes per record, for the read blocks' sizes and Ray's estimate: the schema's for a dense
    column; for a ragged one (whose schema gives one row of a record), the mean over an evenly
    spaced sample of the records' lengths, reading no record."""
    if not isinstance(ds, RaggedDataset) or len(ds) == 0:
        return schema.row_size
    sample = np.linspace(0, len(ds) - 1, num=min(len(ds), _SIZE_SAMPLE)).astype(np.int64)
    return max(1, int(np.ceil(float(ds.lengths(sample).mean()) * schema.row_size)))


class LoaderxDatasource(Datasource):
    """Reads loaderx datasets (one per column, all the same length) as a Ray dataset."""

    def __init__(self, path: PathArg,
                 columns: Mapping[str, str] | Sequence[str] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        where = fs_path(path)
        self.folders = _find_columns(where if is_url(where) else os.path.abspath(where), columns)
        lengths: dict[str, int] = {}
        self.row_bytes = 0
        for column, folder in self.folders.items():
            with _open(folder) as ds:
                lengths[column] = len(ds)
                self.row_bytes += _record_bytes(ds, ds.schema)
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the columns have different lengths: {lengths}")
        self.length = next(iter(lengths.values()))

    def estimate_inmemory_data_size(self) -> int | None:
        return self.length * self.row_bytes

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        tasks = []
        for start, stop in split_ranges(self.length, max(1, parallelism)):
            meta = BlockMetadata(num_rows=stop - start, size_bytes=(stop - start) * self.row_bytes,
                                 input_files=None, exec_stats=None)
            tasks.append(ReadTask(_RangeReader(self.folders, start, stop, self.row_bytes), meta,
                                  per_task_row_limit=per_task_row_limit))
        return tasks


class _RangeReader:
    """One read task: records [start, stop) of every column, in blocks of about 32 MiB."""

    def __init__(self, folders: dict[str, str], start: int, stop: int, row_bytes: int) -> None:
        self.folders = folders
        self.start = start
        self.stop = stop
        self.rows = max(1, CHUNK_BYTES_READ // max(1, row_bytes))

    def __call__(self) -> Iterator[Block]:
        opened = {c: _open(f) for c, f in self.folders.items()}
        try:
            for a in range(self.start, self.stop, self.rows):
                b = min(self.stop, a + self.rows)
                batch = {c: _column_block(ds, a, b) for c, ds in opened.items()}
                yield BlockAccessor.batch_to_block(batch)
        finally:
            for ds in opened.values():
                ds.close()


def read_dataset(path: PathArg,
                 columns: Mapping[str, str] | Sequence[str] | None = None,
                 override_num_blocks: int | None = None) -> ray.data.Dataset:
    """A ray.data.Dataset of loaderx datasets: path itself, or the column datasets under it.

    columns: a list of dataset folders under path (each becomes a column of that name) or a
    {column: folder} mapping; None takes every dataset folder under path, at any depth and
    named by its path relative to path ("parts/label"), or path itself, named after its folder. Dense columns are fixed-shape tensors, ragged ones
    variable-shaped; rows come in index order.
    """
    source = LoaderxDatasource(path, columns)
    result: ray.data.Dataset = ray.data.read_datasource(
        source, override_num_blocks=override_num_blocks
    )
    return result


__all__ = [
    "LoaderxDatasink",
    "LoaderxDatasource",
    "read_dataset",
    "recover_appends",
    "write_dataset",
]
