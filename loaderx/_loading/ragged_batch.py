"""Ragged streams of a loader: each step's records packed back to back, or padded to a length.

A RaggedDataset stream gives a batch two arrays (docs/decisions.md, "Ragged batches"):
- packed (the default): `name` is every record of the batch back to back, shape
  (total_rows, *item_shape) in the dataset's dtype, and `name.cu_seqlens` the int32 row offsets
  (B + 1 of them, from 0), as variable-length attention kernels take them: record i is
  `values[cu[i]:cu[i + 1]]`, of shape (cu[i + 1] - cu[i], *item_shape).
- padded (a Padding): `name` is (B, L, *item_shape), each record in its row's first rows and
  the padding value after, and `name.mask` the (B, L) bool mask of the record rows.

A step sizes and copies a stream's records in one native call into buffers the step's ring
slot keeps; the slot's reuse rules (loaderx._loading.step_maker) say when a buffer may be
written again. Packed, that call is RaggedDataset.gather_packed, which also writes the offsets
and cu_seqlens; padded, RaggedDataset.gather_padded, which reads the records' lengths, picks
the padded length, copies (or decompresses) each record straight into its row of the padded
array, repeats the padding row after it and writes the mask. A buffer too small for a batch
makes either call copy nothing and say what it needs; the step then makes a buffer that big and
a quarter more, and calls again.

With shard=, a length picked per batch (Padding() or buckets) is picked from the whole global
batch, not this host's part of it: the maker reads the lengths of the global batch's records
(longest_rows) and passes the longest to gather, so every host pads a step to one length, and
the hosts' batches put together are the global batch, as with dense streams (a data-parallel
step needs one shape on every host). A record too long for the padding then fails that step on
every host, not only on the one that read it.

A mixture's step sizes every source first (record_offsets), then gathers each into its part of
one packed buffer; padded, a second native call (loaderx._native.padded_batch.pad_rows) copies
each record of that buffer into its row of the padded array. (A call per source into the padded
array would need the length of the whole batch first: the packed buffer keeps that path one
sizing and one copy per source.)

Compiled with mypyc (build.py's MYPYC_MODULES): a step runs this module's code once per ragged
stream, and with records of a few tokens its Python time is a visible share of the step. The
loader's ragged= argument (Padding, the layouts) is parsed in ragged_layout.py, interpreted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._data.ragged import RaggedDataset, padding_value
from loaderx._loading.ragged_layout import CU_SEQLENS_SUFFIX, MASK_SUFFIX, Layout
from loaderx._native.padded_batch import pad_rows
from loaderx.errors import CorruptStoreError

# How often a gather sizes its records again after a concurrent delete or compaction moved one.
_GATHER_ATTEMPTS: Final = 8
_ROWS_MAX: Final = (1 << 31) - 1  # cu_seqlens is int32
_UINT8: Final = np.dtype(np.uint8)
_UINT64: Final = np.dtype(np.uint64)
_INT32: Final = np.dtype(np.int32)

Buffer = npt.NDArray[np.uint8]
Part = tuple[RaggedDataset, npt.NDArray[np.int64]]


def _size(parts: Sequence[Part], offsets: npt.NDArray[np.uint64],
          rows: npt.NDArray[np.int32], name: str) -> None:
    """offsets and rows of the records of every part, back to back: one native call for one
    part (a DataLoader's step), a call per part and two NumPy ones for several (a mixture's)."""
    if len(parts) == 1:
        dataset, indices = parts[0]
        dataset.record_offsets(indices, offsets, rows)
        return
    offsets[0] = 0
    row = 0
    for dataset, indices in parts:
        count = len(indices)
        part = np.empty(count + 1, dtype=_UINT64)
        dataset.record_offsets(indices, part)
        offsets[row + 1 : row + 1 + count] = part[1:] + offsets[row]
        row += count
    row_offsets(offsets, parts[0][0].row_size, name, rows)


def _gather_one(part: Part, offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32],
                name: str, buffer_for: Callable[[int], Buffer]) -> Buffer:
    """One dataset's records in one native call that sizes and copies them (gather_packed);
    when the buffer buffer_for(0) gives is too small, the call says how much the records need,
    and a second call with a buffer that big copies them."""
    dataset, indices = part
    buffer = buffer_for(0)
    for _attempt in range(_GATHER_ATTEMPTS):
        if dataset.gather_packed(indices, buffer, offsets, rows):
            return buffer
        buffer = buffer_for(int(offsets[-1]))
    raise ValueError(
        f"records of stream {name!r} kept growing while being gathered ({_GATHER_ATTEMPTS} "
        "attempts): is a delete or compaction running on the dataset?"
    )


def gather_packed(parts: Sequence[Part], offsets: npt.NDArray[np.uint64],
                  rows: npt.NDArray[np.int32], name: str,
                  buffer_for: Callable[[int], Buffer]) -> Buffer:
    """The records of every part, back to back, in one buffer: offsets (uint64) get their byte
    bounds and rows (int32) their row bounds, one more entry than the records; buffer_for(bytes)
    gives a buffer of at least that many, and each part's records are copied by one native
    gather (a part per mixture source)."""
    if len(parts) == 1:
        return _gather_one(parts[0], offsets, rows, name, buffer_for)
    for _attempt in range(_GATHER_ATTEMPTS):
        _size(parts, offsets, rows, name)
        buffer = buffer_for(int(offsets[-1]))
        row = 0
        for dataset, indices in parts:
            count = len(indices)
            if not dataset.gather_ragged_into(indices, buffer, offsets[row : row + count + 1]):
                break
            row += count
        else:
            return buffer
    raise ValueError(
        f"records of stream {name!r} kept changing size while being gathered "
        f"({_GATHER_ATTEMPTS} attempts): a delete or compaction is running on the dataset"
    )


def longest_rows(dataset: RaggedDataset, indices: npt.NDArray[np.int64]) -> int:
    """The rows of the longest record of indices (0 for none): what a host pads a step to when
    indices are the whole global batch (module doc)."""
    if len(indices) == 0:
        return 0
    return int(dataset.lengths(indices).max())


def _fit(held: Buffer | None, size: int) -> Buffer:
    """held when it has room for size bytes, else a new buffer with a quarter to spare, so that
    batches a little longer than the last do not allocate again. (A loader's first step asks
    for 0 bytes with nothing held: an empty buffer, which the native call answers with the
    size it needs.)"""
    if held is not None and held.nbytes >= size:
        return held
    return np.empty(size + size // 4, dtype=_UINT8)


def row_offsets(offsets: npt.NDArray[np.uint64], row_size: int, name: str,
                out: npt.NDArray[np.int32]) -> None:
    """The byte offsets as int32 row offsets in out (cu_seqlens); CorruptStoreError for a record
    that is not whole rows, ValueError past int32."""
    if row_size > 1 and bool((offsets % np.uint64(row_size)).any()):
        raise CorruptStoreError(
            f"a record of stream {name!r} is not a whole number of {row_size}-byte rows"
        )
    rows = offsets // np.uint64(row_size)
    if int(rows[-1]) > _ROWS_MAX:
        raise ValueError(
            f"the batch of stream {name!r} has {int(rows[-1])} rows, more than int32 "
            "cu_seqlens can count: use a smaller batch"
        )
    np.copyto(out, rows, casting="unsafe")


def pad_into(values: npt.NDArray[Any], cu: npt.NDArray[np.int32], length: int, value: Any,
             out: npt.NDArray[Any], mask: npt.NDArray[np.bool_]) -> None:
    """Record i (values[cu[i]:cu[i + 1]], cut to `length` rows) into out[i], value after it;
    mask[i, j] is whether row j of out[i] holds a record row. out (len(cu) - 1, length, *rows)
    and mask (len(cu) - 1, length) bool are C-contiguous; one native call (pad_rows) writes
    both. A step pads its packed bytes with pad_rows itself (RaggedStream._pad)."""
    count = len(cu) - 1
    if out.shape[:2] != (count, length) or mask.shape != (count, length) or mask.dtype != np.bool_:
        raise ValueError(f"out must be ({count}, {length}, ...) and mask ({count}, {length}) bool, "
                         f"not {out.shape} and {mask.shape} {mask.dtype}")
    if values.shape[1:] != out.shape[2:]:
        raise ValueError(f"rows of values {values.shape[1:]} are not the rows of out {out.shape[2:]}")
    row = np.empty(out.shape[2:], dtype=out.dtype)
    row.fill(value)
    pad_rows(np.ascontiguousarray(values, dtype=out.dtype), np.require(cu, _INT32, ("C", "A")),
             row.nbytes, row, length, out, mask)


class RaggedStream:
    """One ragged stream of a DataLoader: its buffers for every ring slot, and its gather.

    In each slot: offsets (never leave the gather, so always reusable), the packed bytes (handed
    out when packed, the source of the padding otherwise), and the arrays handed out besides
    (cu_seqlens when packed; the padded bytes and the mask when padded). `outputs` lists the
    per-slot lists of what is handed out, for the maker's release check.
    """

    def __init__(self, name: str, dataset: RaggedDataset, layout: Layout, batch_size: int,
                 ring_size: int) -> None:
        self.name: str = name
        self.dataset: RaggedDataset = dataset
        self.layout: Layout = layout
        self._batch_size: int = batch_size
        self._offsets: list[npt.NDArray[np.uint64]] = []
        self._packed: list[Buffer | None] = []
        self._cu: list[npt.NDArray[np.int32] | None] = []
        self._padded: list[Buffer | None] = []
        self._mask: list[Buffer | None] = []
        self.outputs: list[list[Any]] = (
            [self._packed, self._cu] if layout is None else [self._padded, self._mask]
        )
        # One padding row's bytes (the value in every element of a row), what the padded
        # gather and pad_rows repeat, and the lengths the gather may pad to (none: the longest).
        self._pad_row: Buffer | None = None
        self._lengths: npt.NDArray[np.uint64] = np.empty(0, dtype=_UINT64)
        if layout is not None:
            row = np.empty(dataset.item_shape, dtype=dataset.dtype)
            row.fill(padding_value(layout.value, dataset.dtype))
            self._pad_row = row.reshape(-1).view(_UINT8)
            allowed = (layout.length,) if layout.length is not None else layout.buckets
            self._lengths = np.array(allowed or (), dtype=_UINT64)
        # Whether the padded length depends on the batch (Padding() or buckets), so that a
        # sharded loader's maker passes gather the global batch's longest record.
        self.picks_length: bool = layout is not None and layout.length is None
        # The largest padded buffer and mask made so far, what a new one starts at.
        self._padded_capacity: int = 0
        self._mask_capacity: int = 0
        # The largest packed buffer made so far: a new one starts that big, so that it usually
        # holds its first batch without a second native call.
        self._capacity: int = 0
        self._dtype: np.dtype[Any] = dataset.dtype
        self._shape: tuple[int, ...] = (-1, *dataset.item_shape)
        self._scalar_rows: bool = dataset.item_shape == ()
        self._cu_key: str = name + CU_SEQLENS_SUFFIX
        for _ in range(ring_size):
            self.grow()

    def grow(self) -> None:
        """One more ring slot (the maker's _grow)."""
        self._offsets.append(np.zeros(self._batch_size + 1, dtype=_UINT64))
        for slots in (self._packed, self._cu, self._padded, self._mask):
            slots.append(None)

    def gather(self, parts: Sequence[Part], slot: int, reusable: bool,
               batch: dict[str, Any], longest: int = -1) -> None:
        """The stream's arrays of a step into batch: the records of every part (a dataset of
        the stream's dtype and item shape, and indices into it) in order, written into slot's
        buffers when `reusable` (nothing else references them), else into new ones. Padded,
        `longest` (when >= 0) is the longest record of the whole global batch, which then
        picks the length instead of these records (module doc)."""
        if self.layout is not None and len(parts) == 1:
            self._gather_padded(parts[0], slot, reusable, batch, longest)
            return
        offsets = self._offsets[slot]
        packed = self.layout is None
        # Padded, the packed bytes and cu_seqlens never leave the step: always reusable.
        held = self._packed[slot] if reusable or not packed else None
        cu = self._cu[slot]
        if cu is None or (packed and not reusable):
            cu = np.empty(self._batch_size + 1, dtype=_INT32)
            self._cu[slot] = cu

        if len(parts) == 1:  # a DataLoader's step: the call of _gather_one, inline
            dataset, indices = parts[0]
            buffer = held if held is not None else self._fresh(0)
            if not dataset.gather_packed(indices, buffer, offsets, cu):
                buffer = gather_packed(parts, offsets, cu, self.name, self._buffers_after(held))
        else:
            buffer = gather_packed(parts, offsets, cu, self.name, self._buffers_after(held))
        self._packed[slot] = buffer
        if self.layout is not None:
            self._pad(buffer, cu, slot, reusable, batch, longest)
            return
        values = buffer[: int(offsets[-1])].view(self._dtype)
        # Records of single values (tokens) are already (rows,): a reshape would cost a
        # third of the views' time for nothing.
        batch[self.name] = values if self._scalar_rows else values.reshape(self._shape)
        batch[self._cu_key] = cu

    def _buffers_after(self, held: Buffer | None) -> Callable[[int], Buffer]:
        """buffer_for of gather_packed: `held` while it has room, else a new buffer (_fresh).
        Made only when a step's first call found its buffer too small, or for a mixture."""

        def buffer_for(size: int) -> Buffer:
            if held is not None and held.nbytes >= size:
                return held
            return self._fresh(size)

        return buffer_for

    def _fresh(self, size: int) -> Buffer:
        """A new packed buffer of at least size bytes: as big as the largest made so far, or
        size and a quarter more.

        The largest size is a hint the threads making steps share, and another thread may
        write a smaller one between this call's write and its allocation (a lost update; the
        GIL does not prevent it, and free-threaded builds make it likelier). So the buffer is
        sized from this call's own value, never from the attribute read again."""
        capacity = max(self._capacity, size + size // 4)
        self._capacity = capacity
        return np.empty(capacity, dtype=_UINT8)

    def _gather_padded(self, part: Part, slot: int, reusable: bool,
                       batch: dict[str, Any], longest: int) -> None:
        """A DataLoader's padded step: one native call (gather_padded) into slot's buffers, or
        new ones, that sizes the batch, picks its length and copies every record into its row.
        When the buffers are too small it copies nothing and says the length; the step then
        makes buffers that big and a quarter more and calls again."""
        layout = self.layout
        pad_row = self._pad_row
        assert layout is not None and pad_row is not None
        dataset, indices = part
        count = len(indices)
        rows = self._offsets[slot]
        if len(rows) != count + 1:
            rows = np.empty(count + 1, dtype=_UINT64)
        row_size = dataset.row_size
        lengths = self._lengths
        if longest >= 0:
            # The global batch's length (module doc), the only one allowed; 0 (every record
            # empty) is what the batch's own longest gives too, with no length to allow.
            length = layout.target(longest)
            if length > 0:
                lengths = np.array((length,), dtype=_UINT64)
        out = self._padded[slot] if reusable else None
        mask = self._mask[slot] if reusable else None
        if out is None:
            out = np.empty(self._padded_capacity, dtype=_UINT8)
        if mask is None:
            mask = np.empty(self._mask_capacity, dtype=_UINT8)
        for _attempt in range(_GATHER_ATTEMPTS):
            if dataset.gather_padded(indices, pad_row, lengths, layout.truncate, out, mask, rows):
                break
            length = int(rows[-1])
            if len(lengths) and length > int(lengths[-1]):
                layout.target(length)  # the ValueError that says how to pad longer records
            # Sized from local values, as in _fresh: the capacities are hints shared by threads.
            size = count * length * row_size
            if out.nbytes < size:
                capacity = max(self._padded_capacity, size + size // 4)
                self._padded_capacity = capacity
                out = np.empty(capacity, dtype=_UINT8)
            cells = count * length
            if mask.nbytes < cells:
                capacity = max(self._mask_capacity, cells + cells // 4)
                self._mask_capacity = capacity
                mask = np.empty(capacity, dtype=_UINT8)
        else:
            raise ValueError(
                f"records of stream {self.name!r} kept growing while being gathered "
                f"({_GATHER_ATTEMPTS} attempts): is a delete or compaction running on the dataset?"
            )
        self._padded[slot] = out
        self._mask[slot] = mask
        length = int(rows[-1])
        cells = count * length
        batch[self.name] = out[: cells * row_size].view(dataset.dtype).reshape(
            (count, length, *dataset.item_shape))
        batch[self.name + MASK_SUFFIX] = mask[:cells].view(np.bool_).reshape(count, length)

    def _pad(self, packed: Buffer, cu: npt.NDArray[np.int32], slot: int, reusable: bool,
             batch: dict[str, Any], longest: int) -> None:
        """The step's records (packed, at the rows cu gives) padded into slot's buffers, or new
        ones, in one native call; to the length `longest` picks when >= 0 (gather)."""
        layout = self.layout
        pad_row = self._pad_row
        assert layout is not None and pad_row is not None
        count = self._batch_size
        length = layout.target(max(int(np.diff(cu).max()), longest))
        dataset = self.dataset
        size = count * length * dataset.row_size
        padded = _fit(self._padded[slot] if reusable else None, size)
        self._padded[slot] = padded
        mask_bytes = _fit(self._mask[slot] if reusable else None, count * length)
        self._mask[slot] = mask_bytes
        pad_rows(packed, cu, dataset.row_size, pad_row, length, padded, mask_bytes)
        out = padded[:size].view(dataset.dtype).reshape((count, length, *dataset.item_shape))
        batch[self.name] = out
        batch[self.name + MASK_SUFFIX] = mask_bytes[: count * length].view(np.bool_).reshape(count, length)


__all__ = ["RaggedStream", "gather_packed", "longest_rows", "pad_into", "row_offsets"]
