"""How many rows from_arrow may convert, checked before any byte is written.

A binary or string column becomes one bare Zrecord, which holds at most a store's limit of
records whatever the workers; a dense or ragged column becomes a dataset, which holds at most
its limit of shards (in one process of a store's limit each, with workers of at most
shard_records each). Where the source's row count is known (a Table, a Parquet source's
metadata, a datasets.Dataset) the conversion is refused up front, with the message the other
conversions give; where it is not (a RecordBatchReader, read by one process only) the batch
holding the first row past the limit is refused before any of it is written.

The limits are read from loaderx._store.layout at each call, not imported once, so that they
are always the store's own (tests lower them to keep their sources small).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loaderx._data.serial import check_record_count
from loaderx._data.shard_budget import check_shard_count
from loaderx._store import layout

# arrow_columns.BYTES, not imported from there: that module needs pyarrow.
_BYTES = "bytes"


def _bytes_refusal(columns: list[str], rows: str) -> str:
    limit = layout.SHARD_RECORDS_MAX
    return (f"{rows} exceed the limit of {limit} records of a bare Zrecord store, which binary "
            f"and string columns {columns} become; leave them out with columns=, or convert at "
            f"most {limit} rows at a time, each share to its own folder")


def check_rows(final: str, plans: Sequence[Any], rows: int | None,
               ranges: list[tuple[int, int]] | None, shard_records: int) -> None:
    """Before any byte is written: ValueError when rows (None: not known before reading) are
    more than the planned columns' stores hold. ranges: each worker's rows, None in one
    process."""
    if rows is None:
        return
    bare = [plan.name for plan in plans if plan.kind == _BYTES]
    if bare and rows > layout.SHARD_RECORDS_MAX:
        raise ValueError(_bytes_refusal(bare, f"{rows} rows"))
    if len(bare) == len(plans):
        return
    if ranges is None:
        check_record_count(rows)
    else:
        check_shard_count(final, ranges, shard_records, False)


def stream_limit(plans: Sequence[Any]) -> tuple[int, str]:
    """The most rows a source of unknown length may bring to one process, and the ValueError's
    message for the first row past them."""
    bare = [plan.name for plan in plans if plan.kind == _BYTES]
    if bare:
        return layout.SHARD_RECORDS_MAX, _bytes_refusal(bare, "the source's rows")
    return layout.RECORD_COUNT_MAX, ("the source's records exceed a dataset's limit of "
                                     f"{layout.RECORD_COUNT_MAX} (2^20 shards)")


def worker_ranges(starts: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """Each part's rows [start, stop), from the parts' first rows and the source's row count."""
    stops = list(starts[1:]) + [rows]
    return list(zip(starts, stops))


__all__ = ["check_rows", "stream_limit", "worker_ranges"]
