"""loaderx.ray on a local Ray instance (2 CPUs): the Datasink, its failure path, and the reader.

One Ray instance serves the whole module (starting one takes seconds). Rows come from
ray.data.range through a deterministic map, so every expected value is computed here again.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import ray
import ray.data
from ray.data.block import BlockAccessor
from ray.data.context import DataContext

import loaderx._data.column_append
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.ray import LoaderxDatasink, read_dataset, recover_appends, write_dataset
from small_disks import mounted_tmpfs
from loaderx.shards import SHARD_RECORDS_MAX, read_manifest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = 600


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    # Ray's workers cannot import this test module: ship its functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    context = DataContext.get_current()
    context.execution_options.preserve_order = True
    context.enable_progress_bars = False
    try:
        yield
    finally:
        ray.shutdown()


def image_of(i: int) -> npt.NDArray[np.uint8]:
    return ((np.arange(4 * 4 * 3).reshape(4, 4, 3) + 7 * i) % 251).astype(np.uint8)


def tokens_of(i: int) -> npt.NDArray[np.int32]:
    return (np.arange(i % 11, dtype=np.int32) * 3 + i).astype(np.int32)


def make_rows(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
    ids = [int(i) for i in batch["id"]]
    tokens = np.empty(len(ids), dtype=object)
    tokens[:] = [tokens_of(i) for i in ids]
    return {"image": np.stack([image_of(i) for i in ids]),
            "label": np.asarray(ids, dtype=np.int64), "tokens": tokens}


def fail_at(row: int) -> Any:
    def mapper(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        if row in set(int(i) for i in batch["id"]):
            raise ValueError(f"cannot decode row {row}")
        return make_rows(batch)
    return mapper


def source(first: int = 0, blocks: int = 4) -> ray.data.Dataset:
    return ray.data.range(ROWS, override_num_blocks=blocks).map_batches(make_rows).map_batches(
        lambda b: {**b, "label": b["label"] + first})


def hidden_beside(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path.parent) if n.startswith("."))


def tree_digest(folder: Path) -> dict[str, str]:
    """Small files by content, store files by size and mtime (they are sparse and huge)."""
    found: dict[str, str] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.stat(path)
            if info.st_size < (1 << 20):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
            else:
                found[os.path.relpath(path, folder)] = f"{info.st_size}:{info.st_mtime_ns}"
    return found


def check_columns(path: Path, labels: npt.NDArray[np.int64], ids: Sequence[int]) -> None:
    with DenseDataset(str(path / "image")) as images, DenseDataset(str(path / "label")) as lab, \
            RaggedDataset(str(path / "tokens")) as tokens:
        assert len(images) == len(lab) == len(tokens) == len(ids)
        np.testing.assert_array_equal(images[:], np.stack([image_of(i) for i in ids]))
        np.testing.assert_array_equal(lab[:], labels)
        for got, i in zip(tokens[:], ids, strict=True):
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, tokens_of(i))


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    web = tmp_path / "web"
    written = write_dataset(source(), str(web), columns=["image", "label", "tokens"],
                            ragged=["tokens"], codec="zstd", shard_records=100)
    assert written == ROWS
    assert sorted(os.listdir(web)) == ["image", "label", "tokens"]
    assert hidden_beside(web) == []
    manifest = read_manifest(str(web / "label"))
    assert manifest is not None and len(manifest.shards) >= 6  # 4 tasks, shards of <= 100
    assert all(e.records <= 100 for e in manifest.shards)
    check_columns(web, np.arange(ROWS, dtype=np.int64), range(ROWS))

    back = read_dataset(str(web), override_num_blocks=3)
    rows = back.take_all()
    assert [int(r["label"]) for r in rows] == list(range(ROWS))
    for r in rows[::37]:
        i = int(r["label"])
        np.testing.assert_array_equal(r["image"], image_of(i))
        np.testing.assert_array_equal(r["tokens"], tokens_of(i))


def test_columns_map_to_folders_and_append_adds_shards(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    write_dataset(source(), str(corpus), columns={"image": "x", "label": "y"})
    assert sorted(os.listdir(corpus)) == ["x", "y"]
    before = read_manifest(str(corpus / "y"))
    assert before is not None
    # Like from_numpy(append=True): the rows this call added, not the new total.
    assert write_dataset(source(first=ROWS), str(corpus), columns={"image": "x", "label": "y"},
                         append=True) == ROWS
    with DenseDataset(str(corpus / "y")) as y, DenseDataset(str(corpus / "x")) as x:
        np.testing.assert_array_equal(y[:], np.arange(2 * ROWS))
        np.testing.assert_array_equal(x[ROWS:], x[:ROWS])
    after = read_manifest(str(corpus / "y"))
    assert after is not None and after.names[: len(before.shards)] == before.names
    single = read_dataset(str(corpus / "y")).take_all()
    assert [int(r["y"]) for r in single] == list(range(2 * ROWS))


@pytest.mark.parametrize("value", [1, 0, "no", "", None, [True], np.int64(1)])
def test_append_refuses_what_is_no_bool(tmp_path: Path, value: Any) -> None:
    """Checked before any work, as the converters' append= is: append="no" was taken for True
    (and appended), append=0 for False."""
    corpus = tmp_path / "corpus"
    with pytest.raises(TypeError) as refused:
        write_dataset(source(), str(corpus), columns=["label"], append=value)
    assert str(refused.value) == f"append must be True or False, got {value!r}"
    with pytest.raises(TypeError) as refused:
        LoaderxDatasink(str(corpus), ["label"], append=value)
    assert str(refused.value) == f"append must be True or False, got {value!r}"
    assert not corpus.exists() and hidden_beside(corpus) == []


@pytest.mark.parametrize(("value", "error"), [(None, TypeError), (b"zstd", TypeError),
                                              ("gzip", ValueError)])
def test_a_codec_that_is_none_of_the_codecs_is_named(
    tmp_path: Path, value: Any, error: type[Exception]
) -> None:
    corpus = tmp_path / "corpus"
    with pytest.raises(error) as refused:
        write_dataset(source(), str(corpus), columns=["label"], codec=value)
    assert type(refused.value) is error
    assert str(refused.value) == f"codec must be one of 'raw', 'zstd', 'zstd_dict', got {value!r}"
    assert not corpus.exists() and hidden_beside(corpus) == []


def test_append_takes_numpy_bools(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    assert write_dataset(source(), str(corpus), columns=["label"], append=np.False_) == ROWS
    assert write_dataset(source(first=ROWS), str(corpus), columns=["label"],
                         append=np.True_) == ROWS
    with DenseDataset(str(corpus / "label")) as label:
        np.testing.assert_array_equal(label[:], np.arange(2 * ROWS))


def test_failing_task_leaves_a_new_destination_absent(tmp_path: Path) -> None:
    web = tmp_path / "web"
    ds = ray.data.range(ROWS, override_num_blocks=4).map_batches(fail_at(450))
    with pytest.raises(Exception, match="cannot decode row 450"):
        write_dataset(ds, str(web), columns=["image", "label"])
    assert not web.exists()
    assert hidden_beside(web) == []


def test_failing_task_leaves_an_appended_dataset_unchanged(tmp_path: Path) -> None:
    web = tmp_path / "web"
    write_dataset(source(), str(web), columns=["image", "label", "tokens"], ragged=["tokens"])
    before = tree_digest(web)
    ds = ray.data.range(ROWS, override_num_blocks=4).map_batches(fail_at(599))
    with pytest.raises(Exception, match="cannot decode row 599"):
        write_dataset(ds, str(web), columns=["image", "label", "tokens"], ragged=["tokens"],
                      append=True)
    assert tree_digest(web) == before
    assert hidden_beside(web) == []
    check_columns(web, np.arange(ROWS, dtype=np.int64), range(ROWS))


def test_bad_arguments_are_refused_before_writing(tmp_path: Path) -> None:
    web = tmp_path / "web"
    with pytest.raises(ValueError, match="plain relative name"):
        write_dataset(source(), str(web), columns={"image": "../elsewhere"})
    with pytest.raises(ValueError, match="same folder"):
        write_dataset(source(), str(web), columns={"image": "a", "label": "a"})
    for hidden in (".loaderx-appended-image", "a/.image"):  # an append would delete these
        with pytest.raises(ValueError, match="must not be hidden"):
            write_dataset(source(), str(web), columns={"image": hidden})
    with pytest.raises(ValueError, match="not written"):
        write_dataset(source(), str(web), columns=["image"], ragged=["tokens"])
    with pytest.raises(ValueError, match="zstd_dict"):
        write_dataset(source(), str(web), columns=["image"], codec="zstd_dict")
    web.mkdir()
    (web / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="append=True"):
        write_dataset(source(), str(web), columns=["image"])
    assert os.listdir(web) == ["notes.txt"]
    assert hidden_beside(web) == []


# --- an append lands in every column or in none ----------------------------------------------


def no_journal(path: Path) -> None:
    """No append journal inside path, and every column's manifest a regular file again."""
    assert [n for n in os.listdir(path) if n.startswith(".loaderx-append")] == []
    for name in os.listdir(path):
        assert not os.path.islink(path / name / "shards.msgpack"), name


@pytest.mark.parametrize("step", ["_plan_column", "_link_column"])
def test_a_failure_between_two_columns_changes_no_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    web = tmp_path / "web"
    columns = ["image", "label", "tokens"]
    write_dataset(source(), str(web), columns=columns, ragged=["tokens"], shard_records=100)
    before = tree_digest(web)
    original = getattr(loaderx._data.column_append, step)
    calls: list[int] = []

    def second_fails(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the first column went through this step, the second fails
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return original(*args)

    monkeypatch.setattr(loaderx._data.column_append, step, second_fails)
    with pytest.raises(OSError, match="injected"):
        write_dataset(source(first=ROWS), str(web), columns=columns, ragged=["tokens"],
                      append=True, shard_records=100)
    assert len(calls) == 2
    assert tree_digest(web) == before  # every column exactly as it was, byte for byte
    assert hidden_beside(web) == []
    no_journal(web)
    check_columns(web, np.arange(ROWS, dtype=np.int64), range(ROWS))

    monkeypatch.setattr(loaderx._data.column_append, step, original)
    assert write_dataset(source(first=ROWS), str(web), columns=columns, ragged=["tokens"],
                         append=True, shard_records=100) == ROWS
    no_journal(web)
    check_columns(web, np.arange(2 * ROWS, dtype=np.int64), list(range(ROWS)) * 2)


def test_append_refuses_columns_of_which_only_some_exist(tmp_path: Path) -> None:
    web = tmp_path / "web"
    write_dataset(source(), str(web), columns=["label"])
    before = tree_digest(web)
    with pytest.raises(ValueError, match="every column to exist already, or none"):
        write_dataset(source(), str(web), columns=["image", "label"], append=True)
    assert tree_digest(web) == before
    assert os.listdir(web) == ["label"]
    assert hidden_beside(web) == []


# Columns written without Ray (the sink's own write and on_write_complete, as Ray calls them),
# so that a loop can run many appends: under a full disk, and killed at every step.
SINK_COLUMNS = ["image", "label", "extra"]
OLD_ROWS = 100
NEW_ROWS = 50


def sink_values(column: str, first: int, count: int) -> npt.NDArray[Any]:
    ids = np.arange(first, first + count, dtype=np.int64)
    if column == "image":
        return np.stack([(ids * 3 + k) % 251 for k in range(16)], axis=1).astype(np.uint8)
    if column == "label":
        return ids
    return (ids / 2).astype(np.float32)


def sink_base(path: str, shard_records: int = 64) -> None:
    """OLD_ROWS rows per column: sharded datasets, or single stores with shard_records=0."""
    os.makedirs(path)
    for column in SINK_COLUMNS:
        from_numpy(os.path.join(path, column), sink_values(column, 0, OLD_ROWS), codec="raw",
                   shard_records=shard_records or SHARD_RECORDS_MAX)


def staged_sink(path: str, first: int) -> tuple[LoaderxDatasink, Any]:
    """A sink whose one write task has staged NEW_ROWS rows, and the result Ray would pass."""
    sink = LoaderxDatasink(path, columns=SINK_COLUMNS, codec="raw", append=True,
                           shard_records=64)
    sink.on_write_start()
    block = BlockAccessor.batch_to_block({c: sink_values(c, first, NEW_ROWS)
                                          for c in SINK_COLUMNS})
    written = sink.write([block], SimpleNamespace(task_idx=0))  # type: ignore[arg-type]
    return sink, SimpleNamespace(write_returns=[written])


def sink_rows(path: str) -> int:
    """How many rows every column holds; they must be the same rows, in the same order."""
    found = {}
    for column in SINK_COLUMNS:
        with DenseDataset(os.path.join(path, column), readonly=True) as ds:
            found[column] = ds[:]
    for rows in (OLD_ROWS, OLD_ROWS + NEW_ROWS, OLD_ROWS + 2 * NEW_ROWS):
        if all(np.array_equal(found[c], sink_values(c, 0, rows)) for c in SINK_COLUMNS):
            return rows
    raise AssertionError(f"the columns disagree: { {c: len(v) for c, v in found.items()} }")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "size=8m") as mount:
        yield mount


def test_an_append_on_a_full_disk_lands_in_every_column_or_none(small_disk: Path) -> None:
    outcomes = []
    for free_pages in range(12):  # the disk fills at a different step each time
        path = str(small_disk / "web")
        sink_base(path)
        sink, result = staged_sink(path, OLD_ROWS)
        ballast = small_disk / "ballast"
        fd = os.open(ballast, os.O_CREAT | os.O_WRONLY)
        found = os.statvfs(small_disk)
        os.posix_fallocate(fd, 0, max(1, found.f_bavail * found.f_frsize - free_pages * 4096))
        os.close(fd)
        try:
            sink.on_write_complete(result)
            outcomes.append("landed")
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            outcomes.append("refused")
        rows = sink_rows(path)
        assert rows == (OLD_ROWS + NEW_ROWS if outcomes[-1] == "landed" else OLD_ROWS)
        os.remove(ballast)
        recover_appends(path)  # a tidy-up that the full disk stopped (a warning said so)
        no_journal(Path(path))
        assert hidden_beside(Path(path)) == []
        later, result = staged_sink(path, rows)
        later.on_write_complete(result)
        assert sink_rows(path) == rows + NEW_ROWS
        shutil.rmtree(path)
    assert "refused" in outcomes and "landed" in outcomes, outcomes


KILL_LOOP = textwrap.dedent("""
    import json, os, shutil, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    import test_ray as t
    from loaderx.ray import recover_appends

    root, shard_records = sys.argv[1], int(sys.argv[3])
    seen, target = set(), 0
    while True:
        target += 1
        run = os.path.join(root, f"run{target}")
        path = os.path.join(run, "web")
        t.sink_base(path, shard_records)
        sink, result = t.staged_sink(path, t.OLD_ROWS)
        pid = os.fork()
        if pid == 0:  # the driver: killed just before its target-th change to the disk
            count = [0]
            def hooked(call):
                def run_it(*args, **kwargs):
                    count[0] += 1
                    if count[0] == target:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return call(*args, **kwargs)
                return run_it
            for name in ("rename", "replace", "symlink", "unlink", "rmdir", "mkdir"):
                setattr(os, name, hooked(getattr(os, name)))
            try:
                sink.on_write_complete(result)
            except BaseException:
                os._exit(3)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(status):
            assert os.WEXITSTATUS(status) == 0, status
            assert t.sink_rows(path) == t.OLD_ROWS + t.NEW_ROWS
            break
        rows = t.sink_rows(path)  # before any recovery, read as any reader would
        seen.add(rows)
        for name in os.listdir(run):  # the dead driver's staging folder, which users delete
            if name.startswith("."):
                shutil.rmtree(os.path.join(run, name))
        if target % 2:
            recover_appends(path)
            assert t.sink_rows(path) == rows
            t.no_journal(Path(path))
        later, result = t.staged_sink(path, rows)  # recovers first when not done above
        later.on_write_complete(result)
        assert t.sink_rows(path) == rows + t.NEW_ROWS
        t.no_journal(Path(path))
        shutil.rmtree(run)
    print(json.dumps({"kills": target - 1, "seen": sorted(seen)}))
""")


@pytest.mark.parametrize("shard_records", [64, 0], ids=["sharded", "single-store"])
def test_a_driver_killed_at_any_step_leaves_every_column_old_or_every_column_new(
    tmp_path: Path, shard_records: int
) -> None:
    # Its own process: the loop forks a driver per kill, which wants a parent without Ray's
    # threads.
    # The child imports this module, which imports tests/small_disks.py.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", KILL_LOOP, str(tmp_path), os.path.dirname(__file__),
         str(shard_records)],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["seen"] == [OLD_ROWS, OLD_ROWS + NEW_ROWS], result
    assert result["kills"] > 20, result


def test_append_into_a_single_store_column_a_handle_writes_is_refused(tmp_path: Path) -> None:
    """Columns that are still single stores (from_numpy): Ray's append seals each one, so while
    a handle appends to one of them the append refuses with StoreLockedError and changes
    nothing; once that handle closes, the same append lands in every column."""
    from loaderx.errors import StoreLockedError

    web = tmp_path / "web"
    ids = list(range(40))
    from_numpy(str(web / "image"), np.stack([image_of(i) for i in ids]))
    from_numpy(str(web / "label"), np.asarray(ids, dtype=np.int64))
    assert read_manifest(str(web / "label")) is None
    with DenseDataset(str(web / "label")) as writer:
        writer.append(np.asarray([40], dtype=np.int64))
        with DenseDataset(str(web / "image")) as images:
            images.append(image_of(40)[None])
        before = tree_digest(web)
        with pytest.raises(StoreLockedError):
            write_dataset(source(first=41), str(web), columns=["image", "label"], append=True)
        # Only the empty commit-lock files the refused append took are new.
        after = tree_digest(web)
        assert {k: v for k, v in after.items() if not k.endswith("/shards.lock")} == before
        assert hidden_beside(web / "label") == []
        writer.append(np.asarray([-1], dtype=np.int64))  # still its writer: nothing was sealed
    with DenseDataset(str(web / "label")) as lab:
        lab.delete([41])  # the -1
    assert write_dataset(source(first=41), str(web), columns=["image", "label"],
                         append=True) == ROWS
    with DenseDataset(str(web / "label")) as lab, DenseDataset(str(web / "image")) as images:
        np.testing.assert_array_equal(lab[:], np.arange(41 + ROWS))
        np.testing.assert_array_equal(images[:41], np.stack([image_of(i) for i in range(41)]))
        np.testing.assert_array_equal(images[41:], np.stack([image_of(i) for i in range(ROWS)]))
    assert read_manifest(str(web / "label")) is not None


def test_read_dataset_reads_a_read_only_file_system(tmp_path: Path) -> None:
    """Ray reads open every column read-only, so a dataset on a read-only mount reads in full
    (they used to open it writable and fail with PermissionError)."""
    mount = tmp_path / "ro"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        from_numpy(str(mount / "data" / "x"), np.arange(100, dtype=np.int64) * 5)
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        rows = read_dataset(str(mount / "data")).take_all()
        assert [int(r["x"]) for r in rows] == list(range(0, 500, 5))
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_ragged_reads_size_their_blocks_by_records(tmp_path: Path) -> None:
    """A ragged column's schema gives one row of a record; a read task's blocks and Ray's
    estimate use the records' mean size instead. 40 records of 1 MiB were estimated at 40
    bytes and read as one 40 MiB block; now at 40 MiB, in blocks of at most 32 MiB, and every
    record reads back."""
    from loaderx.converter import from_iterator
    from loaderx.ray import LoaderxDatasource

    path = str(tmp_path / "audio")
    from_iterator(path, (np.full(1 << 20, i, np.uint8) for i in range(40)), codec="raw")
    source = LoaderxDatasource(path)
    assert source.estimate_inmemory_data_size() == 40 << 20
    (task,) = source.get_read_tasks(1)
    blocks = [BlockAccessor.for_block(block) for block in task()]
    assert [block.num_rows() for block in blocks] == [32, 8]
    records = [record for block in blocks for record in block.to_numpy("audio")]
    assert [(int(r[0]), len(r)) for r in records] == [(i, 1 << 20) for i in range(40)]


def test_read_dataset_gives_non_native_byte_order_columns_their_values(tmp_path: Path) -> None:
    """Ray's tensor columns ignore the byte order: a '>f4' dense column of (N, 2) samples and
    a '>i4' ragged column read back as little-endian garbage (2 as 3.2e-44, 1 as 16777216).
    The reader now hands Ray native arrays of the same values."""
    data = tmp_path / "data"
    dense = (np.arange(20, dtype=np.float32).reshape(10, 2) - 3.5).astype(">f4")
    from_numpy(str(data / "dense"), dense)
    rows = [(np.arange(i, dtype=np.int32) * 7 - 1).astype(">i4") for i in range(10)]
    with RaggedDataset(str(data / "ragged"), np.dtype(">i4"), ()) as ragged:
        ragged.append(rows)
    back = read_dataset(str(data), override_num_blocks=3).take_all()
    assert len(back) == 10
    for got, want, row in zip(back, dense, rows, strict=True):
        assert got["dense"].dtype == np.float32 and got["ragged"].dtype == np.int32
        np.testing.assert_array_equal(got["dense"], want)
        np.testing.assert_array_equal(got["ragged"], row)


def list_table(rows: int) -> Any:
    """Arrow list columns: a fixed_size_list, a list whose rows are all 2 long, a fixed list of
    fixed lists, and a variable list of pairs."""
    import pyarrow as pa  # type: ignore[import-untyped]

    return pa.table({
        "fixed": pa.array([[i, i + 1, i + 2] for i in range(rows)], type=pa.list_(pa.int32(), 3)),
        "pairs": pa.array([[i, 2 * i] for i in range(rows)], type=pa.list_(pa.int64())),
        "grid": pa.array([[[i, 1], [2, -i]] for i in range(rows)],
                         type=pa.list_(pa.list_(pa.int16(), 2), 2)),
        "points": pa.array([[[i, j] for j in range(i % 3 + 1)] for i in range(rows)],
                           type=pa.list_(pa.list_(pa.float32(), 2))),
    })


def test_list_columns_round_trip_as_dense_and_ragged_datasets(tmp_path: Path) -> None:
    """Ray hands an Arrow list column to a write task as an object array of per-row arrays
    (of arrays, when nested). Dense list columns were refused as "dtype object is not
    supported"; rows of one shape now stack into fixed-shape samples, and nested ragged rows
    into one array per record."""
    web = tmp_path / "web"
    rows = 23
    ds = ray.data.from_arrow(list_table(rows)).repartition(3)
    assert write_dataset(ds, str(web), ragged=["points"], shard_records=10) == rows
    with DenseDataset(str(web / "fixed")) as fixed, DenseDataset(str(web / "pairs")) as pairs, \
            DenseDataset(str(web / "grid")) as grid, RaggedDataset(str(web / "points")) as points:
        assert fixed.dtype == np.int32 and fixed.item_shape == (3,)
        np.testing.assert_array_equal(fixed[:], [[i, i + 1, i + 2] for i in range(rows)])
        assert pairs.dtype == np.int64 and pairs.item_shape == (2,)
        np.testing.assert_array_equal(pairs[:], [[i, 2 * i] for i in range(rows)])
        assert grid.dtype == np.int16 and grid.item_shape == (2, 2)
        np.testing.assert_array_equal(grid[:], [[[i, 1], [2, -i]] for i in range(rows)])
        assert points.dtype == np.float32 and points.item_shape == (2,)
        for i, got in enumerate(points[:]):
            np.testing.assert_array_equal(got, [[i, j] for j in range(i % 3 + 1)])
    back = read_dataset(str(web), override_num_blocks=4).take_all()
    assert [r["fixed"].tolist() for r in back] == [[i, i + 1, i + 2] for i in range(rows)]
    assert [r["grid"].tolist() for r in back] == [[[i, 1], [2, -i]] for i in range(rows)]
    assert [r["points"].tolist() for r in back] == [
        [[i, j] for j in range(i % 3 + 1)] for i in range(rows)]


def test_a_dense_list_column_of_several_lengths_names_ragged(tmp_path: Path) -> None:
    import pyarrow as pa

    web = tmp_path / "web"
    ds = ray.data.from_arrow(pa.table({"v": pa.array([[1, 2], [3], [4, 5]])}))
    with pytest.raises(ValueError, match=r"column 'v'.*ragged=\['v'\]"):
        write_dataset(ds, str(web))
    assert not web.exists()
    assert hidden_beside(web) == []


def test_an_empty_dataset_is_refused_with_or_without_columns(tmp_path: Path) -> None:
    """A Ray dataset with no rows has no schema, so ds.columns() is None: columns=None used to
    fail with "TypeError: 'NoneType' object is not iterable". Both ways now say why."""
    web = tmp_path / "web"
    for columns in (None, ["id"]):
        with pytest.raises(ValueError, match="no rows"):
            write_dataset(ray.data.range(0), str(web), columns=columns)
        assert not web.exists()
        assert hidden_beside(web) == []


def test_read_dataset_finds_the_nested_column_folders_write_dataset_made(tmp_path: Path) -> None:
    """write_dataset takes folders such as "parts/label"; read_dataset(path) listed only the
    datasets directly under path and dropped such a column without a word."""
    web = tmp_path / "web"
    ds = ray.data.range(9).map_batches(lambda b: {"a": b["id"], "b": b["id"] * 10})
    write_dataset(ds, str(web), columns={"a": "x", "b": "parts/label"})
    (web / "parts" / "notes").mkdir()  # a folder holding no dataset is no column
    back = read_dataset(str(web), override_num_blocks=2)
    assert back.columns() == ["parts/label", "x"]
    rows = back.take_all()
    assert [int(r["x"]) for r in rows] == list(range(9))
    assert [int(r["parts/label"]) for r in rows] == [10 * i for i in range(9)]
