"""A conversion in one process (workers unset or 1) refuses more records than a dataset holds as
the parallel one does: up front when their count is known, with the parallel path's message,
and with the destination as it was.

Before: from_numpy(..., shard_records=1) of 2^20 + 1 records and from_iterator of a sequence of
more records than a dataset holds started writing, and were refused only by the commit of the
shard past the limit, after every shard before it was written (days, for billions of records).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._data import serial  # private: to see that nothing starts writing
from loaderx._store import layout  # private: the limits, lowered to keep a dataset small
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import RaggedDataset


def no_writing(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the conversion started writing")


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under folder's parent with its bytes (staging folders are made beside)."""
    found: dict[str, bytes] = {}
    for root, _, files in os.walk(folder.parent):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as stream:
                found[os.path.relpath(path, folder.parent)] = stream.read()
    return found


class Records(Sequence[npt.NDArray[np.int32]]):
    """A sequence of `count` records whose length is known without making any of them; reading
    one fails the test."""

    def __init__(self, count: int) -> None:
        self.length = count

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> npt.NDArray[np.int32]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[npt.NDArray[np.int32]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        raise AssertionError("a record was read")


def old_dataset(path: Path) -> dict[str, bytes]:
    """A dataset at path for overwrite=True to replace; the bytes of what is there."""
    from_iterator(path, [np.full((2, 3), 5, dtype=np.int32)])
    return tree(path)


def test_from_numpy_in_one_process_refuses_too_many_shards_up_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "data"
    before = old_dataset(path)
    monkeypatch.setattr(serial, "write_in_place", no_writing)
    records = np.zeros(layout.SHARD_COUNT_MAX + 1, dtype=np.uint8)
    for workers in (1, 2):
        with pytest.raises(ValueError, match=re.escape(
                f"{layout.SHARD_COUNT_MAX + 1} records in shards of at most 1 make "
                f"{layout.SHARD_COUNT_MAX + 1} shards, over a dataset's limit of "
                f"{layout.SHARD_COUNT_MAX}; pass a larger shard_records")):
            from_numpy(path, records, codec="raw", workers=workers, shard_records=1,
                       overwrite=True)
        assert tree(path) == before


@pytest.mark.parametrize("count, shard_records, message", [
    (layout.SHARD_COUNT_MAX + 1, 1,
     f"{layout.SHARD_COUNT_MAX + 1} records in shards of at most 1 make "
     f"{layout.SHARD_COUNT_MAX + 1} shards, over a dataset's limit of {layout.SHARD_COUNT_MAX}; "
     "pass a larger shard_records"),
    (layout.RECORD_COUNT_MAX + 1, layout.SHARD_RECORDS_MAX,
     f"{layout.RECORD_COUNT_MAX + 1} records exceed a dataset's limit of "
     f"{layout.RECORD_COUNT_MAX} (2^20 shards)"),
])
def test_from_iterator_in_one_process_refuses_a_sequence_too_long_up_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, shard_records: int,
    message: str
) -> None:
    """A sequence's length is known: refused before its first record is read, with the
    message from_numpy gives for as many records."""
    path = tmp_path / "data"
    before = old_dataset(path)
    monkeypatch.setattr(serial, "write_in_place", no_writing)
    with pytest.raises(ValueError, match=re.escape(message)):
        from_iterator(path, Records(count), dtype=np.int32, item_shape=(3,),
                      shard_records=shard_records, overwrite=True)
    assert tree(path) == before
    with pytest.raises(ValueError, match=re.escape(message)):
        from_numpy(tmp_path / "dense", np.broadcast_to(np.uint8(1), (count,)), codec="raw",
                   shard_records=shard_records)
    assert not (tmp_path / "dense").exists()


def records_then_raise(count: int) -> Iterator[npt.NDArray[np.int32]]:
    """count records, then an error: a stream that must not be read past them."""
    for i in range(count):
        yield np.full((2, 3), i, dtype=np.int32)
    raise AssertionError(f"read past record {count - 1}")


def test_from_iterator_in_one_process_stops_a_stream_at_the_first_record_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's length is known only as it is read: the first record past the limit stops it,
    before that record is written or the stream read further, with the parallel path's message
    for sources; the destination is as it was."""
    monkeypatch.setattr(layout, "SHARD_COUNT_MAX", 4)
    path = tmp_path / "data"
    before = old_dataset(path)
    with pytest.raises(ValueError, match=re.escape(
            "the iterator's records in shards of at most 2 make more than 4 shards, over a "
            "dataset's limit of 4; pass a larger shard_records")):
        from_iterator(path, records_then_raise(9), shard_records=2, overwrite=True)
    assert tree(path) == before
    # Exactly the limit is fine: 4 shards of 2.
    stream = (np.full((2, 3), i, dtype=np.int32) for i in range(8))
    assert from_iterator(path, stream, shard_records=2, overwrite=True) == 8
    with RaggedDataset(path, readonly=True) as ds:
        assert [entry["records"] for entry in ds.shard_stats()] == [2, 2, 2, 2]
        found = ds[:]
    assert len(found) == 8
    for i, record in enumerate(found):
        np.testing.assert_array_equal(record, np.full((2, 3), i, dtype=np.int32))
