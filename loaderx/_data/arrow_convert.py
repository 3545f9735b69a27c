"""from_arrow: Arrow tables, Parquet files and Hugging Face datasets into one dataset per column.

The columns land under one folder, path/<column>, as `loaderx convert x.npz out` and the Ray
sink lay them out. The source is read once, a record batch at a time, and every chosen column
is written from the same batch, so memory stays bounded by a batch (a Parquet row group) per
process whatever the source's size. pyarrow is imported only once from_arrow is called (the
arrow_* modules), so the core imports without it.

In one process every column is written into its own staging folder (loaderx._data.destination)
and all of them are moved into place only once every column is complete: a refused or failed
conversion leaves every destination as it was. With workers=N each worker process reads its
contiguous share of the rows and writes each column's part folders; the parts are published as
the shards of each column's dataset (loaderx._data.parallel_parts), as from_numpy's are.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np

from loaderx._data.arrow_limits import check_rows, stream_limit, worker_ranges
from loaderx._data.destination import (
    check_destination,
    commit_conversion,
    stage_conversion,
)
from loaderx._data.parallel_parts import Part, common_schema, make_staging, part_folder
from loaderx._data.progress import Progress, ProgressOption, check_progress
from loaderx._data.remote_write import write_columns_to_url
from loaderx._os.urls import is_url
from loaderx._os import claims
from loaderx._os.folder_swap import StagedFolder
from loaderx._os.paths import PathArg, fs_path
from loaderx._os.process_pool import JobRefused, check_workers, run_workers
from loaderx._store.layout import SHARD_RECORDS_MAX
from loaderx._store.choices import START_METHODS, check_optional_choice
from loaderx._store.flags import Flag, check_flag
from loaderx._store.schema import Codec, check_codec, make_schema
from loaderx._store.shard_commit import commit_shards
from loaderx._store.sharded_store import check_shard_records
from loaderx._store.zrecord import Zrecord
from loaderx.errors import UnsupportedURLError

# Records copied at a time when a bytes column's parts are joined into one Zrecord.
_COPY_RECORDS: Final = 4096

Columns = Sequence[str] | Mapping[str, str] | None


# --- arguments --------------------------------------------------------------------------------


def _plain_folder(name: str) -> bool:
    """Whether name stays one entry inside the folder it is joined onto (and is not hidden:
    hidden names are the converters' staging folders)."""
    return (name not in ("", os.curdir, os.pardir) and "\0" not in name and os.sep not in name
            and (os.altsep is None or os.altsep not in name) and not name.startswith("."))


def choose_columns(names: Sequence[str], columns: Columns) -> dict[str, str]:
    """{column: folder under path}: every column, the listed ones, or a {column: folder} map."""
    if isinstance(columns, str):
        raise TypeError("columns must be a list of column names or a {column: folder} mapping")
    if columns is None:
        chosen = {name: name for name in names}
    elif isinstance(columns, Mapping):
        chosen = dict(columns)
    else:
        chosen = {name: name for name in columns}
    if not chosen:
        raise ValueError("no columns to convert: the source has none, or columns is empty")
    missing = [name for name in chosen if name not in names]
    if missing:
        raise ValueError(f"columns {missing} are not in the source (it has {list(names)})")
    # Arrow allows two columns of one name; a column is found by its name, which then names
    # neither of them.
    counts = Counter(names)
    for name in chosen:
        if counts[name] > 1:
            raise ValueError(f"the source has {counts[name]} columns named {name!r}, so that "
                             "name picks none of them: rename them first "
                             "(Table.rename_columns), or leave them out with columns=")
    writer_of: dict[str, str] = {}
    for column, folder in chosen.items():
        if not _plain_folder(folder):
            raise ValueError(f"column {column!r} would be written to folder {folder!r}, which is "
                             "not a plain visible folder name: pass columns={column: folder}")
        # Refused here, not found out when the second column is moved into place, by then
        # after the first one was.
        if folder in writer_of:
            raise ValueError(f"columns {writer_of[folder]!r} and {column!r} would both be "
                             f"written to folder {folder!r}: give each column its own folder")
        writer_of[folder] = column
    return chosen


def _check_codec(codec: Codec) -> Codec:
    if codec == "zstd_dict":
        raise ValueError("from_arrow cannot write 'zstd_dict': a dictionary must be trained on "
                         "the complete data. Convert with codec='zstd' first, then "
                         "recode(src, dst, codec='zstd_dict') for each column")
    return check_codec(codec)


def _check_batch_rows(batch_rows: int | None) -> int | None:
    if batch_rows is None:
        return None
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, (int, np.integer)):
        raise TypeError(f"batch_rows must be an int, got {batch_rows!r}")
    if batch_rows <= 0:
        raise ValueError(f"batch_rows must be positive, got {batch_rows}")
    return int(batch_rows)


def _check_plans(plans: list[Any], codec: Codec) -> None:
    """Every column's schema made once, so a refusal (an item shape a dataset cannot hold)
    comes before anything is written, naming the column."""
    for plan in plans:
        if plan.kind == "bytes":
            continue
        try:
            make_schema(plan.kind, plan.dtype, plan.item_shape, codec, "balanced")
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"column {plan.name!r}: {exc}") from exc


# --- one process ------------------------------------------------------------------------------


@contextlib.contextmanager
def _moved_together() -> Iterator[list[tuple[StagedFolder, bool]]]:
    """A list the block fills with each column's staging folder (and whether it replaces an old
    store). When the block ends, every one is moved into place; when it raises, or a move does,
    every one is aborted and the error goes on."""
    staged: list[tuple[StagedFolder, bool]] = []
    try:
        yield staged
        for staging, replace in staged:
            commit_conversion(staging, replace)
    except BaseException:
        for staging, _ in staged:
            staging.abort()
        raise


def _convert_here(path: str, opened: Any, plans: list[Any], codec: Codec, overwrite: bool,
                  batch_rows: int | None, progress: ProgressOption) -> int:
    """Every column into its own staging folder, all moved into place once all are written."""
    from loaderx._data.arrow_writer import ColumnWriter

    with _moved_together() as staged:
        for plan in plans:
            staged.append(stage_conversion(os.path.join(path, plan.folder), overwrite))
        writers = [ColumnWriter(plan, codec, lambda _piece, s=s: s.path, None)
                   for plan, (s, _) in zip(plans, staged)]
        rows = _write_part(opened.parts[0], plans, writers, batch_rows,
                           Progress(f"converting to {path}", opened.rows, progress),
                           stream_limit(plans))
    return rows


def _write_part(part: Any, plans: list[Any], writers: list[Any], batch_rows: int | None,
                report: Progress, limit: tuple[int, str] | None = None) -> int:
    """Every batch of one part into the columns' writers; the rows written. limit: the most
    rows the part may hold and the ValueError's message for a batch that passes them, refused
    before any of it is written (a source whose length is known was checked up front)."""
    row = part.start
    with report:
        try:
            for writer in writers:
                writer.open()
            for batch in part.batches([plan.name for plan in plans], batch_rows):
                if limit is not None and row - part.start + batch.num_rows > limit[0]:
                    raise ValueError(limit[1])
                for position, writer in enumerate(writers):
                    writer.add(batch.column(position), row)
                row += batch.num_rows
                report.update(batch.num_rows, batch.nbytes)
            report.finish()
        finally:
            for writer in writers:
                writer.close()
    written: int = row - part.start
    return written


# --- several processes ------------------------------------------------------------------------


class _ArrowJob:
    """One worker's share: its part of the source, every column into its part folders."""

    def __init__(self, index: int, part: Any, plans: list[Any], stagings: list[str],
                 codec: Codec, batch_rows: int | None, shard_records: int) -> None:
        self.index = index
        self.part = part
        self.plans = plans
        self.stagings = stagings
        self.codec = codec
        self.batch_rows = batch_rows
        self.shard_records = shard_records

    def __call__(self) -> list[list[Part]]:
        from loaderx._data.arrow_writer import ColumnWriter

        writers = [ColumnWriter(plan, self.codec,
                                lambda piece, s=staging: part_folder(s, self.index, piece),
                                self.shard_records)
                   for plan, staging in zip(self.plans, self.stagings)]
        try:
            _write_part(self.part, self.plans, writers, self.batch_rows,
                        Progress("", None, False))
        except ValueError as exc:
            # The source's own refusal (a null, a record too large): the caller gets the
            # ValueError it would get from one process, not a worker failure.
            raise JobRefused(str(exc)) from exc
        return [writer.parts for writer in writers]


def _join_bytes(parts: list[Part], folder: str, codec: Codec) -> int:
    """A bytes column's parts copied in order into one bare Zrecord at folder (a Zrecord has no
    shards to publish them as)."""
    with Zrecord(folder, create=True, codec=codec) as joined:
        for part, count in parts:
            with Zrecord(part, readonly=True) as store:
                for start in range(0, count, _COPY_RECORDS):
                    joined.append(store.gather(slice(start, min(count, start + _COPY_RECORDS))))
        return len(joined)


def _stage_column(final: str, plan: Any, parts: list[Part], codec: Codec,
                  overwrite: bool) -> tuple[StagedFolder, bool]:
    """A column's complete dataset built from its parts in a staging folder for final, not yet
    in place (with whether an old store is replaced on commit)."""
    staging, replace = stage_conversion(final, overwrite)
    try:
        if plan.kind == "bytes":
            _join_bytes(parts, staging.path, codec)
        else:
            schema = common_schema(parts, lambda p: f"part {p}")
            commit_shards(staging.path, [folder for folder, _ in parts], schema)
    except BaseException:
        staging.abort()
        raise
    return staging, replace


def _convert_in_workers(path: str, opened: Any, plans: list[Any], codec: Codec,
                        overwrite: bool, batch_rows: int | None, workers: int, shard_records: int,
                        start_method: str | None) -> int:
    finals = [os.path.abspath(os.path.join(path, plan.folder)) for plan in plans]
    stagings: list[str] = []
    try:
        with _moved_together() as staged:
            for final in finals:
                os.makedirs(os.path.dirname(final), exist_ok=True)
                stagings.append(make_staging(final))
            jobs = [_ArrowJob(i, part, plans, stagings, codec, batch_rows, shard_records)
                    for i, part in enumerate(opened.parts)]
            results = run_workers(jobs, workers, start_method,
                                  lambda i: f"rows from {opened.parts[i].start}")
            # Every column complete (a bytes column's parts copied into one Zrecord, which can
            # run out of disk) before the first is moved into place, as in one process.
            for column, (plan, final) in enumerate(zip(plans, finals)):
                parts = [part for written in results for part in written[column]]
                staged.append(_stage_column(final, plan, parts, codec, overwrite))
    finally:
        for staging_folder in stagings:
            claims.discard(staging_folder)
    return sum(count for written in results for _, count in written[0])


# --- the converter ----------------------------------------------------------------------------


def arrow_to_datasets(
    source: object, path: PathArg, columns: Columns = None, codec: Codec = "zstd",
    overwrite: Flag = False, progress: ProgressOption = None, workers: int = 1,
    batch_rows: int | None = None, shard_records: int = SHARD_RECORDS_MAX,
    start_method: str | None = None,
) -> tuple[int, dict[str, str]]:
    """from_arrow, returning the rows written and {column: its dataset's folder}."""
    overwrite = check_flag("overwrite", overwrite)
    try:
        from loaderx._data.arrow_columns import plan_column
        from loaderx._data.arrow_source import open_source
    except ImportError as exc:
        raise ImportError(f"from_arrow needs pyarrow: pip install 'loaderx[arrow]' ({exc})") \
            from exc
    folder = fs_path(path)
    progress = check_progress(progress)
    codec = _check_codec(codec)
    count_workers = check_workers(workers)
    rows_per_batch = _check_batch_rows(batch_rows)
    per_shard = check_shard_records(shard_records)
    # Checked also where no worker process starts, as the loaders check it.
    start_method = check_optional_choice("start_method", start_method, START_METHODS)
    opened = open_source(source, count_workers)
    chosen = choose_columns(opened.schema.names, columns)
    plans = [plan_column(name, sub, opened.schema.field(name).type)
             for name, sub in chosen.items()]
    _check_plans(plans, codec)
    # Before any byte is written, as _convert chooses its way: a store's limit of records for
    # a bytes column, a dataset's of shards for the others.
    parallel = count_workers > 1 and len(opened.parts) > 1
    check_rows(folder, plans, opened.rows,
               worker_ranges([part.start for part in opened.parts], opened.rows)
               if parallel and opened.rows is not None else None, per_shard)
    if is_url(folder):
        # Built on local disk, then each column uploaded to folder/<column> (docs/remote.md):
        # a URL handed here (the CLI's Parquet conversion) must never become a local folder.
        _refuse_bare_stores(folder, plans)
        rows = write_columns_to_url(folder, overwrite, lambda local: _convert(
            local, opened, plans, codec, False, rows_per_batch, progress, count_workers,
            per_shard, start_method))
        return rows, {plan.name: f"{folder.rstrip('/')}/{plan.folder}" for plan in plans}
    for plan in plans:  # every destination checked before the first byte is written
        check_destination(os.path.join(folder, plan.folder), overwrite)
    rows = _convert(folder, opened, plans, codec, overwrite, rows_per_batch, progress,
                    count_workers, per_shard, start_method)
    return rows, {plan.name: os.path.join(folder, plan.folder) for plan in plans}


def _refuse_bare_stores(url: str, plans: list[Any]) -> None:
    """UnsupportedURLError for binary and string columns bound for a URL, before anything is
    built or sent: each becomes a bare Zrecord, which has no schema, so neither the upload
    (which publishes datasets) nor any reader at a URL (Zrecord takes local folders only) could
    use it."""
    bare = [plan.name for plan in plans if plan.kind == "bytes"]
    if bare:
        raise UnsupportedURLError(
            f"{url}: columns {bare} are binary or string columns, which become bare Zrecord "
            "stores, and a bare Zrecord cannot be stored at a URL (it has no schema, and "
            "Zrecord opens local folders only); leave them out with columns=, or convert them "
            "to a local folder"
        )


def _convert(folder: str, opened: Any, plans: list[Any], codec: Codec, overwrite: bool,
             rows_per_batch: int | None, progress: ProgressOption, count_workers: int,
             per_shard: int, start_method: str | None) -> int:
    """Every planned column written under the local folder; the rows written."""
    created = not os.path.lexists(folder)
    try:
        if len(opened.parts) == 1 or count_workers == 1:  # as arrow_to_datasets checks
            return _convert_here(folder, opened, plans, codec, overwrite, rows_per_batch,
                                 progress)
        return _convert_in_workers(folder, opened, plans, codec, overwrite, rows_per_batch,
                                   count_workers, per_shard, start_method)
    except BaseException:
        # A null met halfway (or any failure) leaves no trace: not even the folder we made.
        if created:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise


def from_arrow(
    source: object, path: PathArg, columns: Columns = None, codec: Codec = "zstd",
    overwrite: Flag = False, progress: ProgressOption = None, workers: int = 1,
    batch_rows: int | None = None, shard_records: int = SHARD_RECORDS_MAX,
    start_method: str | None = None,
) -> int:
    """Writes each column of an Arrow source as its own dataset, path/<column>; returns the
    number of rows written.

    source: a pyarrow.Table (chunked columns welcome), RecordBatch or RecordBatchReader; the
    path of a Parquet file or of a folder of Parquet files (read in sorted path order, a row
    group at a time); or a Hugging Face datasets.Dataset (read through its Arrow table).
    columns: None for every column, a list of names, or a {column: folder} mapping.

    Numbers (bool, integers, floats) and fixed_size_lists of them become DenseDatasets;
    list / large_list columns of those RaggedDatasets (an empty list is an empty record);
    binary and string columns bare Zrecord stores, one record per value (strings as UTF-8
    bytes; refused with UnsupportedURLError when path is a URL, where no reader opens a bare
    Zrecord). Other types (structs, dictionaries, dates, decimals) are refused (TypeError)
    before anything is written, saying how to prepare them; a null is refused (ValueError)
    naming its column and row, and leaves every destination as it was.

    codec, overwrite and progress work as in from_iterator ("zstd_dict" is refused: recode
    afterwards). The source is read batch_rows rows at a time (None: rows of about 4 MiB, from
    the source's sizes), so memory stays bounded whatever its size. workers=N > 1 splits a Table,
    Parquet source or datasets.Dataset into N contiguous shares converted by N processes, each
    column's shares becoming the shards (of at most shard_records records) of its dataset; a
    RecordBatchReader is read by this process only. Every column is moved into place only
    when every column has been written.

    More rows than a column's store holds (2^24 for a bytes column's one Zrecord; a dataset's
    2^20 shards for the others, of at most shard_records each with workers) are refused with
    ValueError before anything is written when the row count is known (all sources but a
    RecordBatchReader), and a reader at the batch holding the first row past the limit, before
    that batch is written.
    """
    rows, _ = arrow_to_datasets(source, path, columns, codec, overwrite, progress, workers,
                                batch_rows, shard_records, start_method)
    return rows


__all__ = ["arrow_to_datasets", "choose_columns", "from_arrow"]
