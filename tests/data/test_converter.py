"""Tests of loaderx.converter: from_numpy (memmaps included), from_iterator, recode chains,
overwrite rules, progress, and the README's conversion examples as written.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.converter import from_iterator, from_numpy, recode
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx._data.progress import Progress, wanted
from loaderx._store.schema import Codec, check_codec, read_schema

pytestmark = pytest.mark.compiled


def same_bits(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def dense_content(path: str) -> npt.NDArray[Any]:
    with DenseDataset(path) as ds:
        return ds.read(slice(None))


def ragged_content(path: str) -> list[npt.NDArray[Any]]:
    with RaggedDataset(path) as rs:
        records: list[npt.NDArray[Any]] = rs[:]
        return [r.copy() for r in records]


def leftovers(folder: Path) -> list[str]:
    """Staging or trash folders a converter should have removed."""
    return [n for n in os.listdir(folder) if ".loaderx-" in n]


# --- from_numpy -------------------------------------------------------------------------------


def test_from_numpy_one_dimensional_becomes_scalars(tmp_path: Path) -> None:
    labels = np.arange(100, dtype=np.int64) * 3 - 50
    assert from_numpy(str(tmp_path / "labels"), labels) == 100
    with DenseDataset(str(tmp_path / "labels")) as ds:
        assert ds.item_shape == ()
        assert ds[7] == labels[7] and type(ds[7]) is np.int64  # a scalar, as NumPy gives
        assert ds.read(7).shape == ()
        same_bits(ds[:], labels)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_from_numpy_memmap_larger_than_chunk_bytes(
    tmp_path: Path, rng: np.random.Generator, codec: Codec
) -> None:
    shape = (3000, 8, 16)  # 3000 records of 512 bytes: 1.5 MiB, over 20 blocks of 64 KiB
    mm = np.lib.format.open_memmap(str(tmp_path / "data.npy"), mode="w+", dtype=np.float32,
                                   shape=shape)
    mm[:] = rng.standard_normal(shape, dtype=np.float32).round(1)
    mm.flush()
    del mm
    source = np.load(str(tmp_path / "data.npy"), mmap_mode="r")
    assert isinstance(source, np.memmap) and source.nbytes > 64 << 10
    count = from_numpy(str(tmp_path / "ds"), source, codec=codec, dict_size="small",
                       chunk_bytes=64 << 10)
    assert count == 3000
    with DenseDataset(str(tmp_path / "ds")) as ds:
        assert ds.codec == codec and len(ds) == 3000
        same_bits(ds[:], np.asarray(source))
        if codec == "zstd_dict":
            # Trained before writing, so the result is appendable at once.
            assert ds.has_dict
            assert ds.append(np.asarray(source[:2]).copy()) == 3000


def test_from_numpy_with_chunk_smaller_than_a_record(tmp_path: Path) -> None:
    values = np.arange(40 * 100, dtype=np.uint16).reshape(40, 100)
    from_numpy(str(tmp_path / "ds"), values, codec="raw", chunk_bytes=16)
    same_bits(dense_content(str(tmp_path / "ds")), values)


def test_from_numpy_non_contiguous_and_empty(tmp_path: Path) -> None:
    base = np.arange(600, dtype=np.int32).reshape(20, 30)
    view = base[::2, ::3]
    from_numpy(str(tmp_path / "a"), view, chunk_bytes=100)
    same_bits(dense_content(str(tmp_path / "a")), np.ascontiguousarray(view))
    assert from_numpy(str(tmp_path / "b"), np.zeros((0, 5), np.float64)) == 0
    assert dense_content(str(tmp_path / "b")).shape == (0, 5)


def test_from_numpy_refuses_bad_input_before_touching_disk(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dimension"):
        from_numpy(str(tmp_path / "a"), np.float32(3.0))
    with pytest.raises(TypeError, match="not supported"):
        from_numpy(str(tmp_path / "a"), np.array(["x", "y"]))
    with pytest.raises(ValueError, match="1 MiB"):
        from_numpy(str(tmp_path / "a"), np.zeros((1, 2, 1 << 20), np.uint8))
    with pytest.raises(ValueError, match="dict_size"):
        from_numpy(str(tmp_path / "a"), np.zeros(4), dict_size=1 << 21)
    with pytest.raises(ValueError, match="chunk_bytes"):
        from_numpy(str(tmp_path / "a"), np.zeros(4), chunk_bytes=0)
    assert os.listdir(tmp_path) == []


def test_zstd_dict_needs_enough_records_to_train(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 7"):
        from_numpy(str(tmp_path / "a"), np.arange(12.0).reshape(3, 4), codec="zstd_dict")
    assert os.listdir(tmp_path) == []
    from_numpy(str(tmp_path / "b"), np.zeros((0, 4)), codec="zstd_dict")
    with DenseDataset(str(tmp_path / "b")) as ds:  # nothing to train on: created untrained
        assert ds.codec == "zstd_dict" and not ds.has_dict and len(ds) == 0
    from_iterator(str(tmp_path / "c"), [np.zeros(0, np.int8)] * 20 + [np.ones(3, np.int8)])
    with pytest.raises(ValueError, match="non-empty"):
        recode(str(tmp_path / "c"), str(tmp_path / "d"), codec="zstd_dict")
    assert not os.path.exists(tmp_path / "d") and leftovers(tmp_path) == []


# --- from_iterator ----------------------------------------------------------------------------


def test_from_iterator_generator_with_trailing_dims(tmp_path: Path) -> None:
    records = [np.full((n, 3), n, np.float64) for n in (2, 0, 5, 1)]

    def generate() -> Iterator[npt.NDArray[np.float64]]:
        yield from records

    assert from_iterator(str(tmp_path / "r"), generate(), chunk_bytes=50) == 4
    with RaggedDataset(str(tmp_path / "r")) as rs:
        assert rs.item_shape == (3,) and rs.dtype == np.float64
    for have, want in zip(ragged_content(str(tmp_path / "r")), records):
        same_bits(have, want)


def test_from_iterator_explicit_schema_and_lists(tmp_path: Path) -> None:
    from_iterator(str(tmp_path / "r"), [[1, 2, 3], [4]], dtype=np.int16, item_shape=())
    got = ragged_content(str(tmp_path / "r"))
    assert [r.tolist() for r in got] == [[1, 2, 3], [4]] and got[0].dtype == np.int16
    from_iterator(str(tmp_path / "empty"), [], dtype=np.uint8, item_shape=(2,))
    with RaggedDataset(str(tmp_path / "empty")) as rs:
        assert len(rs) == 0 and rs.item_shape == (2,)
    with pytest.raises(ValueError, match="dtype"):
        from_iterator(str(tmp_path / "nothing"), iter([]))
    assert not os.path.exists(tmp_path / "nothing")


def test_from_iterator_refuses_lossy_list_records(tmp_path: Path) -> None:
    """Lists were cast with np.asarray(r, dtype), which truncates 1.5 to 1 without a word."""
    for records, dtype in (
        ([[1.5, 2.0]], np.int32), ([[1, 2], [1.0, 2.7]], np.int64), ([[300]], np.uint8),
        ([[-1]], np.uint16), ([[2]], np.bool_), ([[1e300]], np.float32), ([[1 + 2j]], np.float64),
    ):
        with pytest.raises(ValueError, match=f"does not fit dtype {np.dtype(dtype)}"):
            from_iterator(str(tmp_path / "r"), records, dtype=dtype, item_shape=())
        assert os.listdir(tmp_path) == []
    # Values the dtype holds are taken (a float dtype may round).
    from_iterator(str(tmp_path / "ok"), [[1.0, 2.0], [True]], dtype=np.int8, item_shape=())
    assert [r.tolist() for r in ragged_content(str(tmp_path / "ok"))] == [[1, 2], [1]]
    from_iterator(str(tmp_path / "f"), [[0.1, 7], [float("nan")]], dtype=np.float32, item_shape=())
    got = ragged_content(str(tmp_path / "f"))
    assert got[0].tolist() == [np.float32(0.1), 7.0] and np.isnan(got[1][0])


def test_from_iterator_refuses_zstd_dict(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="recode"):
        from_iterator(str(tmp_path / "r"), [np.arange(3)], codec="zstd_dict")
    assert os.listdir(tmp_path) == []


def test_from_iterator_bad_record_leaves_no_store(tmp_path: Path) -> None:
    def generate() -> Iterator[npt.NDArray[Any]]:
        yield np.arange(3, dtype=np.int32)
        yield np.arange(3, dtype=np.int64)  # dtype changes mid-stream

    with pytest.raises(TypeError, match="dtype"):
        from_iterator(str(tmp_path / "r"), generate())
    assert os.listdir(tmp_path) == []


def test_bytes_paths_are_taken_as_the_os_functions_take_them(tmp_path: Path) -> None:
    """Bytes paths raised "Can't mix strings and bytes" (or a regex TypeError) from deep inside;
    they are now decoded as os.fsdecode does, so a name that is not UTF-8 works too."""
    from loaderx.zrecord import Zrecord

    base = os.fsencode(tmp_path)
    dense, ragged, copy = base + b"/d\xff", base + b"/r", base + b"/c"
    assert from_numpy(dense, np.arange(6, dtype=np.int32).reshape(3, 2)) == 3
    assert from_iterator(ragged, [np.arange(2), np.arange(3)]) == 2
    assert recode(dense, copy, codec="raw") == 3
    with DenseDataset(dense) as ds, RaggedDataset(ragged) as rs, DenseDataset(copy) as cs:
        assert ds.path == os.fsdecode(dense) and os.fsencode(ds.path) == dense
        assert ds[:].tolist() == cs[:].tolist() == [[0, 1], [2, 3], [4, 5]]
        assert [r.tolist() for r in rs[:]] == [[0, 1], [0, 1, 2]]
    assert sorted(os.listdir(base)) == [b"c", b"d\xff", b"r"]
    with Zrecord(base + b"/z", create=True) as store:
        assert store.path == os.fsdecode(base + b"/z")


# --- recode -----------------------------------------------------------------------------------


def similar(rng: np.random.Generator, count: int, size: int) -> npt.NDArray[np.uint8]:
    templates = rng.integers(0, 256, size=(3, size), dtype=np.uint8)
    values = templates[rng.integers(0, 3, size=count)].copy()
    values[:, :: size // 8] = rng.integers(0, 256, size=(count, 8), dtype=np.uint8)
    return values


@pytest.mark.parametrize("delete_first", [False, True])
def test_recode_chain_dense(tmp_path: Path, rng: np.random.Generator, delete_first: bool) -> None:
    values = similar(rng, 600, 96).reshape(600, 4, 24)
    from_numpy(str(tmp_path / "raw"), values, codec="raw")
    expected = values
    if delete_first:
        with DenseDataset(str(tmp_path / "raw")) as ds:
            ds.delete(np.arange(0, 600, 3))
            expected = ds[:]
        assert len(expected) == 400
    chain = [("raw", "zstd"), ("zstd", "zstd_dict"), ("zstd_dict", "raw2")]
    for src, dst in chain:
        codec = check_codec("raw" if dst == "raw2" else dst)
        count = recode(str(tmp_path / src), str(tmp_path / dst), codec=codec, dict_size=4096,
                       chunk_bytes=10_000)
        assert count == len(expected)
        schema = read_schema(str(tmp_path / dst))
        assert (schema.kind, schema.dtype, schema.item_shape) == ("dense", values.dtype, (4, 24))
        assert schema.codec == codec
        same_bits(dense_content(str(tmp_path / dst)), expected)
    with DenseDataset(str(tmp_path / "zstd_dict")) as ds:
        assert ds.has_dict and ds.dict_size == 4096
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("delete_first", [False, True])
def test_recode_chain_ragged(tmp_path: Path, rng: np.random.Generator, delete_first: bool) -> None:
    rows = similar(rng, 400, 64).view(np.uint16)  # (400, 32)
    records = [rows[i, : 4 + i % 28].copy() for i in range(400)]
    from_iterator(str(tmp_path / "zstd"), records)
    expected = records
    if delete_first:
        with RaggedDataset(str(tmp_path / "zstd")) as rs:
            rs.delete(np.arange(400) % 4 == 1)
            expected = [r.copy() for r in rs[:]]
        assert len(expected) == 300
    steps: list[tuple[str, str, Codec]] = [("zstd", "dict", "zstd_dict"), ("dict", "raw", "raw"),
                                           ("raw", "zstd2", "zstd")]
    for src, dst, codec in steps:
        assert recode(str(tmp_path / src), str(tmp_path / dst), codec=codec, dict_size="small",
                      chunk_bytes=500) == len(expected)
        assert read_schema(str(tmp_path / dst)).codec == codec
        got = ragged_content(str(tmp_path / dst))
        assert len(got) == len(expected)
        for have, want in zip(got, expected):
            same_bits(have, want)


def test_readme_codec_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            rng: np.random.Generator) -> None:
    monkeypatch.chdir(tmp_path)
    base = similar(rng, 300, 128).view(np.int32)
    token_generator = (row[: 8 + i % 24] for i, row in enumerate(base))

    from loaderx.converter import from_iterator, recode

    # data still arriving — stream it as plain zstd
    from_iterator('tokens', token_generator)

    # preprocessing complete, content final — settle it into a dictionary
    recode('tokens', 'tokens_dict', codec='zstd_dict')

    got = ragged_content('tokens_dict')
    assert len(got) == 300
    for i, have in enumerate(got):
        same_bits(have, base[i, : 8 + i % 24])
    assert read_schema('tokens_dict').codec == 'zstd_dict'


def test_recode_refuses_itself_and_missing_sources(tmp_path: Path) -> None:
    from_numpy(str(tmp_path / "a"), np.arange(10))
    with pytest.raises(ValueError, match="other than its source"):
        recode(str(tmp_path / "a"), str(tmp_path / "a"), overwrite=True)
    with pytest.raises(ValueError, match="other than its source"):
        recode(str(tmp_path / "a"), str(tmp_path / "." / "a"), overwrite=True)
    # The error names the missing source, not the schema file inside it.
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_bytes(b"x")
    for name in ("missing", "empty", "file"):
        source = str(tmp_path / name)
        with pytest.raises(FileNotFoundError, match=rf"^no loaderx dataset at '{source}' to recode$"):
            recode(source, str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()
    same_bits(dense_content(str(tmp_path / "a")), np.arange(10))


# --- overwrite rules --------------------------------------------------------------------------


def test_existing_destination_needs_overwrite(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    from_numpy(path, np.arange(5))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        from_numpy(path, np.arange(7))
    with pytest.raises(FileExistsError):
        from_iterator(path, [np.arange(2)])
    from_numpy(str(tmp_path / "other"), np.arange(3))
    with pytest.raises(FileExistsError):
        recode(str(tmp_path / "other"), path)
    same_bits(dense_content(path), np.arange(5))
    from_numpy(path, np.arange(7.0), overwrite=True)
    same_bits(dense_content(path), np.arange(7.0))
    recode(str(tmp_path / "other"), path, overwrite=True)
    same_bits(dense_content(path), np.arange(3))
    assert leftovers(tmp_path) == []


def test_overwrite_never_removes_a_foreign_folder(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(FileExistsError, match="not a loaderx store"):
        from_numpy(str(folder), np.arange(3), overwrite=True)
    assert (folder / "cat.jpg").read_bytes() == b"meow"
    plain = tmp_path / "notes.txt"
    plain.write_text("keep")
    with pytest.raises(FileExistsError, match="not a loaderx store"):
        from_iterator(str(plain), [np.arange(3)], overwrite=True)
    assert plain.read_text() == "keep"
    assert leftovers(tmp_path) == []


def test_overwrite_never_removes_foreign_files_inside_a_store(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    from_numpy(str(path), np.arange(4))
    (path / "README.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="README.txt"):
        from_numpy(str(path), np.arange(9), overwrite=True)
    assert (path / "README.txt").read_text() == "mine"
    same_bits(dense_content(str(path)), np.arange(4))


def test_a_shard_folder_of_a_sharded_dataset_is_never_a_destination(tmp_path: Path) -> None:
    # A store written over a listed shard disagreed with the manifest (another count or codec)
    # and the dataset no longer opened; one written at an unlisted shard name is removed by the
    # dataset's next commit.
    path = tmp_path / "ds"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))  # shards ".", shard-000001, shard-000002
    before = sorted(os.listdir(path))
    attempts: list[Callable[[], int]] = [
        lambda: recode(str(path), str(path / "shard-000001"), codec="raw", overwrite=True),
        lambda: from_numpy(str(path / "shard-000002") + os.sep, np.arange(5), overwrite=True),
        lambda: from_numpy(str(path / "shard-000009"), np.arange(5)),
        lambda: from_numpy(str(path / "shard-000002"), np.arange(5), overwrite=True, workers=2),
        lambda: from_iterator(str(path / "shard-000001"), [np.arange(3)], overwrite=True),
    ]
    for attempt in attempts:
        with pytest.raises(FileExistsError, match="is a shard folder of the sharded dataset"):
            attempt()
    assert sorted(os.listdir(path)) == before
    with DenseDataset(path, readonly=True) as ds:
        same_bits(ds[:], np.arange(25, dtype=np.int64))
    # The same names elsewhere are ordinary destinations.
    assert from_numpy(str(tmp_path / "shard-000001"), np.arange(3)) == 3


def test_empty_folder_is_free(tmp_path: Path) -> None:
    (tmp_path / "ds").mkdir()
    from_numpy(str(tmp_path / "ds"), np.arange(4))
    same_bits(dense_content(str(tmp_path / "ds")), np.arange(4))


def test_failed_overwrite_keeps_the_old_store(tmp_path: Path) -> None:
    path = str(tmp_path / "r")
    from_iterator(path, [np.arange(3, dtype=np.int8)])

    def generate() -> Iterator[Any]:
        yield np.arange(2, dtype=np.int8)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        from_iterator(path, generate(), overwrite=True)
    assert [r.tolist() for r in ragged_content(path)] == [[0, 1, 2]]
    assert leftovers(tmp_path) == []


# --- progress ---------------------------------------------------------------------------------


def test_progress_on_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from_numpy(str(tmp_path / "a"), np.zeros((50, 10)), chunk_bytes=800, progress=True)
    err = capsys.readouterr().err
    assert "50/50 records" in err and "MiB/s" in err and err.endswith("\n")
    from_numpy(str(tmp_path / "b"), np.zeros((50, 10)), progress=False)
    from_numpy(str(tmp_path / "c"), np.zeros((50, 10)))  # stderr is captured: not a terminal
    assert capsys.readouterr().err == ""


def test_progress_line_and_terminal_detection() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wanted(None, Terminal()) and not wanted(None, io.StringIO())
    assert not wanted(False, Terminal()) and wanted(True, io.StringIO())
    stream = Terminal()
    report = Progress("job", 200, None, stream)
    report.update(50, 5 << 20)
    assert "50/200 records (25.0%)" in report.line() and "ETA" in report.line()
    report.finish()
    assert stream.getvalue().startswith("\rjob: ") and stream.getvalue().endswith("\n")
    quiet = Progress("job", None, False, stream)
    quiet.update(3, 10)
    assert "3 records" in quiet.line()


# --- the README's examples, as written ----------------------------------------------------------


def write_inputs(rng: np.random.Generator) -> None:
    np.save("data.npy", rng.standard_normal((256, 4, 8)).astype(np.float32))
    np.save("label.npy", np.arange(256, dtype=np.int64) % 10)


def test_readme_converting_a_numpy_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    monkeypatch.chdir(tmp_path)
    write_inputs(rng)

    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    from_numpy('train_data', np.load('data.npy', mmap_mode='r'))
    from_numpy('train_label', np.load('label.npy', mmap_mode='r'))
    ds = DenseDataset('train_data')

    same_bits(ds[:], np.load('data.npy'))
    same_bits(DenseDataset('train_label')[:], np.load('label.npy'))

    # The README's dictionary line is an alternative to the first conversion (run as written it
    # would meet the store made above), so it runs in a folder of its own.
    (tmp_path / "alt").mkdir()
    monkeypatch.chdir(tmp_path / "alt")
    images = similar(rng, 500, 256).reshape(500, 16, 16)
    from_numpy('train_data', images, codec='zstd_dict')
    ds = DenseDataset('train_data')
    assert ds.codec == 'zstd_dict'
    same_bits(ds[:], images)


# The spec's Quick Start runs verbatim in tests/cli/test_demo.py (in a fresh interpreter).


def test_converted_stores_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        from_numpy(tmp_path / "dense", np.arange(50, dtype=np.int16))
        from_iterator(tmp_path / "ragged", [np.arange(3, dtype=np.int8)])
        recode(tmp_path / "dense", tmp_path / "recoded", codec="raw")
    finally:
        os.umask(old)
    for name in ("dense", "ragged", "recoded"):
        folder = tmp_path / name
        assert folder.stat().st_mode & 0o777 == 0o750, name
        for entry in folder.iterdir():
            assert entry.stat().st_mode & 0o777 == 0o640, entry


def test_recode_refuses_a_destination_that_holds_its_source(tmp_path: Path) -> None:
    """recode('big/shard-000001', 'big', overwrite=True) used to replace the whole sharded
    dataset with a recode of one of its shards, deleting the source and every other shard."""
    values = np.arange(250, dtype=np.int64)
    with DenseDataset(tmp_path / "big", dtype=np.int64, item_shape=(), codec="raw",
                      shard_records=100) as ds:
        ds.append(values)
        shard = str(ds.shard_stats()[1]["name"])
    before = {str(p): p.read_bytes() for p in sorted((tmp_path / "big").rglob("*")) if p.is_file()}
    os.symlink(tmp_path / "big", tmp_path / "link")
    for dst in (tmp_path / "big", tmp_path / "link", tmp_path / "big" / shard / ".."):
        with pytest.raises(ValueError, match=(
            rf"recode needs a destination that does not hold its source \('.*/big/{shard}' is "
            rf"inside '{re.escape(str(dst))}', and replacing that would delete it\)"
        )):
            recode(tmp_path / "big" / shard, dst, codec="zstd", overwrite=True)
    after = {str(p): p.read_bytes() for p in sorted((tmp_path / "big").rglob("*")) if p.is_file()}
    assert after == before
    with DenseDataset(tmp_path / "big") as ds:
        assert np.array_equal(ds[:], values)
    # A sibling, or a folder whose name merely starts like the source's, is fine.
    assert recode(tmp_path / "big" / shard, tmp_path / "big-shard", codec="zstd") == 100
    with DenseDataset(tmp_path / "big-shard") as ds:
        assert np.array_equal(ds[:], values[100:200])


def test_a_refused_from_iterator_leaves_the_callers_iterator_as_it_was(tmp_path: Path) -> None:
    """from_iterator took the first record before it checked the destination, dtype= and
    item_shape=: a refused call lost that record, and a retry with overwrite=True on the same
    iterator wrote the dataset without it."""
    records = [np.full((n, 2), n, dtype=np.int16) for n in (1, 2, 3)]
    path = tmp_path / "data"
    from_iterator(path, [records[0]])
    taken = iter(records)
    with pytest.raises(FileExistsError, match=re.escape(
            f"{str(path)!r} already exists; pass overwrite=True to replace the store there")):
        from_iterator(path, taken)
    for kwargs, error, message in (
        ({"dtype": "U3"}, TypeError, "dtype <U3 is not supported"),
        ({"dtype": np.int16, "item_shape": (-1,)}, ValueError,
         "item_shape must not hold negative sizes, got (-1,)"),
        ({"item_shape": (-1,)}, ValueError, "item_shape must not hold negative sizes, got (-1,)"),
    ):
        with pytest.raises(error, match=re.escape(message)):
            from_iterator(tmp_path / "new", taken, **kwargs)
        assert not (tmp_path / "new").exists()
    assert from_iterator(path, taken, overwrite=True) == 3
    with RaggedDataset(path) as ds:
        found = ds[:]
    assert len(found) == 3
    for got, want in zip(found, records):
        np.testing.assert_array_equal(got, want)


def test_a_refused_recode_creates_nothing(tmp_path: Path) -> None:
    """recode made its staging folder (and the destination's missing parent folders) before it
    found too few records for 'zstd_dict': it removed the staging folder, but the parents
    stayed. Both checks now come first; an existing destination is refused before the
    dictionary's sample is read."""
    from_numpy(tmp_path / "dense", np.arange(3, dtype=np.int64))
    from_iterator(tmp_path / "ragged", [np.arange(2)] * 3 + [np.arange(0)] * 20)
    before = sorted(os.listdir(tmp_path))
    for source, message in (
        ("dense", "'zstd_dict' trains a dictionary on the records, which needs at least 7 of "
                  "them (ideally hundreds); there are 3: use 'zstd'"),
        ("ragged", "'zstd_dict' needs at least 7 non-empty records to train a dictionary; a "
                   "strided sample of 23 records found 3: use 'zstd'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            recode(tmp_path / source, tmp_path / "new" / "sub" / "dst", codec="zstd_dict")
        assert sorted(os.listdir(tmp_path)) == before
    with pytest.raises(FileExistsError, match=re.escape(
            f"{str(tmp_path / 'dense')!r} already exists; pass overwrite=True")):
        recode(tmp_path / "ragged", tmp_path / "dense", codec="zstd_dict")
    assert recode(tmp_path / "ragged", tmp_path / "new" / "dst", codec="raw") == 23
    with RaggedDataset(tmp_path / "new" / "dst") as ds:
        found = ds[:]
    assert [len(r) for r in found] == [2] * 3 + [0] * 20
    assert all(np.array_equal(r, np.arange(2)) for r in found[:3])


def test_a_destination_that_is_no_store_is_named_so_without_overwrite(tmp_path: Path) -> None:
    # It was told "pass overwrite=True to replace the store there", which overwrite=True then
    # refused: a file or a folder of the user's is never removed.
    (tmp_path / "notes.txt").write_text("keep")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "a.txt").write_text("keep")
    for name in ("notes.txt", "mine"):
        for overwrite in (False, True):
            with pytest.raises(FileExistsError, match=re.escape(
                    f"{str(tmp_path / name)!r} exists and is not a loaderx store; refusing to "
                    "remove it even with overwrite=True")):
                from_numpy(tmp_path / name, np.arange(3), overwrite=overwrite)
    assert (tmp_path / "notes.txt").read_text() == "keep"
    assert os.listdir(tmp_path / "mine") == ["a.txt"]
