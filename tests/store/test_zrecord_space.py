"""Disk space: files grow as appends need them, a full disk is a clean error that changes nothing,
files cut short are corrupt (never a crash), and opening beside a busy writer sees a healthy store."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx._store.schema import Codec
from loaderx.zrecord import RECORD_COUNT_MAX, Zrecord
from small_disks import leave_free, mounted_tmpfs

MIB = 1 << 20
# A chunk file grows in steps of an eighth of its size, from 1 MiB up to 64 MiB, while a writer
# appends; at rest (the writer synced or closed) it is its data rounded up to a page
# (zig/src/files/chunk.zig).
GROWTH_MIN = MIB
PAGE = os.sysconf("SC_PAGE_SIZE")


def resting(data_end: int) -> int:
    """A chunk file's length at rest: its data rounded up to a page."""
    return -(-data_end // PAGE) * PAGE


def apparent_size(folder: str | Path) -> int:
    """What cp, tar or an upload would copy: the files' lengths, holes counted."""
    return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file())


def file_sizes(folder: str | Path) -> dict[str, tuple[int, int]]:
    """name -> (apparent size, allocated bytes) of each file in folder."""
    return {entry.name: (entry.stat().st_size, entry.stat().st_blocks * 512)
            for entry in os.scandir(folder) if entry.is_file()}


def rows_of(first: int, count: int, width: int) -> np.ndarray:
    """Records of `width` uint64 words: the record's number, then number-dependent small values."""
    numbers = np.arange(first, first + count, dtype=np.uint64)[:, None]
    rows = (numbers * np.uint64(2654435761) + np.arange(width, dtype=np.uint64)[None, :]) % np.uint64(13)
    rows[:, 0] = numbers[:, 0]
    return rows


def read_all(store: Zrecord, width: int) -> np.ndarray:
    out = np.empty((len(store), width), dtype=np.uint64)
    store.gather_into(np.arange(len(store), dtype=np.int64), out, width * 8)
    return out


# --- files that copy small ---------------------------------------------------------------------------


@pytest.mark.parametrize("records", [1, 10, 1000])
def test_a_small_store_is_small_on_disk(store_path: str, records: int) -> None:
    """While the writer appends, the chunk has room for more (a growth step); once it closes,
    every file's length and allocated blocks are within a page of its data."""
    with Zrecord(store_path, codec="raw", create=True) as store:
        store.append_fixed(rows_of(0, records, 8), 64)
        assert os.path.getsize(os.path.join(store_path, "0.zr")) >= GROWTH_MIN
    stored = records * 64
    data = {"0.zr": stored, "meta.zr": 16 + records * 16, "sums.zr": 16 + records * 4}
    sizes = file_sizes(store_path)
    assert sizes["0.zr"][0] == resting(stored)
    for name, (apparent, allocated) in sizes.items():
        assert data.get(name, apparent) <= apparent < data.get(name, apparent) + PAGE, name
        assert allocated <= resting(apparent), name
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 8), rows_of(0, records, 8))


def test_an_80_byte_dataset_takes_a_page_at_rest(tmp_path: Path) -> None:
    """The issue's example: an 80-byte dataset took 1 MiB on disk, and so did every shard."""
    from loaderx.converter import from_numpy

    from_numpy(tmp_path / "small", np.arange(10, dtype=np.int64), codec="raw")
    sizes = file_sizes(tmp_path / "small")
    assert sizes["0.zr"] == (PAGE, PAGE)
    assert sum(allocated for _, allocated in sizes.values()) <= 4 * PAGE
    with DenseDataset(tmp_path / "small") as ds:
        assert ds[:].tolist() == list(range(10))


def test_sync_trims_and_the_next_append_grows_again(store_path: str) -> None:
    with Zrecord(store_path, codec="raw", create=True) as store:
        store.append_fixed(rows_of(0, 10, 8), 64)
        store.sync()
        assert file_sizes(store_path)["0.zr"] == (PAGE, PAGE)
        store.append_fixed(rows_of(10, 200, 8), 64)  # past the page: a growth step
        assert os.path.getsize(os.path.join(store_path, "0.zr")) >= GROWTH_MIN
        assert np.array_equal(read_all(store, 8), rows_of(0, 210, 8))
        store.sync()
        assert os.path.getsize(os.path.join(store_path, "0.zr")) == resting(210 * 64)
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 8), rows_of(0, 210, 8))


def test_a_larger_store_grows_by_an_eighth(store_path: str) -> None:
    with Zrecord(store_path, codec="raw", create=True) as store:
        for first in range(0, 40 * 1024, 1024):  # 40 MiB in batches of 1 MiB
            store.append_fixed(rows_of(first, 1024, 128), 1024)
        stored = store.stats()["chunk_bytes"]
        chunk = os.path.getsize(os.path.join(store_path, "0.zr"))
    assert stored == 40 * MIB
    assert stored <= chunk <= stored + stored // 8 + MIB
    assert os.path.getsize(os.path.join(store_path, "0.zr")) == stored  # trimmed at close
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 128), rows_of(0, 40 * 1024, 128))


def test_compaction_trims_the_tail_chunk(store_path: str) -> None:
    with Zrecord(store_path, codec="raw", create=True) as store:
        store.append_fixed(rows_of(0, 3000, 128), 1024)
        store.delete(np.arange(0, 3000, 2))
        store.compact()
        assert store.stats()["chunk_bytes"] == 1500 * 1024
        expected = read_all(store, 128)
    assert os.path.getsize(os.path.join(store_path, "0.zr")) == 1500 * 1024
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 128), expected)
        store.append_fixed(rows_of(5000, 10, 128), 1024)
        assert np.array_equal(read_all(store, 128)[-10:], rows_of(5000, 10, 128))


def test_stores_with_full_size_sparse_files_keep_working(store_path: str) -> None:
    # Stores written before files grew on demand have a 4 GiB 0.zr and a 256 MiB meta.zr.
    with Zrecord(store_path, codec="zstd", create=True) as store:
        store.append_fixed(rows_of(0, 100, 64), 512)
    os.truncate(os.path.join(store_path, "0.zr"), 1 << 32)
    os.truncate(os.path.join(store_path, "meta.zr"), 16 + 16 * RECORD_COUNT_MAX)
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 64), rows_of(0, 100, 64))
        store.append_fixed(rows_of(100, 50, 64), 512)
        assert np.array_equal(read_all(store, 64), rows_of(0, 150, 64))
        chunk_bytes = store.stats()["chunk_bytes"]
    # The writer that appended trimmed the old full-size file to its data.
    assert os.path.getsize(os.path.join(store_path, "0.zr")) == resting(chunk_bytes)
    with Zrecord(store_path, create=False) as store:
        assert np.array_equal(read_all(store, 64), rows_of(0, 150, 64))


TRIM_READER = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from loaderx.zrecord import Zrecord
    path, stop = sys.argv[1], sys.argv[2]
    passes = 0
    with Zrecord(path, create=False, readonly=True) as store:
        print("open", flush=True)
        while not os.path.exists(stop) or passes < 3:
            count = len(store)
            out = np.empty((count, 8), dtype=np.uint64)
            store.gather_into(np.arange(count, dtype=np.int64), out, 64)
            assert (out[:, 0] == np.arange(count)).all() and (out[:, 1] == out[:, 0] * 3).all()
            passes += 1
    print("passes", passes, flush=True)
    """
)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_a_reader_process_reads_on_while_the_writer_trims(tmp_path: Path, codec: Codec) -> None:
    """Another process has the chunk mapped and gathers every record in a loop while the writer
    appends, syncs (trimming the chunk each time) and closes: it never faults and always
    reads exactly what was written (the trim only cuts past every published record)."""
    path, stop = tmp_path / "store", tmp_path / "stop"

    def rows(first: int, count: int) -> np.ndarray:
        made = np.zeros((count, 8), dtype=np.uint64)
        made[:, 0] = np.arange(first, first + count, dtype=np.uint64)
        made[:, 1] = made[:, 0] * 3
        return made

    store = Zrecord(path, codec=codec, create=True)
    store.append_fixed(rows(0, 100), 64)
    store.sync()
    reader = subprocess.Popen([sys.executable, "-c", TRIM_READER, str(path), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "open\n"
        for k in range(60):
            store.append_fixed(rows(len(store), 1 + 97 * k % 300), 64)
            store.sync()
            assert os.path.getsize(path / "0.zr") == resting(store.stats()["chunk_bytes"])
        store.close()
        stop.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
        store.close()
    assert reader.returncode == 0, f"reader ended with {reader.returncode}: {err[-3000:]}"
    assert out.startswith("passes ")


# --- files cut short ---------------------------------------------------------------------------------

READER = textwrap.dedent(
    """
    import os, sys
    from loaderx.errors import CorruptStoreError
    from loaderx.zrecord import Zrecord
    path, cut, when = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    chunk = os.path.join(path, "0.zr")
    try:
        if when == "before-open":
            os.truncate(chunk, cut)
        store = Zrecord(path, create=False)
        if when == "after-open":
            os.truncate(chunk, cut)
        store.gather(len(store) - 1)  # the first byte this process touches is past the cut
        store.gather(slice(None))
    except CorruptStoreError as exc:
        print(exc)
        sys.exit(3)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
@pytest.mark.parametrize("when", ["before-open", "after-open"])
def test_a_truncated_chunk_is_corrupt_never_a_signal(tmp_path: Path, codec: Codec, when: str) -> None:
    original = tmp_path / "original"
    with Zrecord(original, codec=codec, create=True) as store:
        store.append([bytes([i]) * 5000 + os.urandom(3000) for i in range(20)])
        stored = store.stats()["chunk_bytes"]
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    # Cut the last record in half, well inside the last page it uses.
    result = subprocess.run(
        [sys.executable, "-c", READER, str(copy), str(stored - 100), when],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode >= 0, f"killed by signal {-result.returncode}: {result.stderr}"
    assert result.returncode == 3, result.stdout + result.stderr
    assert "0.zr" in result.stdout and "corrupt" in result.stdout
    with Zrecord(original, create=False) as store:  # the original is untouched
        assert len(store) == 20


# --- a full disk ---------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "size=16m") as mount:
        yield mount


@pytest.fixture
def few_inodes(tmp_path: Path) -> Iterator[Path]:
    """Room for bytes but only 64 inodes (files and folders)."""
    with mounted_tmpfs(tmp_path / "inodes", "size=16m,nr_inodes=64") as mount:
        yield mount


def fill_inodes(folder: Path) -> list[Path]:
    """Creates empty files in `folder` until the file system has no inode left."""
    made: list[Path] = []
    while True:
        try:
            (folder / str(len(made))).touch()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            return made
        made.append(folder / str(len(made)))


def test_a_lock_file_on_a_disk_out_of_inodes_is_enospc(few_inodes: Path) -> None:
    # Each of the three lock files fails in turn as one more inode is freed: each is a full
    # disk, OSError(ENOSPC) naming the file (it was an OSError without errno, "NoSpaceLeft",
    # which callers could not tell from other I/O errors). A sharded append met it at its new
    # shard's lock files.
    path = few_inodes / "store"
    path.mkdir()
    made = fill_inodes(few_inodes)
    for name in ["open.lock", "maintenance.lock", "writer.lock"]:
        with pytest.raises(OSError) as full:
            Zrecord(path, codec="raw", create=True).close()
        assert_enospc(full.value)
        assert name in str(full.value)
        made.pop().unlink()
    for filler in made:
        filler.unlink()
    with Zrecord(path, codec="raw", create=True) as store:
        store.append_fixed(rows_of(0, 10, 1), 8)
        assert np.array_equal(read_all(store, 1), rows_of(0, 10, 1))


def fill(path: Path) -> None:
    """Writes to `path` until the file system is full."""
    block = b"\xa5" * 4096
    with open(path, "wb", buffering=0) as filler:
        while True:
            try:
                filler.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


def assert_enospc(exc: OSError) -> None:
    assert exc.errno == errno.ENOSPC, exc
    assert "ENOSPC" in str(exc)


@pytest.mark.parametrize(("codec", "width", "batch"), [("raw", 1, 4096), ("zstd", 512, 64)])
def test_appending_until_the_disk_is_full(small_disk: Path, codec: Codec, width: int, batch: int) -> None:
    # raw: 8-byte records (the table fills the disk as fast as the data); zstd: 4 KiB records.
    (small_disk / "ballast").write_bytes(b"\x00" * (2 * MIB))
    path = small_disk / "store"
    store = Zrecord(path, codec=codec, create=True)
    try:
        refused = None
        for _ in range(100_000):
            first = len(store)
            try:
                store.append_fixed(rows_of(first, batch, width), width * 8)
            except OSError as exc:
                refused = exc
                break
        assert refused is not None, "the 16 MiB disk never filled up"
        assert_enospc(refused)
        count = len(store)
        assert count > 0 and count % batch == 0
        assert np.array_equal(read_all(store, width), rows_of(0, count, width))
        with pytest.raises(OSError) as again:  # still full: refused again, still cleanly
            store.append_fixed(rows_of(count, batch, width), width * 8)
        assert_enospc(again.value)
        assert len(store) == count
    finally:
        store.close()
    with Zrecord(path, create=False) as store:
        assert len(store) == count
        assert np.array_equal(read_all(store, width), rows_of(0, count, width))
        (small_disk / "ballast").unlink()
        assert store.append_fixed(rows_of(count, batch, width), width * 8) == count
        assert np.array_equal(read_all(store, width), rows_of(0, count + batch, width))


def test_a_full_disk_at_a_new_table_page(small_disk: Path) -> None:
    # The chunk has room (its first growth step), but the table needs a new page of meta.zr:
    # the case that used to kill the process with SIGBUS on tmpfs. sums.zr, written first, keeps
    # room in its first page (16 + 1000 * 4 bytes); meta.zr's table needs new ones.
    path = small_disk / "store"
    with Zrecord(path, codec="raw", create=True) as store:
        store.append_fixed(rows_of(0, 100, 1), 8)
        fill(small_disk / "filler")
        with pytest.raises(OSError) as full:
            store.append_fixed(rows_of(100, 900, 1), 8)
        assert_enospc(full.value)
        assert "meta.zr" in str(full.value)
        assert len(store) == 100
        assert np.array_equal(read_all(store, 1), rows_of(0, 100, 1))
        (small_disk / "filler").unlink()
        assert store.append_fixed(rows_of(100, 900, 1), 8) == 100
        assert np.array_equal(read_all(store, 1), rows_of(0, 1000, 1))


def test_a_sharded_append_on_a_full_disk_adds_nothing(small_disk: Path) -> None:
    """A batch that spans the tail and two new shards: the disk fills while the new shards are
    written, and the dataset keeps exactly its old records and shards."""
    from loaderx.dataset import DenseDataset
    from loaderx._store.layout import manifest_path

    path = small_disk / "sharded"
    with DenseDataset(path, dtype=np.uint64, item_shape=(64,), codec="raw",
                      shard_records=2000) as ds:
        ds.append(rows_of(0, 2500, 64))
        before = Path(manifest_path(str(path))).read_bytes()
        listing = sorted(os.listdir(path))
        stat = os.statvfs(small_disk)
        free = stat.f_bavail * stat.f_frsize  # leave 1 MiB: the batch needs 2 MB
        (small_disk / "ballast").write_bytes(b"\x00" * (free - MIB))
        with pytest.raises(OSError) as full:
            ds.append(rows_of(2500, 4000, 64))  # 500 into the tail, then 2000 + 1500 staged
        assert_enospc(full.value)
        assert len(ds) == 2500
        assert np.array_equal(ds[:], rows_of(0, 2500, 64))
        assert Path(manifest_path(str(path))).read_bytes() == before
        assert sorted(os.listdir(path)) == listing  # no staged shard left behind
        (small_disk / "ballast").unlink()
        assert ds.append(rows_of(2500, 4000, 64)) == 2500
        assert np.array_equal(ds[:], rows_of(0, 6500, 64))
    with DenseDataset(path, shard_records=2000) as reopened:
        assert np.array_equal(reopened[:], rows_of(0, 6500, 64))
        assert [s["records"] for s in reopened.shard_stats()] == [2000, 2000, 2000, 500]


def _without_locks(folder: Path) -> list[str]:
    """A folder's names, less the empty lock files that any open may create."""
    return sorted(name for name in os.listdir(folder) if not name.endswith(".lock"))


def test_a_delete_over_several_shards_on_a_full_disk_is_all_or_nothing(small_disk: Path) -> None:
    """Swept over the free space: a delete across three shards either deletes from every shard
    or raises ENOSPC with every shard, the manifest and the folder as they were. Some of the
    refusals come from the native call itself, after a shard's redo log was written (every log
    is written before any table changes), which before left the earlier shards deleted."""
    from loaderx._store.layout import manifest_path

    count, capacity = 6000, 2000
    data = np.arange(count, dtype=np.int64) * 7
    # Few from the first shard, many from the second: the second shard's redo log needs pages
    # the first one's freed pages do not cover.
    rng = np.random.default_rng(5)
    targets = np.sort(np.concatenate([rng.choice(capacity, 10, replace=False) + k * capacity
                                      if k == 0 else
                                      rng.choice(capacity, 1500 - 1000 * (k - 1), replace=False)
                                      + k * capacity for k in range(3)]))
    expected = np.delete(data, targets)
    outcomes = {"done": 0, "refused": 0, "refused by the native call": 0}
    for free in range(0, 160 * 1024, 4096):
        path = small_disk / "sharded"
        shutil.rmtree(path, ignore_errors=True)
        with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=capacity) as ds:
            ds.append(data)
        manifest = Path(manifest_path(str(path))).read_bytes()
        listing = _without_locks(path)
        filler = leave_free(small_disk, free)
        try:
            with DenseDataset(path, shard_records=capacity) as ds:
                try:
                    ds.delete(targets)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc  # Python's own writes or the native call
                    outcomes["refused"] += 1
                    if "redo.zr" in str(exc):
                        assert_enospc(exc)
                        outcomes["refused by the native call"] += 1
                    assert ds[:].tobytes() == data.tobytes()
                    assert Path(manifest_path(str(path))).read_bytes() == manifest
                    assert _without_locks(path) == listing
                    for shard in listing:
                        assert not (path / shard / "redo.zr").exists()
                else:
                    outcomes["done"] += 1
                    assert np.sort(ds[:]).tobytes() == expected.tobytes()
        finally:
            filler.unlink()
        with DenseDataset(path, readonly=True) as reader:
            assert np.sort(reader[:]).tobytes() in (data.tobytes(), expected.tobytes())
    assert outcomes["done"] > 0 and outcomes["refused by the native call"] > 0, outcomes


# --- opening beside a writer ---------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from loaderx.zrecord import Zrecord
    path, stop = sys.argv[1], sys.argv[2]
    with Zrecord(path, codec=sys.argv[3]) as store:
        k = 0
        # Bounded: at most 4 Mi records of 64 bytes (about 300 MB with the table), so a slow
        # reader can never let the writer fill the disk or the store; then it waits for stop.
        while not os.path.exists(stop) and len(store) < (1 << 22):
            count = 1 + k % 37
            rows = np.full((count, 8), len(store), dtype=np.uint64) + np.arange(8, dtype=np.uint64)
            rows[:, 0] = np.arange(len(store), len(store) + count, dtype=np.uint64)
            store.append_fixed(rows, 64)
            k += 1
        while not os.path.exists(stop):
            time.sleep(0.01)
    """
)


@pytest.mark.parametrize("codec", ["raw", "zstd"])
def test_opening_while_another_process_appends(tmp_path: Path, codec: Codec) -> None:
    path = tmp_path / "store"
    stop = tmp_path / "stop"
    Zrecord(path, codec=codec, create=True).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(stop), codec])
    try:
        for _ in range(6000):  # wait (bounded) until it is appending
            with Zrecord(path, create=False) as store:
                if len(store) > 0:
                    break
            time.sleep(0.01)
        previous = 0
        for _ in range(300):
            with Zrecord(path, create=False) as store:  # never a spurious CorruptStoreError
                length = len(store)
                assert length >= previous
                previous = length
                picks = np.array([0, length // 2, length - 1], dtype=np.int64)
                out = np.empty((3, 8), dtype=np.uint64)
                store.gather_into(picks, out, 64)
                assert np.array_equal(out[:, 0], picks.astype(np.uint64))
        assert writer.poll() is None, "the writer stopped early"
    finally:
        stop.touch()
        assert writer.wait(timeout=120) == 0
    with Zrecord(path, create=False) as store:
        ids = read_all(store, 8)[:, 0]
        assert np.array_equal(ids, np.arange(len(store), dtype=np.uint64))


def test_a_delete_that_runs_out_of_space_leaves_no_redo_log(small_disk: Path) -> None:
    """A delete whose redo log cannot be written (a full disk) changes nothing and leaves no
    log behind (one left would make every read-only open refuse the store as if a crash had
    interrupted a delete). Swept over the free space, so that some deletes fail there."""
    count = 10000
    data = np.arange(count, dtype=np.int64)
    targets = np.sort(np.random.default_rng(1).choice(count, 1000, replace=False))
    refused = 0
    for free in range(0, 32768, 4096):
        path = small_disk / "store"
        shutil.rmtree(path, ignore_errors=True)
        with DenseDataset(path, dtype=np.int64, codec="raw") as ds:
            ds.append(data)
        filler = leave_free(small_disk, free)
        with DenseDataset(path) as ds:
            try:
                ds.delete(targets)
            except OSError as exc:
                assert_enospc(exc)
                refused += 1
                assert ds[:].tobytes() == data.tobytes()
        filler.unlink()
        assert not (path / "redo.zr").exists()
        with DenseDataset(path, readonly=True) as reader:
            assert len(reader) in (count, count - len(targets))
    assert refused > 0
