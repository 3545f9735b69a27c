"""The ragged= argument of a loader: Padding, and the layout of each ragged stream (packed or
padded) with the batch keys it adds.

Left interpreted (ragged_batch.py, which gathers the steps, is compiled): this runs once per
loader, and Padding is public, so its argument errors are its own messages rather than mypyc's
type checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np

from loaderx._data.dataset_base import DatasetBase
from loaderx._data.ragged import RaggedDataset, padding_value
from loaderx._store.flags import Flag, check_flag

PACKED: Final = "packed"
CU_SEQLENS_SUFFIX: Final = ".cu_seqlens"
MASK_SUFFIX: Final = ".mask"


# A padded length is a dimension of a NumPy array (an intp): a longer one only failed later,
# with an OverflowError about a C long from the loader.
_LENGTH_MAX: Final = 2**63 - 1


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1, got {value}")
    if value > _LENGTH_MAX:
        raise ValueError(f"{name} must be at most 2**63 - 1 (an array dimension), got {value}")
    return int(value)


class Padding:
    """How a loader pads a ragged stream: to `length` rows, to the smallest of `buckets` that
    holds the batch's longest record, or (neither given) to the batch's longest record.

    value fills the rows after each record (a value of the stream's dtype). A record longer than
    the length (or than the largest bucket) is a ValueError from the next() of its batch, unless
    truncate=True, which keeps its first rows.
    """

    length: int | None
    buckets: tuple[int, ...] | None
    value: Any
    truncate: bool

    def __init__(
        self,
        length: int | None = None,
        *,
        buckets: Sequence[int] | None = None,
        value: Any = 0,
        truncate: Flag = False,
    ) -> None:
        if length is not None and buckets is not None:
            raise ValueError("give Padding a length or buckets, not both")
        self.length = None if length is None else _positive(length, "length")
        if buckets is None:
            self.buckets = None
        else:
            if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence) or not buckets:
                raise TypeError("buckets must be a non-empty sequence of ints, such as (512, 1024)")
            sizes = tuple(_positive(bucket, "each bucket") for bucket in buckets)
            if any(later <= earlier for earlier, later in zip(sizes, sizes[1:])):
                raise ValueError(f"buckets must increase, got {sizes}")
            self.buckets = sizes
        truncate = check_flag("truncate", truncate)
        if truncate and self.length is None and self.buckets is None:
            raise ValueError("truncate=True needs a length or buckets to truncate to")
        self.value = value
        self.truncate = truncate

    def target(self, longest: int) -> int:
        """The padded length of a batch whose longest record has `longest` rows; ValueError
        when no allowed length holds it and truncation was not asked for."""
        allowed = (self.length,) if self.length is not None else self.buckets
        if allowed is None:
            return longest
        for size in allowed:
            if longest <= size:
                return size
        if self.truncate:
            return allowed[-1]
        raise ValueError(
            f"a record of this batch has {longest} rows, more than the padding's {allowed[-1]}; "
            "pass Padding(..., truncate=True) to keep its first rows, or a longer length"
        )

    def __repr__(self) -> str:
        size = f"buckets={self.buckets}" if self.buckets is not None else f"length={self.length}"
        return f"Padding({size}, value={self.value!r}, truncate={self.truncate})"


Layout = Padding | None  # None: packed


def _layout(entry: object, where: str) -> Layout:
    # Compared only as a str: a NumPy array's == is elementwise, so ["packed"] passed for
    # "packed" and two elements raised NumPy's ambiguous truth value instead of this TypeError.
    if entry is None or (isinstance(entry, str) and entry == PACKED):
        return None
    if isinstance(entry, Padding):
        return entry
    raise TypeError(f"{where} must be 'packed' or a loaderx.dataloader.Padding, not {entry!r}")


def extra_key(name: str, layout: Layout) -> str:
    """The batch key a ragged stream adds beside its own: its cu_seqlens when packed, its mask
    when padded."""
    return name + (CU_SEQLENS_SUFFIX if layout is None else MASK_SUFFIX)


def ragged_layouts(streams: Mapping[str, DatasetBase], ragged: object) -> dict[str, Layout]:
    """The layout of every ragged stream from a loader's `ragged=` argument: None or "packed"
    (all packed), a Padding (all padded), or a dict stream name -> either (the rest packed).
    Also refuses a key the batch would hold twice (a stream named "x.mask" beside a padded "x")."""
    names = [name for name, dataset in streams.items() if isinstance(dataset, RaggedDataset)]
    if isinstance(ragged, Mapping):
        for name in ragged:
            if name not in streams:
                raise ValueError(f"ragged names {name!r}, which is not a stream")
            if name not in names:
                raise ValueError(f"ragged names {name!r}, a dense stream (only ragged ones take a layout)")
        layouts = {name: _layout(ragged.get(name), f"ragged[{name!r}]") for name in names}
    else:
        every = _layout(ragged, "ragged")
        if every is not None and not names:
            # As a dict naming a dense stream is refused: the batch would lack the padded
            # arrays and masks asked for, and nothing would say why.
            raise ValueError(
                f"ragged={every!r} pads the ragged streams, but no stream is ragged "
                f"(streams: {', '.join(map(repr, streams))})"
            )
        layouts = {name: every for name in names}
    keys = set(streams)
    for name, layout in layouts.items():
        dataset = streams[name]
        assert isinstance(dataset, RaggedDataset)
        if dataset.row_size == 0:
            raise ValueError(f"stream {name!r} has rows of 0 bytes: its record lengths are unknown")
        if layout is not None:
            padding_value(layout.value, dataset.dtype)  # a ValueError naming the value
        extra = extra_key(name, layout)
        if extra in keys:
            raise ValueError(f"the batch key {extra!r} of ragged stream {name!r} is also a stream")
        keys.add(extra)
    return layouts


__all__ = ["CU_SEQLENS_SUFFIX", "MASK_SUFFIX", "PACKED", "Layout", "Padding", "extra_key",
           "ragged_layouts"]
