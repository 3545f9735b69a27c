"""What from_arrow reads: a Table, a RecordBatchReader, Parquet files or a datasets.Dataset, cut
into parts that each yield record batches of at most batch_rows rows.

Imported only by from_arrow once it is called: pyarrow is an optional extra, and `datasets` is
never imported (a datasets.Dataset is recognised by its type's module and read through its
Arrow table). Every part reads its rows a batch at a time (a Parquet part a row group at a
time), so memory stays bounded whatever the source's size. Parts pickle, so that a worker
process started with "spawn" can read its own share.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.dataset as pads  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from loaderx._data.parallel import split_ranges

_READ_BUFFER_BYTES: Final = 1 << 20
# A batch's decoded size when the caller names no row count: memory holds a few of them (the
# batch, its values as NumPy arrays, the records on their way to the store).
BATCH_BYTES: Final = 4 << 20
BATCH_ROWS_MAX: Final = 65536


class TablePart:
    """Rows [start, stop) of an in-memory (or memory-mapped) Table."""

    def __init__(self, table: Any, start: int, stop: int) -> None:
        self.table = table
        self.start = start
        self.stop = stop

    def batches(self, columns: Sequence[str], batch_rows: int | None) -> Iterator[Any]:
        rows = self.table.slice(self.start, self.stop - self.start).select(list(columns))
        chunk = batch_rows or rows_for(rows.nbytes, rows.num_rows)
        # Batches follow the table's chunks, so a chunked column is never concatenated.
        yield from rows.to_batches(max_chunksize=chunk)


class ReaderPart:
    """Every batch of a RecordBatchReader, in order: it can be read once, by this process."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.start = 0

    def batches(self, columns: Sequence[str], batch_rows: int | None) -> Iterator[Any]:
        for batch in self.reader:
            chosen = batch.select(list(columns))
            rows = batch_rows or rows_for(chosen.nbytes, chosen.num_rows)
            for start in range(0, chosen.num_rows, rows):
                yield chosen.slice(start, rows)


class ParquetPart:
    """Whole row groups of Parquet files, in order: [(file, [row group, ...]), ...]."""

    def __init__(self, groups: list[tuple[str, list[int]]], start: int,
                 column_bytes: dict[str, int], rows: int) -> None:
        self.groups = groups
        self.start = start
        self.column_bytes = column_bytes  # decoded, over all files (from their metadata)
        self.rows = rows  # over all files

    def batches(self, columns: Sequence[str], batch_rows: int | None) -> Iterator[Any]:
        if batch_rows is None:
            batch_rows = rows_for(sum(self.column_bytes.get(c, 0) for c in columns), self.rows)
        for path, row_groups in self.groups:
            # Column chunks are read a buffer at a time, not whole: a row group of 64 MiB then
            # costs its decoded batch, not also its compressed bytes.
            with _reading(path):
                parquet = pq.ParquetFile(path, buffer_size=_READ_BUFFER_BYTES, pre_buffer=False)
            with parquet:
                batches = parquet.iter_batches(batch_size=batch_rows, row_groups=row_groups,
                                               columns=list(columns), use_threads=False)
                while True:
                    with _reading(path):
                        batch = next(batches, None)
                    if batch is None:
                        break
                    yield batch


Part = TablePart | ReaderPart | ParquetPart


def rows_for(size: int, rows: int) -> int:
    """Rows of about BATCH_BYTES, for rows that take size bytes in all."""
    per_row = max(1, -(-size // max(1, rows)))
    return max(1, min(BATCH_ROWS_MAX, BATCH_BYTES // per_row))


class OpenedSource:
    """A source's schema, its row count (None for a reader: unknown until read) and its parts."""

    def __init__(self, schema: Any, rows: int | None, parts: list[Part]) -> None:
        self.schema = schema
        self.rows = rows
        self.parts = parts


# --- tables -----------------------------------------------------------------------------------


def _table_parts(table: Any, workers: int) -> OpenedSource:
    ranges = split_ranges(table.num_rows, workers) or [(0, 0)]
    return OpenedSource(table.schema, table.num_rows,
                        [TablePart(table, a, b) for a, b in ranges])


def _hugging_face_table(dataset: Any) -> Any:
    """The Arrow table under a datasets.Dataset, in the dataset's row order."""
    if getattr(dataset, "_indices", None) is not None:
        raise ValueError(
            "the datasets.Dataset reads its rows through an indices mapping (after shuffle, "
            "select, sort or filter), so its Arrow table holds them in another order: call "
            "dataset.flatten_indices() first"
        )
    return dataset.data.table


def _is_hugging_face(source: object) -> bool:
    """Whether source is a datasets.Dataset: of that package, with an Arrow table under it (a
    DatasetDict has a dict of them as its data, and gets from_arrow's TypeError)."""
    module = type(source).__module__
    return module.startswith("datasets.") and \
        isinstance(getattr(getattr(source, "data", None), "table", None), pa.Table)


# --- Parquet ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _reading(path: str) -> Iterator[None]:
    """Names path in what reading it raises: pyarrow's messages for a broken file ("Parquet
    magic bytes not found in footer", "Corrupt snappy compressed data") name none, and a folder
    holds many. The exception keeps its class (and errno)."""
    try:
        yield
    except (pa.ArrowException, OSError) as exc:
        message = f"Parquet file {path!r} cannot be read: {exc}"
        if isinstance(exc, OSError) and exc.errno is not None:
            raise type(exc)(exc.errno, message) from exc
        raise type(exc)(message) from exc


def _parquet_files(path: str) -> list[str]:
    """The Parquet files at path (a file, or a folder searched as pyarrow.dataset does, hidden
    and '_'-prefixed files skipped), in sorted order."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path!r}: no such file or folder")
    files = sorted(pads.dataset(path, format="parquet").files)
    if not files:
        raise ValueError(f"no Parquet files in {path!r}")
    return files


def _same_schema(files: list[str], schemas: list[Any]) -> None:
    for path, schema in zip(files[1:], schemas[1:]):
        if not schema.equals(schemas[0]):
            raise ValueError(f"{path!r} has another schema than {files[0]!r}: every Parquet "
                             f"file of a folder must have the same columns and types "
                             f"({schema} against {schemas[0]})")


def _leaf_bytes(arrow_type: Any) -> int | None:
    """Bytes of one leaf value of a column of arrow_type (lists looked through), if fixed."""
    while pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or \
            pa.types.is_fixed_size_list(arrow_type):
        arrow_type = arrow_type.value_type
    try:
        return max(1, int(arrow_type.bit_width) // 8)
    except ValueError:  # binary and strings have no fixed width
        return None


def _add_column_bytes(meta: Any, schema: Any, column_bytes: dict[str, int]) -> None:
    """Adds each top-level column's decoded bytes in a file's row groups to column_bytes (a
    list's leaf is named 'tokens.list.element': its first part is the column). A leaf of fixed
    width counts its values times its width: the metadata's sizes are of the encoded pages,
    which dictionary and run-length encoding make far smaller than the arrays they decode to."""
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            name = chunk.path_in_schema.split(".")[0]
            width = _leaf_bytes(schema.field(name).type) if name in schema.names else None
            size = chunk.num_values * width if width else chunk.total_uncompressed_size
            column_bytes[name] = column_bytes.get(name, 0) + int(size)


def _parquet_parts(path: str, workers: int) -> OpenedSource:
    """Parts of about equal rows, each whole row groups (a worker reads only its own)."""
    files = _parquet_files(path)
    units: list[tuple[str, int, int]] = []  # (file, row group, rows)
    schemas = []
    column_bytes: dict[str, int] = {}
    for file in files:
        with _reading(file):
            parquet = pq.ParquetFile(file)
        with parquet:
            schemas.append(parquet.schema_arrow)
            meta = parquet.metadata
            units += [(file, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
            _add_column_bytes(meta, parquet.schema_arrow, column_bytes)
    _same_schema(files, schemas)
    total = sum(rows for _, _, rows in units)
    parts: list[Part] = []
    seen = 0
    owner = -1
    for file, group, rows in units:
        wanted = min(workers - 1, seen * workers // total) if total else 0
        if wanted != owner or not parts:
            parts.append(ParquetPart([], seen, column_bytes, total))
            owner = wanted
        part = parts[-1]
        assert isinstance(part, ParquetPart)
        if not part.groups or part.groups[-1][0] != file:
            part.groups.append((file, []))
        part.groups[-1][1].append(group)
        seen += rows
    return OpenedSource(schemas[0], total, parts or [ParquetPart([], 0, column_bytes, total)])


# --- any source -------------------------------------------------------------------------------


def open_source(source: object, workers: int) -> OpenedSource:
    """The source cut into at most `workers` parts; TypeError for what from_arrow cannot read."""
    if isinstance(source, pa.Table):
        return _table_parts(source, workers)
    if isinstance(source, pa.RecordBatch):
        return _table_parts(pa.Table.from_batches([source]), workers)
    if isinstance(source, pa.RecordBatchReader):
        if workers > 1:
            raise ValueError("a RecordBatchReader can be read once, in order, by one process: "
                             "convert it with workers=1, or pass a Table or a Parquet path")
        return OpenedSource(source.schema, None, [ReaderPart(source)])
    if isinstance(source, (str, os.PathLike)):
        return _parquet_parts(os.fspath(source), workers)
    if _is_hugging_face(source):
        return _table_parts(_hugging_face_table(source), workers)
    raise TypeError(
        "from_arrow reads a pyarrow.Table, RecordBatch or RecordBatchReader, the path of a "
        "Parquet file or folder, or a datasets.Dataset (pick a split of a DatasetDict; an "
        f"IterableDataset is not Arrow-backed), got {type(source).__name__}"
    )


__all__ = ["BATCH_BYTES", "BATCH_ROWS_MAX", "OpenedSource", "ParquetPart", "Part", "ReaderPart",
           "TablePart", "open_source", "rows_for"]
