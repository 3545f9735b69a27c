"""RaggedDataset and pad: records of shape (L, *item_shape), each with its own L.

A ragged dataset reads its records into a list of arrays, views into the one buffer a single
gather filled; pad turns such a list into one dense array plus the lengths.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.dataset_base import DatasetBase, check_array
from loaderx._data.dataset_folder import Store
from loaderx._native.calls import PACKED_DECLINED, NativeCalls, gather_packed, mypyc_attr
from loaderx._store.indexing import normalize_index, normalize_selection
from loaderx._store.schema import RECORD_SIZE_MAX
from loaderx._store.sharded_store import ShardedStore
from loaderx.errors import CorruptStoreError, StoreFullError


def _gather_packed(
    store: Store, indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
    offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None,
) -> int:
    """The packed fast path (loaderx._native.calls.gather_packed) on the store's native handle,
    or on its view for a sharded store: 1 copied, 0 out too small, PACKED_DECLINED sends the
    caller to the store's own method (as dense.py's _gather_fixed does for fixed-size reads)."""
    if isinstance(store, NativeCalls):
        return gather_packed(store, indices, row_size, out, offsets, rows)
    view = store.view
    if view is None:
        return PACKED_DECLINED
    try:
        return gather_packed(view, indices, row_size, out, offsets, rows)
    except ValueError:
        if view.closed:
            return PACKED_DECLINED  # a rollover or delete replaced it: the store reads the new one
        raise


# Iterating over a dataset reads this many records per gather (their lengths are not known
# before: a fixed count, small enough for long records).
_ITERATION_BLOCK_RECORDS: Final = 64


# Subclassed by users (dataset_base.py says why this is allowed).
@mypyc_attr(allow_interpreted_subclasses=True)
class RaggedDataset(DatasetBase):
    """A dataset of variable-length records: record i has shape (L_i, *item_shape).

    Construction works as for DenseDataset. Reads return a list of arrays (one array for an
    int); append takes a sequence of arrays whose trailing dimensions equal item_shape.
    """

    _row_size: int

    def _kind(self) -> str:
        return "ragged"

    def _take_record_layout(self) -> None:
        self._row_size = self._schema.row_size

    @property
    def row_size(self) -> int:
        """The bytes of one row of a record (its trailing dimensions times the dtype's size)."""
        return self._row_size

    def __getitem__(self, index: object) -> Any:
        return self.read(index)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> Any:
        """Refused: the records differ in length (module doc). Without it the compiled class
        gave NumPy an object it wrapped in a 0-d array."""
        raise TypeError(
            "a RaggedDataset's records differ in length, so they make no single array: read "
            "them as a list (ds[:]), packed (gather_packed), or padded by a DataLoader "
            "(ragged=Padding(length))"
        )

    def _records_per_block(self) -> int:
        return _ITERATION_BLOCK_RECORDS

    def read(self, index: object) -> Any:
        """One array for an int index, else a list of arrays in index order.

        The records of one read are views into a single buffer filled by one gather.
        """
        indices, selection = normalize_selection(index, len(self._store))
        if len(selection) > 1:
            raise IndexError(
                f"a ragged dataset takes one-dimensional selections; this index has shape "
                f"{selection} (flatten it, or read its rows one at a time)"
            )
        records = self._read(indices)
        if not selection:
            return records[0]
        return records

    def _read(self, indices: npt.NDArray[np.int64]) -> list[npt.NDArray[Any]]:
        if len(indices) == 0:
            return []
        remote = self._remote
        if remote is not None:
            with remote.reading(indices):
                data, offsets = self._store.gather_ragged(indices)
        else:
            data, offsets = self._store.gather_ragged(indices)
        bounds: list[int] = offsets.tolist()
        row = self._row_size
        shape = (-1, *self._item_shape)
        records: list[npt.NDArray[Any]] = []
        for i in range(len(bounds) - 1):
            start = bounds[i]
            stop = bounds[i + 1]
            if (stop - start) % row:
                raise CorruptStoreError(
                    f"record {int(indices[i])} of {self._path!r} has {stop - start} bytes, not a "
                    f"whole number of {row}-byte rows of the schema"
                )
            records.append(data[start:stop].view(self._dtype).reshape(shape))
        return records

    def lengths(self, index: object) -> npt.NDArray[np.int64]:
        """The number of rows (L) of each selected record, without reading the records."""
        indices = normalize_index(index, len(self._store))
        if len(indices) == 0:
            return np.empty(0, dtype=np.int64)
        sizes = self._store.record_lengths(indices)
        return (sizes // np.uint64(self._row_size)).astype(np.int64)

    def gather_packed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None = None,
    ) -> bool:
        """The records of indices back to back in out, sized and copied in one native call:
        offsets and rows as record_offsets gives them. False, with nothing copied, when out is
        too small; offsets[-1] is then the bytes it needs (what a loader's step does with the
        buffer it reuses: loaderx._loading.ragged_batch)."""
        remote = self._remote
        if remote is not None:
            with remote.reading(indices):
                return self._gather_packed(indices, out, offsets, rows)
        return self._gather_packed(indices, out, offsets, rows)

    def _gather_packed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None,
    ) -> bool:
        """gather_packed on the local store: the compiled short path, else the store's checked
        method."""
        done = _gather_packed(self._store, indices, self._row_size, out, offsets, rows)
        if done != PACKED_DECLINED:
            return done == 1
        return self._store.gather_packed(indices, self._row_size, out, offsets, rows)

    def gather_padded(
        self, indices: npt.NDArray[np.int64], pad_row: npt.NDArray[Any],
        lengths: npt.NDArray[np.uint64], truncate: bool, out: npt.NDArray[Any],
        mask: npt.NDArray[Any], rows: npt.NDArray[np.uint64],
    ) -> bool:
        """The records of indices padded in one native call: rows[i] = record i's rows, rows[-1]
        the padded length L (picked from lengths as Zrecord.gather_padded says), then, when out
        and mask hold them, each record's first min(n_i, L) rows in its block of L rows of out
        (taken as bytes), pad_row (one row's bytes) after them, and the mask's bytes. False,
        with only rows written, when out or mask is too small for rows[-1] rows a record, or a
        record is longer than every length and truncate is False (rows[-1] > lengths[-1])."""
        remote = self._remote
        if remote is not None:
            with remote.reading(indices):
                return self._store.gather_padded(
                    indices, self._row_size, pad_row, lengths, truncate, out, mask, rows)
        return self._store.gather_padded(
            indices, self._row_size, pad_row, lengths, truncate, out, mask, rows)

    def record_offsets(
        self, indices: npt.NDArray[np.int64], offsets: npt.NDArray[np.uint64],
        rows: npt.NDArray[np.int32] | None = None,
    ) -> None:
        """In one native call, offsets[i] = the bytes of the first i records of indices (a
        C-contiguous int64 array) and, with rows, rows[i] = the rows of the first i records
        (int32: a packed batch's cu_seqlens); each array has one entry more than indices. What
        a loader sizes its buffer by before gather_ragged_into."""
        self._store.record_offsets(indices, self._row_size, offsets, rows)

    def gather_ragged_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64],
    ) -> bool:
        """Record indices[i] into out's bytes [offsets[i], offsets[i + 1]) in one native call,
        with offsets from record_offsets; False when a record changed size since (a concurrent
        delete or compaction), and the caller sizes again (loaderx._loading.ragged_batch)."""
        remote = self._remote
        if remote is not None:
            with remote.reading(indices):
                return self._store.gather_ragged_into(indices, out, offsets)
        return self._store.gather_ragged_into(indices, out, offsets)

    def _records(self, records: object, what: str) -> list[npt.NDArray[Any]]:
        """Every record validated against the schema and made C-contiguous (nothing written)."""
        if isinstance(records, np.ndarray) or not isinstance(records, Sequence):
            raise TypeError(
                f"{what} must be a list (or other sequence) of arrays, not "
                f"{type(records).__name__}; wrap a single record as [record]"
            )
        checked: list[npt.NDArray[Any]] = []
        ndim = len(self._item_shape) + 1
        for position, record in enumerate(records):
            name = f"{what}[{position}]"
            array = check_array(record, name, self._dtype)
            if array.ndim != ndim or array.shape[1:] != self._item_shape:
                raise ValueError(
                    f"{name} has shape {array.shape}; records of this dataset have shape "
                    f"(L, *{self._item_shape})"
                )
            if array.nbytes > RECORD_SIZE_MAX:
                raise ValueError(
                    f"{name} is {array.nbytes} bytes, over the store's {RECORD_SIZE_MAX}-byte "
                    "(1 MiB) record limit"
                )
            checked.append(np.ascontiguousarray(array))
        return checked

    def append(self, records: Sequence[npt.NDArray[Any]]) -> int:
        """Appends a list of (L, *item_shape) arrays in one native call; returns the first index.

        Every record must have the dataset's dtype exactly (no silent casts: use .astype) and
        at most 1 MiB; every record is checked before anything is written.
        """
        checked = self._records(records, "records")
        self._check_appendable()
        if not checked:
            return len(self._store)
        store = self._store_for(len(checked))
        try:
            return store.append(checked)
        except StoreFullError:
            if isinstance(store, ShardedStore) or len(store) == 0:
                raise
        # The single store ran out of chunk space before its record limit: roll over.
        return self._become_sharded().append(checked)

    def train_dict(
        self, samples: Sequence[npt.NDArray[Any]], dict_size: str | SupportsIndex | None = None
    ) -> None:
        """Trains the zstd_dict dictionary on a list of sample records."""
        checked = self._records(samples, "samples")
        self._train([record.reshape(-1).view(np.uint8) for record in checked], dict_size)


def padding_value(value: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """value as a 0-d array of dtype; ValueError when the cast would change more than a float's
    rounding (np.full pads int records with 1 for 1.5, or with -2**63 for NaN, without a word)."""
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            cast = np.array(value, dtype=dtype)
            wanted = np.asarray(value)
            if cast.ndim != 0 or wanted.dtype.kind not in "biufc":
                kept = False
            elif dtype.kind in "fc":  # rounded is fine; infinite, NaN or imaginary parts must stay
                kept = bool(np.isfinite(cast) == np.isfinite(wanted)
                            and np.isnan(cast) == np.isnan(wanted)
                            and (dtype.kind == "c" or np.imag(wanted) == 0))
            else:
                kept = bool(cast == wanted)
    except (TypeError, ValueError, OverflowError):
        kept = False
    if not kept:
        raise ValueError(f"padding value {value!r} is not a value of the records' dtype {dtype}")
    return cast


def pad(
    records: Sequence[npt.NDArray[Any]], value: Any = 0
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """Pads a list of (L_i, *trailing) arrays into a (B, max L, *trailing) array plus the L_i.

    Every record must have the same dtype and trailing shape; the padding is `value`, which
    must be a value of that dtype (a float dtype rounds it; anything else it would change, such
    as NaN or 1.5 for integer records, is a ValueError).
    """
    if len(records) == 0:
        raise ValueError("pad needs at least one record to know the dtype and trailing shape")
    first = records[0]
    if not isinstance(first, np.ndarray) or first.ndim == 0:
        raise TypeError("pad takes a list of arrays with at least one dimension")
    trailing = first.shape[1:]
    lengths = np.empty(len(records), dtype=np.int64)
    for position, record in enumerate(records):
        if not isinstance(record, np.ndarray) or record.ndim == 0:
            raise TypeError(f"records[{position}] is not an array with at least one dimension")
        if record.dtype != first.dtype:
            raise TypeError(
                f"records[{position}] has dtype {record.dtype}, records[0] has {first.dtype}"
            )
        if record.shape[1:] != trailing:
            raise ValueError(
                f"records[{position}] has trailing shape {record.shape[1:]}, records[0] has "
                f"{trailing}"
            )
        lengths[position] = record.shape[0]
    longest = int(lengths.max())
    dense = np.full((len(records), longest, *trailing), padding_value(value, first.dtype),
                    dtype=first.dtype)
    for position, record in enumerate(records):
        dense[position, : record.shape[0]] = record
    return dense, lengths


__all__ = ["RaggedDataset", "pad", "padding_value"]
