"""from_arrow (and `loaderx convert x.parquet`) refuses more rows than its columns' stores hold
as the other conversions do: before any byte is written when the source's row count is known
(a Table, a Parquet file's metadata, a datasets.Dataset), else at the first row past the limit,
before it is written (a RecordBatchReader); every destination is left as it was.

Before: a binary or string column (one bare Zrecord, at most 2^24 records) of a longer source
failed partway through the conversion, and with workers and a small shard_records the shard
count was refused only by the commit, once every worker had written every part.

The limits are lowered with monkeypatch (the conversion reads them from loaderx._store.layout
at each call) so that no test writes 2^24 rows.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loaderx._data import arrow_convert  # private: to see that nothing starts writing
from loaderx._store import layout  # private: the limits, lowered to keep the sources small
from loaderx.cli import EXIT_PROBLEM, main
from loaderx.converter import from_arrow
from loaderx.zrecord import Zrecord
from loaderx._store.manifest import read_manifest  # private: the shards a conversion made

pa: Any = pytest.importorskip("pyarrow")
pq: Any = pytest.importorskip("pyarrow.parquet")

BYTES_REFUSAL = ("{rows} exceed the limit of 4 records of a bare Zrecord store, which binary "
                 "and string columns ['text'] become; leave them out with columns=, or convert "
                 "at most 4 rows at a time, each share to its own folder")


def no_writing(*_args: Any, **_kwargs: Any) -> Any:
    raise AssertionError("the conversion started writing")


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under folder with its bytes."""
    found: dict[str, bytes] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as stream:
                found[os.path.relpath(path, folder)] = stream.read()
    return found


def table_of(rows: int) -> Any:
    return pa.table({"label": pa.array(range(rows), pa.int64()),
                     "text": pa.array([f"row {i}" for i in range(rows)])})


def old_output(out: Path) -> dict[str, bytes]:
    """A converted table at out for overwrite=True to replace; the bytes of what is there."""
    assert from_arrow(table_of(2), out) == 2
    return tree(out)


@pytest.fixture
def hf_datasets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The datasets package, kept off the network and out of the user's cache."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return pytest.importorskip("datasets")


def sources(tmp_path: Path, table: Any, hf: Any) -> list[Any]:
    """table as every source kind whose row count is known before reading it."""
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=2)
    (tmp_path / "folder").mkdir(exist_ok=True)
    pq.write_table(table.slice(0, 3), tmp_path / "folder" / "a.parquet", row_group_size=2)
    pq.write_table(table.slice(3), tmp_path / "folder" / "b.parquet", row_group_size=2)
    return [table, table.to_batches()[0], str(tmp_path / "data.parquet"),
            tmp_path / "folder", hf.Dataset.from_dict(table.to_pydict())]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_bytes_column_longer_than_a_store_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_datasets: Any, workers: int
) -> None:
    out = tmp_path / "out"
    before = old_output(out)
    monkeypatch.setattr(layout, "SHARD_RECORDS_MAX", 4)
    monkeypatch.setattr(arrow_convert, "_convert", no_writing)
    for source in sources(tmp_path, table_of(5), hf_datasets):
        with pytest.raises(ValueError, match=re.escape(BYTES_REFUSAL.format(rows="5 rows"))):
            from_arrow(source, out, overwrite=True, workers=workers)
        assert tree(out) == before
        with pytest.raises(ValueError, match=re.escape(BYTES_REFUSAL.format(rows="5 rows"))):
            from_arrow(source, tmp_path / "new", workers=workers)
        assert not (tmp_path / "new").exists()
    # Leaving the column out is the way through (the dense column shards itself).
    monkeypatch.undo()
    monkeypatch.setattr(layout, "SHARD_RECORDS_MAX", 4)
    assert from_arrow(table_of(5), out, columns=["label"], overwrite=True, workers=workers) == 5


def test_a_bytes_column_of_exactly_a_stores_limit_converts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layout, "SHARD_RECORDS_MAX", 4)
    for workers in (1, 2):
        out = tmp_path / f"out{workers}"
        assert from_arrow(table_of(4), out, workers=workers, shard_records=3) == 4
        with Zrecord(out / "text") as store:
            assert store.gather(slice(0, 4)) == [f"row {i}".encode() for i in range(4)]


def batches_then_raise(batches: list[Any]) -> Iterator[Any]:
    """The batches, then an error: a stream that must not be read past them."""
    yield from batches
    raise AssertionError(f"read past batch {len(batches) - 1}")


def test_a_stream_stops_at_the_first_row_past_a_stores_limit_before_writing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader's length is known only as it is read: the batch holding the first row past the
    limit is refused before any of it is written, and nothing after it is read."""
    out = tmp_path / "out"
    before = old_output(out)
    monkeypatch.setattr(layout, "SHARD_RECORDS_MAX", 4)
    from loaderx._data import arrow_writer  # private: to see which rows were written

    written: list[int] = []
    add = arrow_writer.ColumnWriter.add

    def counted_add(self: Any, array: Any, row0: int) -> None:
        written.extend(range(row0, row0 + len(array)))
        add(self, array, row0)

    monkeypatch.setattr(arrow_writer.ColumnWriter, "add", counted_add)
    table = table_of(6)
    reader = pa.RecordBatchReader.from_batches(
        table.schema, batches_then_raise(table.to_batches(max_chunksize=2)))
    with pytest.raises(ValueError, match=re.escape(
            BYTES_REFUSAL.format(rows="the source's rows"))):
        from_arrow(reader, out, overwrite=True)
    assert max(written) == 3  # rows 0..3, of both columns; row 4 never
    assert tree(out) == before
    # Exactly the limit is fine.
    reader = pa.RecordBatchReader.from_batches(table.schema, table.slice(0, 4).to_batches())
    assert from_arrow(reader, out, overwrite=True) == 4


def test_a_dense_column_past_a_datasets_limit_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no bytes column the limit is a dataset's: up front as from_numpy says it, and at the
    first row past it for a stream."""
    out = tmp_path / "out"
    before = old_output(out)
    monkeypatch.setattr(layout, "RECORD_COUNT_MAX", 4)
    table = table_of(5).select(["label"])
    with monkeypatch.context() as patch:
        patch.setattr(arrow_convert, "_convert", no_writing)
        with pytest.raises(ValueError, match=re.escape(
                "5 records exceed a dataset's limit of 4 (2^20 shards)")):
            from_arrow(table, out, overwrite=True)
    reader = pa.RecordBatchReader.from_batches(
        table.schema, batches_then_raise(table.to_batches(max_chunksize=2)))
    with pytest.raises(ValueError, match=re.escape(
            "the source's records exceed a dataset's limit of 4 (2^20 shards)")):
        from_arrow(reader, out, overwrite=True)
    assert tree(out) == before


def test_convert_of_a_parquet_file_longer_than_a_store_refuses_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(table_of(5), tmp_path / "data.parquet")
    monkeypatch.setattr(layout, "SHARD_RECORDS_MAX", 4)
    monkeypatch.setattr(arrow_convert, "_convert", no_writing)
    text = io.StringIO()
    status = main(["convert", str(tmp_path / "data.parquet"), str(tmp_path / "out"), "--quiet"],
                  out=text)
    assert (status, text.getvalue()) == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == (
        f"loaderx convert: {tmp_path / 'data.parquet'}: "
        f"{BYTES_REFUSAL.format(rows='5 rows')}; nothing was converted\n")
    assert not (tmp_path / "out").exists()


def test_workers_refuse_too_many_shards_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hf_datasets: Any
) -> None:
    """9 rows in two shares (5 and 4) of shards of at most 2 make 3 + 2 shards."""
    out = tmp_path / "out"
    before = old_output(out)
    monkeypatch.setattr(layout, "SHARD_COUNT_MAX", 4)
    table = table_of(9).select(["label"])
    with monkeypatch.context() as patch:
        patch.setattr(arrow_convert, "run_workers", no_writing)
        patch.setattr(arrow_convert, "make_staging", no_writing)
        for source in sources(tmp_path, table, hf_datasets):
            with pytest.raises(ValueError, match=re.escape(
                    "9 records in shards of at most 2 make 5 shards, over a dataset's limit "
                    "of 4; pass a larger shard_records")):
                from_arrow(source, out, overwrite=True, workers=2, shard_records=2)
            assert tree(out) == before
    # 8 rows make 2 + 2 shards: exactly the limit.
    assert from_arrow(table.slice(0, 8), out, overwrite=True, workers=2, shard_records=2) == 8
    manifest = read_manifest(out / "label")
    assert manifest is not None
    assert [shard.records for shard in manifest.shards] == [2, 2, 2, 2]
