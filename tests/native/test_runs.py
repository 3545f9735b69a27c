"""Dense raw reads that find records without their table entries (zig/src/store/runs.zig): a
block of 4096 raw records of one size, back to back in one chunk, is learned on open and on this
handle's appends and relearned after delete and compact. These tests check every read against a NumPy
model through everything that changes the table, and records the runs do not cover (appended
by another process, other sizes, other codecs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord

pytestmark = pytest.mark.compiled

BLOCK = 4096  # runs.zig block_records


def _model(count: int, width: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, width), dtype=np.uint8)


def _check_reads(ds: DenseDataset, model: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(20):
        index = rng.integers(0, len(model), 777)
        assert np.array_equal(ds[index], model[index])
        out = np.empty((len(index), *model.shape[1:]), dtype=np.uint8)
        ds.gather_into(index, out)
        assert np.array_equal(out, model[index])
    # Every record once, in order, through the same fast path.
    assert np.array_equal(ds[np.arange(len(model))], model)


def _swap_last_delete(model: np.ndarray, targets: list[int]) -> np.ndarray:
    rows = list(model)
    for target in sorted(set(targets), reverse=True):
        rows[target] = rows[-1]
        rows.pop()
    return np.array(rows, dtype=model.dtype)


@pytest.mark.parametrize("width", [8, 24, 256])
def test_reads_match_numpy_through_appends_reopen_delete_and_compact(
    tmp_path: Path, width: int
) -> None:
    model = _model(3 * BLOCK + 123, width, width)
    path = str(tmp_path / "ds")
    with DenseDataset(path, dtype=np.uint8, item_shape=(width,), codec="raw") as ds:
        # Pieces that end inside blocks: the append that completes a block learns it.
        for start, stop in [(0, 1000), (1000, 1000 + BLOCK), (1000 + BLOCK, len(model))]:
            ds.append(model[start:stop])
        _check_reads(ds, model, 1)
    with DenseDataset(path) as ds:  # learned by open's table check
        _check_reads(ds, model, 2)
        targets = [5, BLOCK + 7, 2 * BLOCK, len(model) - 1, len(model) - 3]
        ds.delete(np.array(targets))
        model = _swap_last_delete(model, targets)
        _check_reads(ds, model, 3)
        ds.compact()
        _check_reads(ds, model, 4)
    with DenseDataset(path) as ds:
        _check_reads(ds, model, 5)


def test_records_appended_by_another_process_read_exactly(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    model = _model(2 * BLOCK + 10, 16, 7)
    with DenseDataset(str(path), dtype=np.uint8, item_shape=(16,), codec="raw") as ds:
        ds.append(model[: BLOCK + 5])
    more = model[BLOCK + 5 :]
    np.save(tmp_path / "more.npy", more)
    with DenseDataset(str(path)) as reader:
        _check_reads(reader, model[: BLOCK + 5], 8)
        # Another process completes block 1 and starts block 2 while the reader is open.
        script = textwrap.dedent(
            f"""
            import numpy as np
            from loaderx.dataset import DenseDataset
            with DenseDataset({str(path)!r}) as ds:
                ds.append(np.load({str(tmp_path / "more.npy")!r}))
            """
        )
        subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
        assert len(reader) == len(model)
        _check_reads(reader, model, 9)


def test_mixed_codecs_and_sizes_in_one_batch_read_exactly(tmp_path: Path) -> None:
    """zstd blocks and raw blocks in one dense dataset: a gather mixes records the runs cover
    with records that need their entries."""
    path = str(tmp_path / "ds")
    compressible = np.tile(np.arange(512, dtype=np.uint8), (BLOCK + 50, 1))
    compressible[:, 0] = np.arange(BLOCK + 50) % 256
    noisy = _model(BLOCK + 70, 512, 3)
    with DenseDataset(path, dtype=np.uint8, item_shape=(512,), codec="raw") as ds:
        ds.append(noisy)
    with DenseDataset(path) as ds:
        store = ds.store
        assert isinstance(store, Zrecord)
        store.append_fixed(compressible, 512, codec="zstd")
        # The second batch really is compressed (zstd shrinks each of its records).
        assert ds.stats()["live_bytes"] < noisy.nbytes + compressible.nbytes * 3 // 4
    model = np.concatenate([noisy, compressible])
    with DenseDataset(path) as ds:
        _check_reads(ds, model, 10)


def test_sharded_raw_dataset_reads_exactly_across_shards(tmp_path: Path) -> None:
    model = _model(5 * BLOCK + 11, 8, 12)
    path = str(tmp_path / "ds")
    with DenseDataset(
        path, dtype=np.uint8, item_shape=(8,), codec="raw", shard_records=2 * BLOCK + 1
    ) as ds:
        for start in range(0, len(model), 3000):
            ds.append(model[start : start + 3000])
        assert ds.sharded
        _check_reads(ds, model, 13)
    with DenseDataset(path) as ds:
        _check_reads(ds, model, 14)


def test_reads_while_another_thread_appends_whole_blocks(tmp_path: Path) -> None:
    """Blocks are learned by the appending thread while others read: every read is exact."""
    import threading

    model = _model(6 * BLOCK, 8, 21)
    path = str(tmp_path / "ds")
    with DenseDataset(path, dtype=np.uint8, item_shape=(8,), codec="raw") as ds:
        ds.append(model[:100])
        done = threading.Event()
        failures: list[str] = []

        def read(seed: int) -> None:
            rng = np.random.default_rng(seed)
            while not done.is_set():
                length = len(ds)
                index = rng.integers(0, length, 512)
                got = ds[index]
                if not np.array_equal(got, model[index]):
                    failures.append(f"wrong bytes at length {length}")
                    return

        readers = [threading.Thread(target=read, args=(seed,)) for seed in range(3)]
        for thread in readers:
            thread.start()
        try:
            for start in range(100, len(model), 1500):
                ds.append(model[start : start + 1500])
        finally:
            done.set()
            for thread in readers:
                thread.join()
        assert failures == []
        _check_reads(ds, model, 22)


def test_a_forked_child_reads_exactly_through_relearned_runs(tmp_path: Path) -> None:
    """A forked child re-takes its locks and refreshes the store on its first call, which
    learns the runs again; its reads must match NumPy."""
    import os

    model = _model(3 * BLOCK + 5, 8, 31)
    with DenseDataset(str(tmp_path / "ds"), dtype=np.uint8, item_shape=(8,), codec="raw") as ds:
        ds.append(model)
        _check_reads(ds, model, 32)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit code
            code = 1
            try:
                index = np.random.default_rng(33).integers(0, len(model), 4096)
                code = 0 if np.array_equal(ds[index], model[index]) else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        _check_reads(ds, model, 34)


def test_partial_blocks_grow_record_by_record_and_stop_at_another_size(tmp_path: Path) -> None:
    """A block's run is its longest prefix of back-to-back raw records of one size: appends of
    one record extend it, a record of another size ends it, and every read stays exact (the
    records past the end of a run are found through their entries)."""
    path = str(tmp_path / "store")
    rng = np.random.default_rng(21)
    records: list[bytes] = []
    with Zrecord(path, create=True, codec="raw") as store:
        sizes = [16] * 150 + [24] * 3 + [16] * 40
        for k, size in enumerate(sizes):
            record = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            store.append([record])
            records.append(record)
            if k % 37 == 0:
                index = rng.integers(0, len(records), 64)
                assert store.gather(index) == [records[i] for i in index]
        # The 16-byte prefix through a fixed-size destination (the run path) ...
        prefix = rng.integers(0, 150, 500)
        out = np.empty((500, 16), dtype=np.uint8)
        store.gather_into(prefix, out, 16)
        assert out.tobytes() == b"".join(records[i] for i in prefix)
        # ... and every record, before and after reopening.
        assert store.gather(np.arange(len(records))) == records
    with Zrecord(path) as store:
        assert store.gather(np.arange(len(records))) == records
        store.delete(np.array([3]))  # swap-last: the run of block 0 now stops at record 3
        records[3] = records.pop()
        assert store.gather(np.arange(len(records))) == records
        tail = np.arange(150, len(records))
        assert store.gather(tail) == [records[i] for i in tail]


def test_appends_that_cross_huge_page_boundaries_keep_every_byte_and_checksum(
    tmp_path: Path,
) -> None:
    """Appends are written in pieces cut at 2 MiB boundaries of the chunk (write_pieces.zig):
    records that straddle a cut, batches that start mid-range, ragged sizes and one-record
    appends all read back exactly, and every checksum matches."""
    path = str(tmp_path / "store")
    rng = np.random.default_rng(22)
    records: list[bytes] = []
    with Zrecord(path, create=True, codec="raw") as store:
        # 12 KiB records do not divide 2 MiB: records straddle every cut.
        big = rng.integers(0, 256, (700, 12288), dtype=np.uint8)
        store.append_fixed(big, 12288)
        records += [row.tobytes() for row in big]
        ragged = [rng.integers(0, 256, int(n), dtype=np.uint8).tobytes()
                  for n in rng.integers(1, 40_000, 300)]
        store.append(ragged)
        records += ragged
        for _ in range(5):
            one = rng.integers(0, 256, 100_003, dtype=np.uint8).tobytes()
            store.append([one])
            records.append(one)
        assert store.stats()["live_bytes"] > 3 * (2 << 20)
    with Zrecord(path, verify=True) as store:
        assert store.gather(np.arange(len(records))) == records
        report = store.verify()
        assert report.bad_count == 0 and report.checksummed == len(records)
