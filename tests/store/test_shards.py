"""Sharded datasets against single stores: byte-identical reads for every index form (dense and
ragged, every codec), rollover, refusals at open, recoding, and the loader and sampler with
shard=(rank, count) on a sharded dataset. The test_shard*.py files beside this one take views,
deletes, killed writers and other handles; shard_cases.py holds what they share."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError, ManifestError, SchemaError
from loaderx.sampler import Sampler
from loaderx._store.schema import Codec, make_schema, write_schema
from loaderx.shards import read_manifest
from loaderx.zrecord import Zrecord

from shard_cases import CAPACITY, COUNT, SHAPE, dense_data, sharded

pytestmark = pytest.mark.compiled


def _ragged_data(count: int = COUNT) -> list[npt.NDArray[np.int32]]:
    return [np.full((i % 11, 2), i, dtype=np.int32) for i in range(count)]


def _dense_pair(tmp: Path, codec: Codec, data: npt.NDArray[Any]) -> tuple[DenseDataset, DenseDataset]:
    """The same records as one store and as shards of CAPACITY records."""
    single = DenseDataset(tmp / f"single-{codec}", dtype=data.dtype, item_shape=SHAPE, codec=codec, dict_size=1024)
    sharded = DenseDataset(
        tmp / f"sharded-{codec}", dtype=data.dtype, item_shape=SHAPE, codec=codec, dict_size=1024,
        shard_records=CAPACITY,
    )
    for ds in (single, sharded):
        if codec == "zstd_dict":
            ds.train_dict(data[::5])
        ds.append(data[:700])  # batches that straddle shard boundaries
        ds.append(data[700:2100])
        ds.append(data[2100:])
    return single, sharded


def _index_forms(count: int) -> list[object]:
    rng = np.random.default_rng(3)
    mask = rng.random(count) < 0.3
    return [
        0, 999, 1000, 1999, 2000, count - 1, -1, -count, np.int64(1500), np.uint32(7),
        slice(None), slice(990, 1010), slice(None, None, -7), slice(2600, 3000), slice(5, 5),
        rng.integers(0, count, 300), rng.integers(-count, 0, 50), [1000, 0, 1000, 2499],
        (999, 1000), range(995, 1005), mask, [], np.array([], dtype=np.int64),
    ]


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_dense_sharded_reads_are_byte_identical(tmp_path: Path, codec: Codec) -> None:
    data = dense_data()
    single, sharded = _dense_pair(tmp_path, codec, data)
    try:
        assert sharded.sharded and not single.sharded
        assert [s["records"] for s in sharded.shard_stats()] == [1000, 1000, 500]
        assert len(sharded) == len(single) == COUNT
        for index in _index_forms(COUNT):
            got = sharded[index]
            want = single[index]
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), index
            as_numpy = list(index) if isinstance(index, (tuple, range)) else index
            assert np.asarray(got).tobytes() == np.asarray(data[as_numpy]).tobytes(), index  # type: ignore[call-overload]
        picks = np.random.default_rng(1).integers(0, COUNT, 256)
        out = np.empty((256, *SHAPE), dtype=data.dtype)
        sharded.gather_into(picks, out)
        assert out.tobytes() == data[picks].tobytes()
        out2 = np.zeros_like(out)
        sharded.read(picks, out=out2)
        assert out2.tobytes() == out.tobytes()
    finally:
        single.close()
        sharded.close()
    with DenseDataset(tmp_path / f"sharded-{codec}") as reopened:
        assert reopened.sharded and reopened[:].tobytes() == data.tobytes()


@pytest.mark.parametrize("index", [COUNT, -COUNT - 1, [0, COUNT], np.zeros(COUNT - 1, dtype=bool), 1.5, True])
def test_bad_indices_fail_as_on_a_single_store(tmp_path: Path, index: object) -> None:
    data = dense_data()
    single, sharded = _dense_pair(tmp_path, "raw", data)
    try:
        with pytest.raises(Exception) as want:
            single[index]
        with pytest.raises(want.type, match=None) as got:
            sharded[index]
        assert str(got.value) == str(want.value)
        out = np.zeros((1, *SHAPE), dtype=data.dtype)
        with pytest.raises(IndexError, match="out of range for a dataset of 2500 records"):
            sharded.gather_into(np.array([COUNT], dtype=np.int64), out)
        assert not out.any()  # refused before any byte moved
    finally:
        single.close()
        sharded.close()


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_ragged_sharded_reads_are_byte_identical(tmp_path: Path, codec: Codec) -> None:
    records = _ragged_data()
    datasets = []
    for name, capacity in (("single", None), ("sharded", CAPACITY)):
        ds = RaggedDataset(tmp_path / name, dtype=np.int32, item_shape=(2,), codec=codec, dict_size=1024, shard_records=capacity)
        if codec == "zstd_dict":
            ds.train_dict(records[1:400:3])
        ds.append(records[:1800])
        ds.append(records[1800:])
        datasets.append(ds)
    single, sharded = datasets
    try:
        assert [s["records"] for s in sharded.shard_stats()] == [1000, 1000, 500]
        for index in _index_forms(COUNT):
            got, want = sharded[index], single[index]
            if isinstance(want, list):
                assert len(got) == len(want)
                assert all(a.tobytes() == b.tobytes() and a.shape == b.shape for a, b in zip(got, want))
            else:
                assert got.tobytes() == want.tobytes() and got.shape == want.shape
        picks = np.array([2499, 0, 999, 1000, 1000, 1234])
        assert (sharded.lengths(picks) == np.array([i % 11 for i in picks])).all()
    finally:
        single.close()
        sharded.close()


def test_rollover_fills_each_shard_to_capacity_and_reopens(tmp_path: Path) -> None:
    data = dense_data(3456)
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="raw", shard_records=CAPACITY) as ds:
        firsts = [ds.append(data[i : i + 333]) for i in range(0, 3456, 333)]
        assert firsts == list(range(0, 3456, 333))
        assert ds.append(data[:0]) == 3456
    manifest = read_manifest(tmp_path / "d")
    assert manifest is not None
    # The folder started as a single store: its top-level store is shard 0.
    assert manifest.names == [".", "shard-000001", "shard-000002", "shard-000003"]
    assert [e.records for e in manifest.shards][:3] == [1000, 1000, 1000]
    with DenseDataset(tmp_path / "d", shard_records=CAPACITY) as ds:
        assert [s["records"] for s in ds.shard_stats()] == [1000, 1000, 1000, 456]
        ds.append(data[:600])  # the tail fills to 1000, then shard-000004 takes 56
        assert [s["records"] for s in ds.shard_stats()] == [1000] * 4 + [56]
        assert ds[-600:].tobytes() == data[:600].tobytes()
        assert ds[:3456].tobytes() == data.tobytes()


def test_a_single_store_dataset_opens_unchanged_and_rolls_over_in_place(tmp_path: Path) -> None:
    data = dense_data(1500)
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="zstd") as ds:
        ds.append(data[:800])
    before = sorted(os.listdir(tmp_path / "d"))
    with DenseDataset(tmp_path / "d") as ds:
        assert not ds.sharded and len(ds) == 800
    assert sorted(os.listdir(tmp_path / "d")) == before  # opening writes nothing
    with DenseDataset(tmp_path / "d", shard_records=CAPACITY) as ds:
        assert ds.append(data[800:]) == 800
        assert ds.sharded
        assert ds[:].tobytes() == data.tobytes()
    with DenseDataset(tmp_path / "d") as ds:
        assert [s["name"] for s in ds.shard_stats()] == [".", "shard-000001"]
        assert ds[:].tobytes() == data.tobytes()


@pytest.mark.parametrize(("codec", "damage"), [("raw", "chunk"), ("zstd", "chunk"), ("zstd", "length")])
def test_a_damaged_record_is_named_by_its_global_index_and_shard(
    tmp_path: Path, codec: Codec, damage: str
) -> None:
    """A shard's store names its own local index; a gather through the dataset said "record 7"
    for global record 2007 (shard 2's record 7), which pointed at the wrong record. Damaged
    stored bytes fail in the copy, a damaged logical length in the check of the slots first."""
    data = np.repeat(dense_data(), 8, axis=2)  # rows zstd compresses (small ones stay raw)
    path = tmp_path / "d"
    with DenseDataset(path, dtype=data.dtype, item_shape=data.shape[1:], codec=codec,
                      shard_records=CAPACITY) as ds:
        ds.append(data)
    shard = path / "shard-000002"
    # meta.zr: a 16-byte header, then entries of (offset u32, stored u32, logical u32, ...).
    entry = np.frombuffer((shard / "meta.zr").read_bytes()[16 + 16 * 7 : 16 + 16 * 8], np.uint32)
    assert (entry[1] != entry[2]) == (codec == "zstd")
    if damage == "chunk":
        target, position = shard / "0.zr", int(entry[0]) + 1
    else:
        target, position = shard / "meta.zr", 16 + 16 * 7 + 8
    with open(target, "r+b") as damaged:
        damaged.seek(position)
        byte = damaged.read(1)
        damaged.seek(position)
        damaged.write(bytes([byte[0] ^ 0x10]))
    with DenseDataset(path, readonly=True, verify=True) as ds:
        for selection in ([2007], [5, 2007, 1500], slice(None)):
            with pytest.raises(CorruptStoreError, match=r"index 2007 \(record 7 of shard 2\): corrupt"):
                ds[selection]
        assert ds[[5, 2006, 2008]].tobytes() == data[[5, 2006, 2008]].tobytes()
        assert [bad.index for bad in ds.verify().bad] == [2007]


def test_open_refuses_a_shard_with_another_schema(tmp_path: Path) -> None:
    path, _data = sharded(tmp_path)
    write_schema(str(path / "shard-000001"), make_schema("dense", np.int16, SHAPE, "raw", "balanced"))
    with pytest.raises(SchemaError, match=r"shard 'shard-000001' has another schema than the dataset: dtype"):
        DenseDataset(path)


def test_open_refuses_a_missing_shard(tmp_path: Path) -> None:
    path, _data = sharded(tmp_path)
    shutil.rmtree(path / "shard-000002")
    with pytest.raises(ManifestError, match=r"shard 'shard-000002' is listed in shards.msgpack but missing from disk"):
        DenseDataset(path)


def test_open_refuses_counts_that_disagree_but_accepts_a_tail_that_ran_ahead(tmp_path: Path) -> None:
    path, data = sharded(tmp_path)
    # The shards' stores changed underneath: a dataset handle or a plain Zrecord on a shard
    # folder refuses both, so these play the dataset's own handles (_dataset_owned).
    with Zrecord(path / "shard-000002", _dataset_owned=True) as tail:  # appended since the last manifest write
        tail.append(list(data[:10]))
    with DenseDataset(path) as ds:
        assert len(ds) == COUNT + 10
        assert ds[-10:].tobytes() == data[:10].tobytes()
    with Zrecord(path / "shard-000001", _dataset_owned=True) as middle:
        middle.delete(0)
    with pytest.raises(ManifestError, match=r"shard 'shard-000001' holds 999 records but shards.msgpack records 1000: the counts disagree"):
        DenseDataset(path)


def test_a_shard_folder_no_manifest_lists_is_ignored(tmp_path: Path) -> None:
    from loaderx.shards import staging_folder

    path, data = sharded(tmp_path)
    staged = staging_folder(path)
    with DenseDataset(staged, dtype=data.dtype, item_shape=SHAPE, codec="raw") as extra:
        extra.append(data[:5])
    os.rename(staged, path / "shard-000003")  # a crash between the move and the manifest
    with DenseDataset(path) as ds:
        assert len(ds) == COUNT and ds[:].tobytes() == data.tobytes()


def test_recode_rewrites_every_shard(tmp_path: Path) -> None:
    from loaderx.converter import recode

    path, data = sharded(tmp_path)
    recode(str(path), str(tmp_path / "z"), codec="zstd")
    with DenseDataset(tmp_path / "z") as ds:
        assert ds.codec == "zstd" and ds[:].tobytes() == data.tobytes()


def test_sampler_and_loader_shards_union_to_the_global_batch(tmp_path: Path) -> None:
    path, data = sharded(tmp_path)
    labels_path = tmp_path / "labels"
    with DenseDataset(labels_path, dtype=np.int64, codec="raw", shard_records=CAPACITY) as labels:
        labels.append(np.arange(COUNT, dtype=np.int64))
    with DenseDataset(path) as images, DenseDataset(labels_path) as labels:
        assert images.sharded and labels.sharded
        streams = {"image": images, "label": labels}
        whole = Sampler(COUNT, 2 * 64, mode="cyclic", seed=5)
        with DataLoader(streams, batch_size=2 * 64, seed=5) as single:
            global_batches = [next(single) for _ in range(5)]
        parts = []
        for rank in range(2):
            with DataLoader(streams, batch_size=64, seed=5, shard=(rank, 2), start_step=0) as loader:
                parts.append([next(loader) for _ in range(5)])
        for step in range(5):
            indices = whole.batch(step)
            union = np.concatenate([parts[rank][step]["label"] for rank in range(2)])
            assert (union == indices).all()
            assert len(set(parts[0][step]["label"]) & set(parts[1][step]["label"])) == 0
            image = np.concatenate([parts[rank][step]["image"] for rank in range(2)])
            assert image.tobytes() == global_batches[step]["image"].tobytes() == data[indices].tobytes()
        with DataLoader(streams, batch_size=64, seed=5, shard=(1, 2), start_step=3) as resumed:
            assert (next(resumed)["label"] == parts[1][3]["label"]).all()


def test_an_appending_handle_sees_shards_committed_by_another(tmp_path: Path) -> None:
    from loaderx.shards import commit_shards, staging_folder

    path, data = sharded(tmp_path)
    with DenseDataset(path, shard_records=CAPACITY) as writer:
        staged = staging_folder(path)
        with DenseDataset(staged, dtype=data.dtype, item_shape=SHAPE, codec="raw") as shard:
            shard.append(data[:5])
        commit_shards(path, [staged], writer.schema)
        assert writer.append(data[:3]) == COUNT + 5  # after the committed shard, not before it
    with DenseDataset(path) as ds:
        assert [s["records"] for s in ds.shard_stats()] == [1000, 1000, 500, 8]
        assert ds[COUNT:].tobytes() == np.concatenate([data[:5], data[:3]]).tobytes()


def test_a_dataset_past_one_store_limit_is_built_and_read(tmp_path: Path) -> None:
    """2^24 + 2^20 int64 records (one store holds 2^24): from_numpy rolls over to a second
    shard, and every record reads back. About 10 s and 400 MiB of disk here."""
    from loaderx.converter import from_numpy
    from loaderx.shards import SHARD_RECORDS_MAX

    count = SHARD_RECORDS_MAX + (1 << 20)
    values = np.arange(count, dtype=np.int64)
    try:
        assert from_numpy(str(tmp_path / "big"), values, codec="raw") == count
        with DenseDataset(tmp_path / "big") as ds:
            assert len(ds) == count
            assert [s["records"] for s in ds.shard_stats()] == [SHARD_RECORDS_MAX, 1 << 20]
            edges = np.array([0, SHARD_RECORDS_MAX - 1, SHARD_RECORDS_MAX, count - 1, -1])
            assert (ds[edges] == values[edges]).all()
            assert ds[SHARD_RECORDS_MAX] == SHARD_RECORDS_MAX
            assert np.array_equal(ds[:], values)
    finally:
        shutil.rmtree(tmp_path / "big", ignore_errors=True)


def test_readers_on_other_threads_stay_correct_while_appends_roll_over(tmp_path: Path) -> None:
    import threading

    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw", shard_records=300) as ds:
        ds.append(np.arange(100, dtype=np.int64))
        stop = threading.Event()
        failures: list[str] = []

        def read() -> None:
            rng = np.random.default_rng(threading.get_ident() % 1000)
            while not stop.is_set():
                length = len(ds)
                picks = rng.integers(0, length, 64)
                got = ds[picks]
                if not np.array_equal(got, picks):
                    failures.append(f"read {got[:4]} for {picks[:4]} at length {length}")

        readers = [threading.Thread(target=read) for _ in range(2)]
        for reader in readers:
            reader.start()
        try:
            for start in range(100, 5000, 70):
                ds.append(np.arange(start, start + 70, dtype=np.int64))
        finally:
            stop.set()
            for reader in readers:
                reader.join()
        assert failures == []
        assert len(ds) == 100 + 70 * 70
        assert np.array_equal(ds[:], np.arange(len(ds)))
        assert len(ds.shard_stats()) == -(-len(ds) // 300)


def test_a_rollover_closes_the_view_it_replaces(tmp_path: Path) -> None:
    from loaderx._store.view import _OPEN_VIEWS  # private: no public name counts open views

    path = str(tmp_path / "d")
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        for start in range(0, 600, 10):
            ds.append(np.arange(start, start + 10, dtype=np.int64))
        # Each of the 60 rollovers made a view over every shard; only the last may stay open
        # (keeping the others cost shards x rollovers of memory for the handle's lifetime).
        open_views = [view for view in _OPEN_VIEWS if view.name == path and not view.closed]
        assert len(open_views) == 1 and len(open_views[0]) == 600
        assert np.array_equal(ds[:], np.arange(600))


def test_a_sharded_datasets_lock_files_follow_the_umask(tmp_path: Path) -> None:
    """decisions.md: new files get the umask's mode, so that a dataset shared by a group stays
    usable by its members. shards.lock and shards.readers.lock were made 0o644 whatever the
    umask: under umask 002 another member of the group could read the dataset but not append to
    it, commit a shard or delete (each opens its lock file for writing)."""
    old = os.umask(0o002)
    try:
        with DenseDataset(tmp_path / "ds", dtype=np.int64, item_shape=(), codec="raw",
                          shard_records=10) as ds:
            ds.append(np.arange(25, dtype=np.int64))  # rollovers: the commit lock
            ds.delete([0, 12])  # over two shards: the readers lock
    finally:
        os.umask(old)
    modes = {name: (tmp_path / "ds" / name).stat().st_mode & 0o777
             for name in ("shards.lock", "shards.readers.lock", "shards.msgpack")}
    assert modes == {"shards.lock": 0o664, "shards.readers.lock": 0o664, "shards.msgpack": 0o664}
