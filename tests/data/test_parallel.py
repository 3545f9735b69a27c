"""Parallel conversion (loaderx._data.parallel): exact round trips, failures and kills, appends.

Every conversion here runs real worker processes. Kills are real SIGKILLs of a worker in the
middle of its part; "unchanged" means the destination's files are byte for byte what they were
and nothing is left beside it. Readers of what parallel conversions write are in
test_parallel_readers.py.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import multiprocessing
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.converter import from_arrow, from_iterator, from_numpy, recode
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import SchemaError, WorkerError
from loaderx._data.parallel import split_ranges
from loaderx._os.process_pool import run_workers
from loaderx._store.schema import Codec
from loaderx.shards import read_manifest


def read_dense(path: str) -> npt.NDArray[Any]:
    """Every record of a dense dataset through the public reader (sharded or not)."""
    with DenseDataset(path) as ds:
        records: npt.NDArray[Any] = ds[:]
        return records


def read_ragged(path: str) -> list[npt.NDArray[Any]]:
    with RaggedDataset(path) as ds:
        return list(ds[:])


def file_digest(path: str) -> str:
    """A hash of a file's bytes that skips its holes (store files are sparse, up to 4 GiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        digest.update(str(size).encode())
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:  # no data after offset
                break
            stop = os.lseek(fd, start, os.SEEK_HOLE)
            digest.update(f"@{start}".encode())
            digest.update(os.pread(fd, stop - start, start))
            offset = stop
    return digest.hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under folder with a digest of its bytes, plus the hidden names beside it
    (where staging folders would be left behind)."""
    found = {f"beside:{n}": "" for n in os.listdir(folder.parent) if n.startswith(".")}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = file_digest(path)
    return found


def ragged_source(seed: int, count: int) -> list[npt.NDArray[np.int32]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(-99, 99, size=(int(rng.integers(0, 9)), 3), dtype=np.int32)
            for _ in range(count)]


def make_ragged(seed: int, count: int) -> Iterator[npt.NDArray[np.int32]]:
    """A picklable source factory (module-level), as spawn and forkserver need."""
    return iter(ragged_source(seed, count))


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_dense_parallel_equals_single_process(tmp_path: Path, codec: Codec) -> None:
    rng = np.random.default_rng(1)
    array = (rng.integers(0, 4, size=(1001, 6, 5)) * 40).astype(np.uint8)
    single = str(tmp_path / "single")
    parallel = str(tmp_path / "parallel")
    assert from_numpy(single, array, codec=codec) == 1001
    assert from_numpy(parallel, array, codec=codec, workers=2, shard_records=300) == 1001
    manifest = read_manifest(parallel)
    assert manifest is not None
    # Two workers, 500 and 501 rows, each cut into shards of at most 300.
    assert [e.records for e in manifest.shards] == [300, 200, 300, 201]
    np.testing.assert_array_equal(read_dense(parallel), read_dense(single))
    np.testing.assert_array_equal(read_dense(parallel), array)


def test_dense_workers_one_shard_each_and_memmap_input(tmp_path: Path) -> None:
    npy = tmp_path / "input.npy"
    data = np.lib.format.open_memmap(npy, mode="w+", dtype=np.float32, shape=(999, 4))
    data[:] = np.arange(999 * 4, dtype=np.float32).reshape(999, 4)
    data.flush()
    mapped = np.load(npy, mmap_mode="r")
    assert from_numpy(str(tmp_path / "x"), mapped, workers=3) == 999
    manifest = read_manifest(str(tmp_path / "x"))
    assert manifest is not None and [e.records for e in manifest.shards] == [333, 333, 333]
    np.testing.assert_array_equal(read_dense(str(tmp_path / "x")), mapped)


def test_ragged_parallel_equals_single_process(tmp_path: Path) -> None:
    sources = [ragged_source(seed, count) for seed, count in [(1, 70), (2, 0), (3, 45)]]
    single = str(tmp_path / "single")
    parallel = str(tmp_path / "parallel")
    flat = [r for source in sources for r in source]
    assert from_iterator(single, iter(flat)) == 115
    assert from_iterator(parallel, sources, workers=2, shard_records=40) == 115
    manifest = read_manifest(parallel)
    assert manifest is not None
    # Source 0: 40 + 30; source 1 is empty and adds nothing; source 2: 40 + 5.
    assert [e.records for e in manifest.shards] == [40, 30, 40, 5]
    got, want = read_ragged(parallel), read_ragged(single)
    assert len(got) == len(want) == len(flat)
    for a, b, c in zip(got, want, flat):
        assert a.dtype == b.dtype == np.int32 and a.shape == c.shape
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_picklable_factories_under_spawn_and_forkserver(tmp_path: Path, method: str) -> None:
    sources = [functools.partial(make_ragged, 5, 30), functools.partial(make_ragged, 6, 20)]
    path = str(tmp_path / "r")
    assert from_iterator(path, sources, workers=2, start_method=method) == 50
    want = ragged_source(5, 30) + ragged_source(6, 20)
    for a, b in zip(read_ragged(path), want, strict=True):
        np.testing.assert_array_equal(a, b)
    array = np.arange(600, dtype=np.int64).reshape(300, 2)
    assert from_numpy(str(tmp_path / "d"), array, workers=2, start_method=method) == 300
    np.testing.assert_array_equal(read_dense(str(tmp_path / "d")), array)


def test_split_ranges_cover_everything_once() -> None:
    for count in (0, 1, 2, 5, 1000, 1001):
        for parts in (1, 2, 3, 7):
            ranges = split_ranges(count, parts)
            covered = [i for a, b in ranges for i in range(a, b)]
            assert covered == list(range(count))
            assert all(b > a for a, b in ranges)


def test_bad_arguments_raise_before_any_work(tmp_path: Path) -> None:
    array = np.zeros((10, 2), dtype=np.uint8)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        from_numpy(str(tmp_path / "a"), array, workers=0)
    with pytest.raises(TypeError, match="workers must be an int"):
        from_numpy(str(tmp_path / "a"), array, workers=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shard_records"):
        from_numpy(str(tmp_path / "a"), array, workers=2, shard_records=0)
    with pytest.raises(ValueError, match="start_method"):
        from_numpy(str(tmp_path / "a"), array, workers=2, start_method="thread")
    with pytest.raises(TypeError, match="list of sources"):
        from_iterator(str(tmp_path / "a"), iter([array]), workers=2)
    with pytest.raises(ValueError, match="zstd_dict"):
        from_iterator(str(tmp_path / "a"), [[array]], workers=2, codec="zstd_dict")
    assert os.listdir(tmp_path) == []
    from_numpy(str(tmp_path / "old"), array)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        from_numpy(str(tmp_path / "old"), array, workers=2)
    with pytest.raises(SchemaError, match="dtype"):
        from_numpy(str(tmp_path / "old"), array.astype(np.int16), workers=2, append=True)
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_run_workers_refuses_a_bad_worker_count_before_starting_any() -> None:
    """With workers=0 it used to start nothing and wait for ever (a busy loop)."""
    raised: list[BaseException] = []

    def run(workers: Any) -> None:
        try:
            run_workers([functools.partial(int, 1)], workers, None, str)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            raised.append(exc)

    for workers, error, message in ((0, ValueError, "workers must be at least 1, got 0"),
                                    (1.0, TypeError, "workers must be an int, got 1.0")):
        caller = threading.Thread(target=run, args=(workers,), daemon=True)
        caller.start()
        caller.join(timeout=10)
        assert not caller.is_alive(), f"run_workers(workers={workers!r}) hung"
        assert len(raised) == 1 and type(raised[0]) is error and str(raised[0]) == message
        raised.clear()
    assert run_workers([functools.partial(int, 7)], 1, None, str) == [7]


def failing_source(count: int, fail_at: int) -> Iterator[npt.NDArray[np.int32]]:
    for i in range(count):
        if i == fail_at:
            raise ValueError(f"bad record {i}")
        yield np.full((2, 3), i, dtype=np.int32)


def test_a_raising_worker_names_itself_and_leaves_the_old_dataset(tmp_path: Path) -> None:
    path = tmp_path / "data"
    old = [np.full((1, 3), 7, dtype=np.int32)] * 5
    from_iterator(str(path), old)
    before = snapshot(path)
    sources = [functools.partial(failing_source, 50, 999), functools.partial(failing_source, 50, 30)]
    with pytest.raises(WorkerError, match=r"worker 1 of 2 \(source 1\) failed: ValueError: "
                       r"bad record 30") as info:
        from_iterator(str(path), sources, workers=2, overwrite=True)
    assert info.value.worker == 1
    assert "Traceback" in str(info.value)
    assert snapshot(path) == before
    assert len(read_ragged(str(path))) == 5


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this message cannot be made")


def raise_unprintable() -> None:
    raise UnprintableError()


def test_a_worker_whose_exception_cannot_be_printed_still_reports_it() -> None:
    """The report's text called str() on the exception; one whose __str__ raised ended the
    worker before it reported, and the parent said only "exited with status 1"."""
    with pytest.raises(WorkerError, match=r"worker 0 of 1 \(job\) failed: UnprintableError: "
                       r"\(its str\(\) raised\)") as info:
        run_workers([raise_unprintable], 1, None, lambda i: "job")
    assert "Traceback" in str(info.value)
    assert "raise_unprintable" in str(info.value)


def slow_source(marker: str, count: int) -> Iterator[npt.NDArray[np.int32]]:
    """Yields slowly and announces its pid once it is well into its part."""
    for i in range(count):
        if i == 20:
            with open(marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
        time.sleep(0.01)
        yield np.full((i % 5, 3), i, dtype=np.int32)


def kill_when_marked(marker: str, pids: list[int]) -> None:
    for _ in range(3000):
        if os.path.exists(marker):
            pid = int(Path(marker).read_text())
            pids.append(pid)
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.01)


@pytest.mark.parametrize("append", [False, True])
def test_sigkilled_worker_leaves_the_destination_unchanged(tmp_path: Path, append: bool) -> None:
    path = tmp_path / "data"
    first = [np.full((2, 3), 1, dtype=np.int32)] * 30
    from_iterator(str(path), [first, first], workers=2)  # an existing sharded dataset
    before = snapshot(path)
    marker = str(tmp_path / "marker")
    sources = [functools.partial(slow_source, marker + "-unused", 10),
               functools.partial(slow_source, marker, 2000)]
    pids: list[int] = []
    killer = threading.Thread(target=kill_when_marked, args=(marker, pids))
    killer.start()
    try:
        with pytest.raises(WorkerError, match=r"worker 1 of 2 \(source 1\) was killed by SIGKILL"):
            from_iterator(str(path), sources, workers=2, overwrite=not append, append=append)
    finally:
        killer.join()
    assert len(pids) == 1
    assert snapshot(path) == before
    assert len(read_ragged(str(path))) == 60
    assert multiprocessing.active_children() == []


def append_job(path: str, value: int, start: Any) -> None:
    start.wait()
    from_numpy(path, np.full((100, 4), value, dtype=np.uint8), workers=2, append=True)


def test_independent_jobs_append_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "corpus")
    from_numpy(path, np.zeros((50, 4), dtype=np.uint8), workers=2)  # last night's corpus
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    jobs = [ctx.Process(target=append_job, args=(path, v, start)) for v in (1, 2)]
    for job in jobs:
        job.start()
    start.set()
    for job in jobs:
        job.join(120)
        assert job.exitcode == 0
    manifest = read_manifest(path)
    assert manifest is not None and manifest.records == 250
    assert len(manifest.shards) == 6
    data = read_dense(path)
    np.testing.assert_array_equal(data[:50], 0)
    # Each job's two shards went in by one commit: its 100 records are contiguous.
    blocks = sorted([int(data[50, 0]), int(data[150, 0])])
    assert blocks == [1, 2]
    for start_row in (50, 150):
        np.testing.assert_array_equal(data[start_row:start_row + 100], data[start_row, 0])
    assert sorted(n for n in os.listdir(tmp_path)) == ["corpus"]


def test_append_creates_then_extends(tmp_path: Path) -> None:
    path = str(tmp_path / "c")
    a = np.arange(40, dtype=np.int64)
    b = np.arange(40, 70, dtype=np.int64)
    assert from_numpy(path, a, append=True) == 40
    assert from_numpy(path, b, append=True, workers=2) == 30
    np.testing.assert_array_equal(read_dense(path), np.arange(70))
    sources = [ragged_source(9, 10)]
    assert from_iterator(str(tmp_path / "r"), sources, append=True) == 10
    assert from_iterator(str(tmp_path / "r"), sources, append=True, workers=1) == 10
    assert len(read_ragged(str(tmp_path / "r"))) == 20


def test_a_parallel_append_of_no_rows_leaves_a_single_store_as_it_was(tmp_path: Path) -> None:
    """workers=2 with zero rows committed no shard, but the commit still sealed the single store
    as shard '.' and wrote a manifest: the dataset became a sharded one of one shard."""
    path = str(tmp_path / "c")
    from_numpy(path, np.arange(10, dtype=np.int64))
    before = sorted(os.listdir(path))
    assert from_numpy(path, np.zeros(0, dtype=np.int64), workers=2, append=True) == 0
    assert sorted(os.listdir(path)) == before
    assert "shards.msgpack" not in before
    np.testing.assert_array_equal(read_dense(path), np.arange(10))


def test_append_with_overwrite_is_refused_before_anything_changes(tmp_path: Path) -> None:
    path = str(tmp_path / "c")
    assert from_numpy(path, np.arange(10, dtype=np.int64)) == 10
    before = sorted(os.listdir(path))
    for workers in (1, 2):
        with pytest.raises(ValueError, match="append=True adds .* overwrite=True replaces"):
            from_numpy(path, np.arange(5, dtype=np.int64), append=True, overwrite=True,
                       workers=workers)
    with pytest.raises(ValueError, match="pass one of them"):
        from_iterator(path, [ragged_source(1, 3)], append=True, overwrite=True)
    assert sorted(os.listdir(path)) == before
    np.testing.assert_array_equal(read_dense(path), np.arange(10))


def _convert_next(parent: Path, next_one: str) -> None:
    """Converts 50 records into parent/"c" the way next_one names, checking its count."""
    c = str(parent / "c")
    if next_one == "iterator":
        assert from_iterator(c, [np.arange(i, dtype=np.int64) for i in range(50)]) == 50
    elif next_one == "recode":
        source = str(parent.parent / "source")
        assert from_numpy(source, np.arange(50, dtype=np.int64), codec="raw") == 50
        assert recode(source, c) == 50
    elif next_one == "arrow":
        pa: Any = importlib.import_module("pyarrow")  # the arrow extra, in the test env
        assert from_arrow(pa.table({"c": np.arange(50, dtype=np.int64)}), str(parent)) == 50
    else:
        workers = 2 if next_one == "parallel" else 1
        assert from_numpy(c, np.arange(50, dtype=np.int64), workers=workers) == 50


@pytest.mark.parametrize(
    "next_one", ["parallel", "numpy in one process", "iterator", "recode", "arrow"])
def test_parts_left_by_a_killed_conversion_go_with_the_next_one(
    tmp_path: Path, next_one: str
) -> None:
    """A conversion's parts folder is locked while it runs; one whose lock is gone (its
    process was killed) is removed by the next conversion to the same destination, of
    whatever kind (a conversion in one process left it before stop 57, a recode or an Arrow
    conversion before stop 58)."""
    from loaderx._os.folder_swap import FolderLock

    parent = tmp_path / "out"  # from_arrow writes column c into parent/c
    dead = parent / ".c.loaderx-parts-dead0001"
    (dead / "part-000000-000000").mkdir(parents=True)
    (dead / "part-000000-000000" / "0.zr").write_bytes(b"\0" * 4096)
    (parent / ".c.loaderx-parts-dead0001.live").touch()
    (parent / ".c.loaderx-parts-gone0001.live").touch()  # killed between marker and folder
    (parent / ".c.loaderx-claim-dead0003").touch()  # killed before its claim was renamed
    live = parent / ".c.loaderx-parts-live0001"
    live.mkdir()
    (parent / ".c.loaderx-parts-live0001.live").touch()
    other = parent / ".cc.loaderx-parts-dead0002"  # another destination's: not ours to judge
    other.mkdir()
    (parent / ".cc.loaderx-parts-dead0002.live").touch()
    unmarked = parent / ".c.loaderx-parts-nomark01"  # made another way: left alone
    unmarked.mkdir()
    holder = FolderLock(str(parent / ".c.loaderx-parts-live0001.live"), blocking=True)
    try:
        _convert_next(parent, next_one)
        assert not dead.exists()
        assert live.exists() and other.exists() and unmarked.exists()
    finally:
        holder.release()
    if next_one == "iterator":
        with RaggedDataset(str(parent / "c")) as ragged:
            assert all(np.array_equal(ragged[i], np.arange(i)) for i in range(50))
    else:
        np.testing.assert_array_equal(read_dense(str(parent / "c")), np.arange(50))
    assert sorted(p.name for p in parent.iterdir()) == [
        ".c.loaderx-parts-live0001", ".c.loaderx-parts-live0001.live",
        ".c.loaderx-parts-nomark01", ".cc.loaderx-parts-dead0002",
        ".cc.loaderx-parts-dead0002.live", "c",
    ]


_MANY_SHARDS = """
import sys
import numpy as np
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

count = from_numpy(sys.argv[1], np.arange(4000, dtype=np.int64) * 3, codec="raw", workers=2,
                   shard_records=2, progress=False)
with DenseDataset(sys.argv[1]) as ds:
    assert ds[:].tolist() == list(range(0, 12000, 3)), "other records"
    print(count, len(ds.shard_stats()))
"""


def test_workers_that_write_many_shards_report_them(tmp_path: Path) -> None:
    """1000 shards per worker make a report larger than the pipe's buffer: the parent reads it
    as it arrives (it used to wait for the worker to exit first, which the worker, blocked
    sending, never did: the conversion hung for good)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _MANY_SHARDS, str(tmp_path / "many")],
                            capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "4000 2000\n"


def test_too_many_records_are_refused_before_any_worker_starts(tmp_path: Path) -> None:
    """More than a dataset's 2^44 records (a broadcast array: no memory) are refused up front
    with workers=2 as with workers=1 (the parallel path used to start converting them)."""
    from loaderx._store.layout import RECORD_COUNT_MAX

    huge = np.broadcast_to(np.uint8(7), (RECORD_COUNT_MAX + 1,))
    for workers in (1, 2):
        with pytest.raises(ValueError, match=f"{RECORD_COUNT_MAX + 1} records exceed"):
            from_numpy(tmp_path / f"w{workers}", huge, codec="raw", workers=workers)
        assert not (tmp_path / f"w{workers}").exists()


def test_too_many_shards_are_refused_before_any_worker_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small shard_records can make more shards than a dataset holds: refused up front, not
    by the commit once every shard was written (1M shards of one record, here)."""
    from loaderx._data import parallel
    from loaderx._store import layout

    def no_workers(*_args: Any, **_kwargs: Any) -> list[Any]:
        raise AssertionError("workers started")

    with monkeypatch.context() as patch:
        patch.setattr(parallel, "run_workers", no_workers)
        records = np.zeros(layout.SHARD_COUNT_MAX + 1, dtype=np.uint8)
        with pytest.raises(ValueError, match=rf"{layout.SHARD_COUNT_MAX + 1} records in shards "
                           rf"of at most 1 make {layout.SHARD_COUNT_MAX + 1} shards, over a "
                           rf"dataset's limit of {layout.SHARD_COUNT_MAX}; pass a larger "
                           "shard_records"):
            from_numpy(tmp_path / "new", records, codec="raw", workers=2, shard_records=1)
        assert os.listdir(tmp_path) == []
    # An append counts the shards the dataset holds already (a limit of 4 keeps it small).
    path = str(tmp_path / "old")
    from_numpy(path, np.arange(3, dtype=np.int64), codec="raw")  # a single store: shard 0
    before = snapshot(tmp_path / "old")
    monkeypatch.setattr(layout, "SHARD_COUNT_MAX", 4)
    with monkeypatch.context() as patch:
        patch.setattr(parallel, "run_workers", no_workers)
        with pytest.raises(ValueError, match=re.escape(
                "8 records in shards of at most 2 make 4 shards on top of the 1 that "
                f"{path!r} holds, over a dataset's limit of 4")):
            from_numpy(path, np.arange(8, dtype=np.int64), codec="raw", workers=2,
                       shard_records=2, append=True)
    assert snapshot(tmp_path / "old") == before
    from_numpy(path, np.arange(3, 8, dtype=np.int64), codec="raw", workers=2, shard_records=2,
               append=True)  # 1 + 3 shards: exactly the limit
    np.testing.assert_array_equal(read_dense(path), np.arange(8))
    assert len(read_manifest(path).shards) == 4  # type: ignore[union-attr]


def records_then_raise(count: int) -> Iterator[npt.NDArray[np.int32]]:
    """count records, then an error: a source that must not be read past them."""
    for i in range(count):
        yield np.full((2, 3), i, dtype=np.int32)
    raise AssertionError(f"read past record {count - 1}: the shard limit was passed")


@pytest.mark.parametrize("append", [False, True])
def test_iterator_workers_stop_at_the_first_shard_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, append: bool
) -> None:
    """How many shards sources make is known only as they run: the first shard past a dataset's
    limit stops the conversion with from_numpy's message, before that shard is written or its
    source read any further (the commit refused them only once every worker had written all
    of its shards: a source of 10^9 records at shard_records=1 ran for days first)."""
    from loaderx._store import layout

    monkeypatch.setattr(layout, "SHARD_COUNT_MAX", 4)
    path = str(tmp_path / "data")
    held = [np.full((1, 3), 7, dtype=np.int32)] * 3
    from_iterator(path, held)  # a single store: shard 0 of an append
    before = snapshot(tmp_path / "data")
    limit = 3 if append else 4
    over = (f"the sources' records in shards of at most 2 make more than {limit} shards"
            + (f" on top of the 1 that {path!r} holds" if append else "")
            + ", over a dataset's limit of 4; pass a larger shard_records")
    # Source 0 makes 2 shards; source 1 reaches the limit at its first (append) or second shard
    # and is refused at the next one's first record, which is its last: reading on raises. One
    # worker at a time, so the source that finds the limit is known.
    sources = [lambda: iter(ragged_source(0, 4)),
               functools.partial(records_then_raise, 3 if append else 5)]
    with pytest.raises(ValueError, match=re.escape(over)) as info:
        from_iterator(path, sources, workers=1, shard_records=2, append=append,
                      overwrite=not append)
    assert type(info.value) is ValueError  # a refusal, not a WorkerError with a traceback
    assert snapshot(tmp_path / "data") == before
    assert len(read_ragged(path)) == 3
    # Exactly the limit is fine: 4 shards in all.
    first, second = ragged_source(1, 4), ragged_source(2, 2 if append else 4)
    from_iterator(path, [lambda: iter(first), lambda: iter(second)], workers=2,
                  shard_records=2, append=append, overwrite=not append)
    expected = [*held, *first, *second] if append else [*first, *second]
    found = read_ragged(path)
    assert len(found) == len(expected)
    for got, want in zip(found, expected):
        np.testing.assert_array_equal(got, want)
    assert len(read_manifest(path).shards) == 4  # type: ignore[union-attr]


def test_the_loser_of_two_new_conversions_is_told_the_destination_exists(tmp_path: Path) -> None:
    """Two conversions into the same new destination, both past its check: one publishes, the
    other raises the FileExistsError a conversion without overwrite=True gets up front (it
    raised OSError 'Directory not empty'), and the winner's records are intact."""
    dst = tmp_path / "dst"
    meet = threading.Barrier(2, timeout=30)
    errors: dict[int, BaseException] = {}

    def convert(value: int) -> None:
        met: list[int] = []

        def progress(done: int, total: int | None, nbytes: int) -> None:
            if not met:
                met.append(1)
                meet.wait()  # both conversions have found dst absent

        try:
            from_numpy(dst, np.full((100, 16), value, np.uint8), codec="raw", progress=progress)
        except BaseException as exc:  # noqa: BLE001 - recorded for the asserts below
            errors[value] = exc

    threads = [threading.Thread(target=convert, args=(v,)) for v in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(errors) == 1, errors
    (loser, error), = errors.items()
    assert isinstance(error, FileExistsError) and "overwrite=True" in str(error)
    with DenseDataset(dst) as ds:
        assert ds[:].tobytes() == np.full((100, 16), 3 - loser, np.uint8).tobytes()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_big_endian_array_converts_with_any_start_method(
    tmp_path: Path, start_method: str
) -> None:
    """'>i4' rows reach spawned workers pickled, and NumPy may unpickle them in native order:
    the workers cast them back, so every shard has the schema's dtype and the same values
    (publishing used to refuse the shards: "store has '<i4', asked for '>i4'")."""
    data = (np.arange(600, dtype=np.int32) * 7 - 1000).astype(">i4")
    assert from_numpy(tmp_path / "be", data, codec="raw", workers=2, shard_records=100,
                      start_method=start_method, progress=False) == 600
    with DenseDataset(tmp_path / "be") as ds:
        assert ds.dtype == np.dtype(">i4")
        assert ds[:].tobytes() == data.tobytes()
