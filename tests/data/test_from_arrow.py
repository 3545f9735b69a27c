"""from_arrow: every column kind round-trips exactly, from every source kind, and what it cannot
store is refused before anything is written."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_arrow
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.zrecord import Zrecord
from loaderx._store.manifest import read_manifest
from loaderx._store.schema import read_schema
from small_disks import leave_free, mounted_tmpfs

pa: Any = pytest.importorskip("pyarrow")
pq: Any = pytest.importorskip("pyarrow.parquet")


def column_values(folder: Path) -> list[Any]:
    """A converted column as to_pylist gives the source's (a bare Zrecord's records as bytes)."""
    if not (folder / "schema.msgpack").exists():
        with Zrecord(folder) as store:
            return store.gather(slice(0, len(store))) if len(store) else []
    ds = DenseDataset(folder) if read_schema(str(folder)).kind == "dense" else RaggedDataset(folder)
    with ds:
        return [np.asarray(row).tolist() for row in ds[:]] if len(ds) else []


def expected(column: Any) -> list[Any]:
    """What a column must read back as: its values, strings as their UTF-8 bytes."""
    values = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [value.encode("utf-8") for value in values]
    return list(values)


def assert_round_trip(table: Any, out: Path) -> None:
    assert sorted(os.listdir(out)) == sorted(table.column_names)
    for name in table.column_names:
        assert column_values(out / name) == expected(table.column(name)), name


def every_kind(rows: int, seed: int = 0) -> Any:
    """A table with one column of every kind from_arrow stores, rows long."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 5, size=rows)
    lengths[::3] = 0  # empty records, the first among them
    ragged = [rng.normal(size=n).astype(np.float32).tolist() for n in lengths]
    return pa.table({
        "int8": pa.array(rng.integers(-128, 128, size=rows), pa.int8()),
        "uint64": pa.array(rng.integers(0, 2**63, size=rows, dtype=np.uint64), pa.uint64()),
        "float64": pa.array(rng.normal(size=rows), pa.float64()),
        "float16": pa.array(rng.normal(size=rows).astype(np.float16), pa.float16()),
        "bool": pa.array(rng.integers(0, 2, size=rows).astype(bool), pa.bool_()),
        "vector": pa.array(rng.normal(size=(rows, 3)).tolist(), pa.list_(pa.float32(), 3)),
        "matrix": pa.array(rng.integers(0, 9, size=(rows, 2, 3)).tolist(),
                           pa.list_(pa.list_(pa.int16(), 3), 2)),
        "tokens": pa.array(ragged, pa.list_(pa.float32())),
        "large": pa.array([list(range(n)) for n in lengths], pa.large_list(pa.int32())),
        "points": pa.array([[[i, -i] for i in range(n)] for n in lengths],
                           pa.list_(pa.list_(pa.int64(), 2))),
        "blob": pa.array([bytes(rng.integers(0, 256, size=n).astype(np.uint8)) for n in lengths],
                         pa.binary()),
        "large_blob": pa.array([b"x" * int(n) for n in lengths], pa.large_binary()),
        "text": pa.array(["é" * int(n) + str(i) for i, n in enumerate(lengths)], pa.string()),
        "large_text": pa.array(["ü" * int(n) for n in lengths], pa.large_string()),
    })


# --- round trips ------------------------------------------------------------------------------


def test_every_column_kind_round_trips_exactly(tmp_path: Path) -> None:
    table = every_kind(100)
    assert from_arrow(table, tmp_path / "out") == 100
    assert_round_trip(table, tmp_path / "out")
    with DenseDataset(tmp_path / "out" / "matrix") as matrix:
        assert (matrix.dtype, matrix.item_shape) == (np.dtype(np.int16), (2, 3))
    with RaggedDataset(tmp_path / "out" / "points") as points:
        assert (points.dtype, points.item_shape) == (np.dtype(np.int64), (2,))
        assert points[0].shape == (0, 2)  # an empty list stays an empty record


def test_chunked_columns_with_different_chunk_boundaries_round_trip(tmp_path: Path) -> None:
    """Each column may be cut into chunks of its own, and a chunk may be a slice (an offset
    into its buffers): the batches follow the chunks, and every column is read whole."""
    whole = every_kind(300, seed=1)
    columns = {}
    for position, name in enumerate(whole.column_names):
        column = whole.column(name).combine_chunks()
        cuts = [0, 7 + position, 100, 101, 250, 300]
        columns[name] = pa.chunked_array([column.slice(a, b - a) for a, b in zip(cuts, cuts[1:])])
    table = pa.table(columns)
    assert table.column("tokens").num_chunks == 5
    assert from_arrow(table, tmp_path / "out", batch_rows=64) == 300
    assert_round_trip(whole, tmp_path / "out")


def test_empty_lists_round_trip_even_when_every_record_is_empty(tmp_path: Path) -> None:
    table = pa.table({"none": pa.array([[], [], []], pa.list_(pa.int32())),
                      "some": pa.array([[], [1], []], pa.list_(pa.int32()))})
    from_arrow(table, tmp_path / "out")
    with RaggedDataset(tmp_path / "out" / "none") as none:
        assert [row.shape for row in none[:]] == [(0,), (0,), (0,)]
    assert column_values(tmp_path / "out" / "some") == [[], [1], []]


def test_an_empty_table_writes_empty_datasets_of_the_columns_types(tmp_path: Path) -> None:
    table = every_kind(10).slice(0, 0)
    assert from_arrow(table, tmp_path / "out") == 0
    with DenseDataset(tmp_path / "out" / "vector") as vector:
        assert (len(vector), vector.dtype, vector.item_shape) == (0, np.dtype(np.float32), (3,))
    with Zrecord(tmp_path / "out" / "blob") as blob:
        assert len(blob) == 0


def test_columns_picks_and_renames(tmp_path: Path) -> None:
    table = every_kind(20)
    from_arrow(table, tmp_path / "a", columns=["vector", "tokens"])
    assert sorted(os.listdir(tmp_path / "a")) == ["tokens", "vector"]
    from_arrow(table, tmp_path / "b", columns={"text": "captions"})
    assert os.listdir(tmp_path / "b") == ["captions"]
    assert column_values(tmp_path / "b" / "captions") == expected(table.column("text"))


def test_a_record_batch_reader_is_read_once_in_order(tmp_path: Path) -> None:
    table = every_kind(200, seed=2)
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=33))
    assert from_arrow(reader, tmp_path / "out", batch_rows=20) == 200
    assert_round_trip(table, tmp_path / "out")
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches())
    with pytest.raises(ValueError, match="read once, in order, by one process"):
        from_arrow(reader, tmp_path / "two", workers=2)
    assert not (tmp_path / "two").exists()


def test_workers_write_each_column_as_the_shards_of_one_dataset(tmp_path: Path) -> None:
    table = every_kind(1000, seed=3)
    assert from_arrow(table, tmp_path / "out", workers=2, shard_records=300) == 1000
    assert_round_trip(table, tmp_path / "out")
    manifest = read_manifest(tmp_path / "out" / "vector")
    assert manifest is not None  # 500 rows a worker, at most 300 a shard
    assert [shard.records for shard in manifest.shards] == [300, 200, 300, 200]


def test_a_full_disk_while_workers_join_a_bytes_column_leaves_every_column_as_it_was(
    tmp_path: Path,
) -> None:
    """With workers, a bytes column's parts are copied into one Zrecord after every worker is
    done. The disk filling during that copy must leave no column published: 'a' comes before
    'b', so it would be in place already if the columns were published one by one."""
    rng = np.random.default_rng(12)
    blobs = [rng.bytes(64 << 10) for _ in range(64)]  # 4 MiB that do not compress
    table = pa.table({"a": pa.array(range(64), pa.int64()), "b": pa.array(blobs, pa.binary())})
    with mounted_tmpfs(tmp_path / "disk", "size=32m") as disk:
        filler = leave_free(disk, 7 << 20)  # the parts fit, their joined copy does not
        (disk / "out").mkdir()
        with pytest.raises(OSError) as failure:
            from_arrow(table, disk / "out", codec="raw", workers=2)
        assert failure.value.errno == errno.ENOSPC
        assert os.listdir(disk / "out") == []
        filler.unlink()
        assert from_arrow(table, disk / "out", codec="raw", workers=2) == 64
        assert_round_trip(table, disk / "out")


# --- Parquet ----------------------------------------------------------------------------------


def write_parquet_folder(table: Any, folder: Path, files: int, row_group_rows: int) -> None:
    """table cut into `files` Parquet files (in a sub-folder too), each of several row groups."""
    (folder / "z-more").mkdir(parents=True)
    bounds = np.linspace(0, table.num_rows, files + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        # Sorted paths put them in table order (z-more/ sorts after part-*).
        where = folder / "z-more" if i == files - 1 else folder
        pq.write_table(table.slice(a, b - a), where / f"part-{i:02d}.parquet",
                       row_group_size=row_group_rows)
    (folder / "_SUCCESS").write_text("")  # skipped, as pyarrow.dataset skips it


@pytest.mark.parametrize("workers", [1, 2])
def test_a_parquet_folder_round_trips_in_file_order(tmp_path: Path, workers: int) -> None:
    table = every_kind(900, seed=4)
    write_parquet_folder(table, tmp_path / "parquet", files=3, row_group_rows=100)
    assert from_arrow(tmp_path / "parquet", tmp_path / "out", workers=workers) == 900
    assert_round_trip(table, tmp_path / "out")


def test_spawned_workers_read_their_own_row_groups(tmp_path: Path) -> None:
    """With "spawn" nothing is inherited: each worker gets its share of the Parquet folder as
    file names and row group numbers, and reads them itself."""
    table = every_kind(120, seed=6)
    write_parquet_folder(table, tmp_path / "parquet", files=2, row_group_rows=20)
    assert from_arrow(tmp_path / "parquet", tmp_path / "out", workers=2,
                      start_method="spawn") == 120
    assert_round_trip(table, tmp_path / "out")


def test_a_parquet_file_round_trips(tmp_path: Path) -> None:
    table = every_kind(50, seed=5)
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=16)
    assert from_arrow(str(tmp_path / "data.parquet"), tmp_path / "out") == 50
    assert_round_trip(table, tmp_path / "out")


def test_parquet_files_of_different_schemas_are_refused(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"a": pa.array([1], pa.int32())}), tmp_path / "p" / "0.parquet")
    pq.write_table(pa.table({"a": pa.array([1], pa.int64())}), tmp_path / "p" / "1.parquet")
    with pytest.raises(ValueError, match="1.parquet' has another schema than"):
        from_arrow(tmp_path / "p", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_unreadable_parquet_file_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    """pyarrow's own messages ("Parquet magic bytes not found in footer", "Corrupt snappy
    compressed data") name no file: in a folder of many the error must say which one."""
    table = pa.table({"a": pa.array(np.arange(3000) % 7, pa.int64())})
    (tmp_path / "p").mkdir()
    pq.write_table(table, tmp_path / "p" / "0.parquet", row_group_size=1000)
    whole = (tmp_path / "p" / "0.parquet").read_bytes()
    (tmp_path / "p" / "1.parquet").write_bytes(whole[: len(whole) // 2])  # truncated
    with pytest.raises(ValueError, match=r"1\.parquet'.*magic bytes"):
        from_arrow(tmp_path / "p", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # The footer is intact, the end of row group 1's compressed page is not.
    chunk = pq.ParquetFile(tmp_path / "p" / "0.parquet").metadata.row_group(1).column(0)
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    broken = bytearray(whole)
    broken[end - 12 : end] = bytes(b ^ 0xFF for b in broken[end - 12 : end])
    (tmp_path / "p" / "1.parquet").write_bytes(bytes(broken))
    with pytest.raises((OSError, ValueError), match=r"1\.parquet'.*[Cc]orrupt"):
        from_arrow(tmp_path / "p", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- refusals ---------------------------------------------------------------------------------


def test_a_null_is_refused_naming_column_and_row_and_nothing_is_written(tmp_path: Path) -> None:
    table = pa.table({
        "fine": pa.array(range(10), pa.int64()),
        "holes": pa.chunked_array([pa.array(range(4), pa.int64()),
                                   pa.array([4, 5, None, 7, 8, 9], pa.int64())]),
    })
    with pytest.raises(ValueError, match=r"column 'holes' holds a null at row 6: .*fill_null"):
        from_arrow(table, tmp_path / "out", batch_rows=3)
    assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()  # a folder that was there stays, as it was
    with pytest.raises(ValueError, match="column 'holes' holds a null at row 6"):
        from_arrow(table, tmp_path / "out", workers=2)
    assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize(("column", "row"), [
    (pa.array([[1], [2, None], [3]], pa.list_(pa.int32())), 1),
    (pa.array([[1, 2], [3, 4], [5, None]], pa.list_(pa.int32(), 2)), 2),
    (pa.array([[], None, [1]], pa.list_(pa.int32())), 1),
    (pa.array([b"a", b"b", None], pa.binary()), 2),
])
def test_a_null_inside_a_list_or_a_bytes_column_names_its_row(tmp_path: Path, column: Any,
                                                             row: int) -> None:
    message = rf"column 'c' holds a null (inside the list )?at row {row}"
    with pytest.raises(ValueError, match=message):
        from_arrow(pa.table({"c": column}), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_null_in_a_later_parquet_file_names_its_row_in_the_whole_source(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"a": pa.array([1, 2, 3], pa.int32())}), tmp_path / "p" / "0.parquet")
    pq.write_table(pa.table({"a": pa.array([4, None], pa.int32())}), tmp_path / "p" / "1.parquet")
    with pytest.raises(ValueError, match="column 'a' holds a null at row 4"):
        from_arrow(tmp_path / "p", tmp_path / "out")


def test_a_nested_struct_is_refused_saying_how_to_prepare_it(tmp_path: Path) -> None:
    table = pa.table({"ok": [1, 2], "image": pa.array(
        [{"bytes": b"\x89PNG", "path": "a.png"}, {"bytes": b"\x89PNG", "path": "b.png"}])})
    message = r"column 'image' has Arrow type struct<.*table\.flatten\(\)"
    with pytest.raises(TypeError, match=message):
        from_arrow(table, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # What the message says works: the flattened fields are a binary and a string column.
    from_arrow(table.flatten(), tmp_path / "out")
    assert column_values(tmp_path / "out" / "image.bytes") == [b"\x89PNG", b"\x89PNG"]


@pytest.mark.parametrize(("column", "advice"), [
    (pa.array([1, 2]).dictionary_encode(), "decode it first"),
    (pa.array([0, 1], pa.timestamp("s")), r"cast it to an integer"),
    (pa.array([[[1], [2, 3]]], pa.list_(pa.list_(pa.int8()))), "pad inner lists"),
])
def test_other_types_are_refused_with_advice(tmp_path: Path, column: Any, advice: str) -> None:
    with pytest.raises(TypeError, match=advice):
        from_arrow(pa.table({"c": column}), tmp_path / "out")


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    table = every_kind(5)
    with pytest.raises(ValueError, match=r"columns \['nope'\] are not in the source"):
        from_arrow(table, tmp_path / "out", columns=["nope"])
    with pytest.raises(ValueError, match="not a plain visible folder name"):
        from_arrow(table, tmp_path / "out", columns={"int8": "../escape"})
    with pytest.raises(ValueError, match="recode"):
        from_arrow(table, tmp_path / "out", codec="zstd_dict")
    with pytest.raises(TypeError, match="from_arrow reads a pyarrow.Table"):
        from_arrow({"a": [1]}, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_column_needs_overwrite_and_then_is_replaced(tmp_path: Path) -> None:
    first = pa.table({"a": pa.array([1, 2, 3], pa.int32())})
    second = pa.table({"a": pa.array([7, 8], pa.int32())})
    from_arrow(first, tmp_path / "out")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        from_arrow(second, tmp_path / "out")
    assert column_values(tmp_path / "out" / "a") == [1, 2, 3]
    from_arrow(second, tmp_path / "out", overwrite=True)
    assert column_values(tmp_path / "out" / "a") == [7, 8]


def test_two_columns_given_one_folder_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    table = pa.table({"a": [1, 2], "b": [3, 4]})
    with pytest.raises(ValueError, match=r"columns 'a' and 'b' would both be written to "
                                         r"folder 'x'"):
        from_arrow(table, tmp_path / "out", columns={"a": "x", "b": "x"})
    assert not (tmp_path / "out").exists()


def test_a_column_name_the_source_holds_twice_is_refused_naming_it(tmp_path: Path) -> None:
    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4]), pa.array([5, 6])],
                                 names=["x", "x", "y"])
    with pytest.raises(ValueError, match=r"the source has 2 columns named 'x'"):
        from_arrow(table, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # The other columns can still be picked.
    assert from_arrow(table, tmp_path / "out", columns=["y"]) == 2
    assert column_values(tmp_path / "out" / "y") == [5, 6]


# --- Hugging Face datasets --------------------------------------------------------------------


@pytest.fixture
def hf_datasets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The datasets package, kept off the network and out of the user's cache."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return pytest.importorskip("datasets")


def test_a_hugging_face_dataset_round_trips(tmp_path: Path, hf_datasets: Any) -> None:
    data: dict[str, list[Any]] = {
        "label": [3, 1, 4, 1, 5],
        "embedding": [[0.5, 1.5], [2.5, 3.5], [4.5, 5.5], [6.5, 7.5], [8.5, 9.5]],
        "input_ids": [[101, 7, 102], [], [101, 102], [5], [1, 2, 3, 4]],
        "text": ["a", "bé", "", "ccc", "d"],
    }
    features = hf_datasets.Features({
        "label": hf_datasets.Value("int64"),
        "embedding": hf_datasets.Sequence(hf_datasets.Value("float32"), length=2),
        "input_ids": hf_datasets.Sequence(hf_datasets.Value("int32")),
        "text": hf_datasets.Value("string"),
    })
    ds = hf_datasets.Dataset.from_dict(data, features=features)
    assert from_arrow(ds, tmp_path / "out") == 5
    assert column_values(tmp_path / "out" / "label") == data["label"]
    assert column_values(tmp_path / "out" / "embedding") == data["embedding"]
    assert column_values(tmp_path / "out" / "input_ids") == data["input_ids"]
    assert column_values(tmp_path / "out" / "text") == [t.encode() for t in data["text"]]
    with DenseDataset(tmp_path / "out" / "embedding") as embedding:
        assert embedding.item_shape == (2,)


def test_a_shuffled_hugging_face_dataset_asks_for_flatten_indices(tmp_path: Path,
                                                                  hf_datasets: Any) -> None:
    ds = hf_datasets.Dataset.from_dict({"x": list(range(10))}).shuffle(seed=0)
    with pytest.raises(ValueError, match=r"flatten_indices\(\)"):
        from_arrow(ds, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    from_arrow(ds.flatten_indices(), tmp_path / "out")
    assert column_values(tmp_path / "out" / "x") == ds["x"]


def test_a_dataset_dict_is_refused_asking_for_a_split(tmp_path: Path, hf_datasets: Any) -> None:
    splits = hf_datasets.DatasetDict({"train": hf_datasets.Dataset.from_dict({"x": [1, 2]})})
    with pytest.raises(TypeError, match="pick a split of a DatasetDict.*got DatasetDict"):
        from_arrow(splits, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert from_arrow(splits["train"], tmp_path / "out") == 2


@pytest.mark.parametrize(("shape", "target"), [
    ((2, 3), "fixed_size_list<item: fixed_size_list<item: float>[3]>[2]"),
    ((None, 3), "list<item: fixed_size_list<item: float>[3]>"),
])
def test_a_hugging_face_array2d_is_refused_naming_the_type_to_cast_it_to(
    tmp_path: Path, hf_datasets: Any, shape: tuple[int | None, int], target: str
) -> None:
    """An Array2D's Arrow storage is a list of variable-length lists, which is refused too:
    the advice must name the type that stores it (nested fixed_size_lists of its shape)."""
    rows = [np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)]
    features = hf_datasets.Features({"m": hf_datasets.Array2D(shape=shape, dtype="float32")})
    ds = hf_datasets.Dataset.from_dict({"m": rows}, features=features)
    with pytest.raises(TypeError, match=r"column 'm' .*cast it to " + re.escape(target)):
        from_arrow(ds, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # What the message says works, and every value reads back.
    table = ds.data.table
    row_type = pa.list_(pa.float32(), 3)
    fixed = pa.list_(row_type, 2) if shape[0] else pa.list_(row_type)
    assert str(fixed) == target
    from_arrow(table.set_column(0, "m", table.column("m").cast(fixed)), tmp_path / "out")
    assert column_values(tmp_path / "out" / "m") == [row.tolist() for row in rows]


def test_without_batch_rows_a_batch_holds_about_four_mib(tmp_path: Path) -> None:
    """Rows of 64 KiB come 64 to a batch, rows of 8 bytes 65,536 (the cap): memory follows the
    data's size, not a row count."""
    from loaderx._data.arrow_source import BATCH_ROWS_MAX, open_source

    wide = pa.table({"w": pa.array(np.zeros((300, 8192)).tolist(), pa.list_(pa.float64(), 8192))})
    narrow = pa.table({"n": pa.array(np.arange(200_000), pa.int64())})
    pq.write_table(wide, tmp_path / "wide.parquet")
    cases = ((wide, ["w"], 64), (narrow, ["n"], BATCH_ROWS_MAX),
             (str(tmp_path / "wide.parquet"), ["w"], 64))  # zeros: pages far smaller than arrays
    for source, columns, rows in cases:
        part = open_source(source, 1).parts[0]
        assert max(batch.num_rows for batch in part.batches(columns, None)) == rows
