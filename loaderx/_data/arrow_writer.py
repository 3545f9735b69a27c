"""One Arrow column written into loaderx folders: a DenseDataset, a RaggedDataset or a Zrecord.

Imported only by from_arrow once it is called (pyarrow is an optional extra). In one process a
column goes into one folder (a dataset shards itself when full); a worker of a parallel
conversion starts a new part folder every records_max records, as from_iterator's workers do,
and the parts are published as the shards of the column's dataset afterwards.
"""

from __future__ import annotations

from typing import Any

from loaderx._data.arrow_columns import (
    BYTES,
    DENSE,
    ColumnPlan,
    byte_records,
    dense_block,
    ragged_records,
)
from loaderx._data.dense import DenseDataset
from loaderx._data.parallel_parts import Part
from loaderx._data.ragged import RaggedDataset
from loaderx._store.schema import Codec
from loaderx._store.zrecord import Zrecord

Store = DenseDataset | RaggedDataset | Zrecord


def open_store(plan: ColumnPlan, folder: str, codec: Codec) -> Store:
    """A new, empty store at folder for plan's column."""
    if plan.kind == BYTES:
        return Zrecord(folder, create=True, codec=codec)
    if plan.kind == DENSE:
        return DenseDataset(folder, plan.dtype, plan.item_shape, codec)
    return RaggedDataset(folder, plan.dtype, plan.item_shape, codec)


def column_records(plan: ColumnPlan, array: Any, row0: int) -> Any:
    """One chunk of the column, as its store appends it (row0: the chunk's first row)."""
    if plan.kind == BYTES:
        return byte_records(plan, array, row0)
    if plan.kind == DENSE:
        return dense_block(plan, array, row0)
    return ragged_records(plan, array, row0)


class ColumnWriter:
    """Appends one column's chunks to its folder, or to part folders of records_max records."""

    def __init__(self, plan: ColumnPlan, codec: Codec, folder_of: Any,
                 records_max: int | None) -> None:
        """folder_of(piece) names the folder of each part; records_max None: one folder."""
        self.plan = plan
        self.codec = codec
        self.folder_of = folder_of
        self.records_max = records_max
        self.parts: list[Part] = []
        self.current: Store | None = None

    def _room(self) -> int:
        assert self.current is not None
        if self.records_max is None:
            return 1 << 62
        return self.records_max - len(self.current)

    def _next(self) -> Store:
        self.close()
        self.current = open_store(self.plan, self.folder_of(len(self.parts)), self.codec)
        return self.current

    def open(self) -> None:
        """Creates the first (maybe only) folder, so that a column with no rows has one too."""
        self._next()

    def add(self, array: Any, row0: int) -> None:
        records = column_records(self.plan, array, row0)
        offset = 0
        while offset < len(records):
            store = self.current if self.current is not None and self._room() > 0 else self._next()
            take = records[offset : offset + self._room()]
            try:
                store.append(take)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"column {self.plan.name!r}, rows {row0 + offset} to "
                                f"{row0 + offset + len(take) - 1}: {exc}") from exc
            offset += len(take)

    def close(self) -> None:
        """Closes the folder being written; it becomes the last of self.parts."""
        if self.current is not None:
            self.parts.append((self.current.path, len(self.current)))
            self.current.close()
            self.current = None


__all__ = ["ColumnWriter", "column_records", "open_store"]
