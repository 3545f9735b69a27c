"""Sharded datasets against single stores: byte-identical reads for every index form (dense and
ragged, every codec), rollover, refusals at open, deletes across shards, maintenance, and the
loader and sampler with shard=(rank, count) on a sharded dataset."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._store import shard_delete, sharded_store
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import CorruptStoreError, ManifestError, SchemaError
from loaderx.sampler import Sampler
from loaderx._store.schema import Codec, make_schema, write_schema
from loaderx.shards import read_manifest
from loaderx.zrecord import Zrecord

pytestmark = pytest.mark.compiled

CAPACITY = 1000
COUNT = 2500  # three shards: 1000, 1000, 500
SHAPE = (3, 8)


def _dense_data(count: int = COUNT) -> npt.NDArray[np.uint16]:
    """Compressible but distinct rows: record i starts with i."""
    rng = np.random.default_rng(7)
    data = (rng.integers(0, 4, size=(count, *SHAPE)) * 1000).astype(np.uint16)
    data[:, 0, 0] = np.arange(count) % 65536
    return data


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
    data = _dense_data()
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
    data = _dense_data()
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
    data = _dense_data(3456)
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
    data = _dense_data(1500)
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


def _sharded(tmp_path: Path) -> tuple[Path, npt.NDArray[np.uint16]]:
    data = _dense_data()
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="raw", shard_records=CAPACITY) as ds:
        ds.append(data)
    return tmp_path / "d", data


@pytest.mark.parametrize(("codec", "damage"), [("raw", "chunk"), ("zstd", "chunk"), ("zstd", "length")])
def test_a_damaged_record_is_named_by_its_global_index_and_shard(
    tmp_path: Path, codec: Codec, damage: str
) -> None:
    """A shard's store names its own local index; a gather through the dataset said "record 7"
    for global record 2007 (shard 2's record 7), which pointed at the wrong record. Damaged
    stored bytes fail in the copy, a damaged logical length in the check of the slots first."""
    data = np.repeat(_dense_data(), 8, axis=2)  # rows zstd compresses (small ones stay raw)
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
    path, _data = _sharded(tmp_path)
    write_schema(str(path / "shard-000001"), make_schema("dense", np.int16, SHAPE, "raw", "balanced"))
    with pytest.raises(SchemaError, match=r"shard 'shard-000001' has another schema than the dataset: dtype"):
        DenseDataset(path)


def test_open_refuses_a_missing_shard(tmp_path: Path) -> None:
    path, _data = _sharded(tmp_path)
    shutil.rmtree(path / "shard-000002")
    with pytest.raises(ManifestError, match=r"shard 'shard-000002' is listed in shards.msgpack but missing from disk"):
        DenseDataset(path)


def test_open_refuses_counts_that_disagree_but_accepts_a_tail_that_ran_ahead(tmp_path: Path) -> None:
    path, data = _sharded(tmp_path)
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

    path, data = _sharded(tmp_path)
    staged = staging_folder(path)
    with DenseDataset(staged, dtype=data.dtype, item_shape=SHAPE, codec="raw") as extra:
        extra.append(data[:5])
    os.rename(staged, path / "shard-000003")  # a crash between the move and the manifest
    with DenseDataset(path) as ds:
        assert len(ds) == COUNT and ds[:].tobytes() == data.tobytes()


def test_delete_keeps_the_index_space_dense_shard_by_shard(tmp_path: Path) -> None:
    path, data = _sharded(tmp_path)
    shards = [list(range(0, 1000)), list(range(1000, 2000)), list(range(2000, 2500))]
    victims = [3, 999, 1000, 1500, 1999, 2499, 3, 2100]
    for shard in shards:  # the model: swap-last within each shard, descending, once each
        for target in sorted({v for v in victims if v in shard}, reverse=True):
            position = shard.index(target)
            shard[position] = shard[-1]
            shard.pop()
    expected = np.array([i for shard in shards for i in shard])
    with DenseDataset(path) as ds:
        ds.delete(victims)
        assert len(ds) == COUNT - 7
        assert ds[:].tobytes() == data[expected].tobytes()
        assert [s["records"] for s in ds.shard_stats()] == [998, 997, 498]
        assert ds.stats()["reclaimable"] > 0
        ds.compact()
        stats = ds.stats()
        assert stats["reclaimable"] == 0 and stats["records"] == COUNT - 7
        assert stats["live_bytes"] == sum(s["live_bytes"] for s in ds.shard_stats())
        assert ds[:].tobytes() == data[expected].tobytes()
    manifest = read_manifest(path)
    assert manifest is not None
    assert [(e.records, e.records_before) for e in manifest.shards] == [(998, None), (997, None), (498, None)]
    with DenseDataset(path) as ds:
        assert ds[:].tobytes() == data[expected].tobytes()


@pytest.mark.parametrize("holder", ["another dataset handle", "a handle on one shard"])
def test_a_refused_delete_changes_no_shard_and_no_manifest(tmp_path: Path, holder: str) -> None:
    """Any shard open elsewhere refuses the whole delete before a record moves (one native
    call takes every shard first), and the manifest is put back byte for byte."""
    from loaderx.errors import StoreLockedError
    from loaderx._store.layout import manifest_path
    from loaderx.zrecord import Zrecord

    path, data = _sharded(tmp_path)
    before = Path(manifest_path(str(path))).read_bytes()
    victims = [5, 1500, 2100]  # one record in each shard
    with DenseDataset(path) as ds:
        other: DenseDataset | Zrecord
        if holder == "another dataset handle":
            other = DenseDataset(path, readonly=True)
        else:  # the last shard only: the first two would delete before it refused, before
            other = Zrecord(os.path.join(path, "shard-000002"), readonly=True)
        with other:
            with pytest.raises(StoreLockedError, match="needs the store to itself"):
                ds.delete(victims)
            assert len(ds) == COUNT
            assert ds[:].tobytes() == data.tobytes()
        assert Path(manifest_path(str(path))).read_bytes() == before
        ds.delete(victims)  # nothing holds a shard now
        assert len(ds) == COUNT - 3
    with DenseDataset(path) as ds:
        remaining = sorted(ds[:][:, 0, 0].tolist())  # record i starts with i
        assert remaining == sorted(set(range(COUNT)) - set(victims))


def test_a_delete_interrupted_after_the_manifest_still_opens(tmp_path: Path) -> None:
    path, data = _sharded(tmp_path)
    manifest = read_manifest(path)
    assert manifest is not None
    manifest.shards[1].records_before = 1000  # the manifest says a delete of 4 was under way
    manifest.shards[1].records = 996
    from loaderx._store.manifest import write_manifest

    write_manifest(path, manifest)
    with DenseDataset(path) as ds:  # the store never got the delete: still consistent
        assert ds[:].tobytes() == data.tobytes()


def test_recode_rewrites_every_shard(tmp_path: Path) -> None:
    from loaderx.converter import recode

    path, data = _sharded(tmp_path)
    recode(str(path), str(tmp_path / "z"), codec="zstd")
    with DenseDataset(tmp_path / "z") as ds:
        assert ds.codec == "zstd" and ds[:].tobytes() == data.tobytes()


def test_sampler_and_loader_shards_union_to_the_global_batch(tmp_path: Path) -> None:
    path, data = _sharded(tmp_path)
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

    path, data = _sharded(tmp_path)
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


def _roll_over_when_first_entered(
    monkeypatch: pytest.MonkeyPatch, ds: DenseDataset | RaggedDataset, roll_over: Any
) -> list[bool]:
    """Makes the first call on any view roll `ds` over just before it enters the view, so that
    it meets the view closed (as a reader on another thread does when a rollover lands between
    its picking up the view and its native call). Returns a flag list: [True] once it fired."""
    from loaderx._store.view import View

    fired: list[bool] = []
    enter = View._enter

    def entering(view: View) -> int:
        if not fired:
            fired.append(True)
            roll_over()
            assert view.closed and ds.store.view is not view  # type: ignore[union-attr]
        return enter(view)

    monkeypatch.setattr(View, "_enter", entering)
    return fired


@pytest.mark.parametrize("read", ["len", "record_lengths", "ragged"])
def test_a_read_that_meets_a_replaced_view_reads_again_through_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    records = [np.arange(k, dtype=np.int32) for k in range(1, 32)]
    with RaggedDataset(tmp_path / "r", dtype=np.int32, codec="raw", shard_records=10) as ds:
        ds.append(records[:25])
        fired = _roll_over_when_first_entered(monkeypatch, ds, lambda: ds.append(records[25:]))
        if read == "len":
            assert len(ds) == 31
        elif read == "record_lengths":
            assert ds.store.record_lengths([0, 30]).tolist() == [4, 124]
        else:
            got = ds[[30, 3, 0]]
            assert [list(r) for r in got] == [list(range(31)), list(range(4)), [0]]
        assert fired == [True]
        assert len(ds.shard_stats()) == 4


def test_a_dense_read_that_meets_a_replaced_view_reads_again_through_the_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
        store = ds.store
        assert isinstance(store, sharded_store.ShardedStore)
        stale = store.view
        ds.append(np.arange(25, 31, dtype=np.int64))  # a fourth shard: `stale` is closed now
        assert stale is not None and stale.closed
        current = sharded_store.ShardedStore.view
        handed: list[bool] = []

        def view_once_stale(self: sharded_store.ShardedStore) -> Any:
            # The fast path picks up the stale view, as a reader does that a rollover on another
            # thread overtakes; the general path then reads through the current one.
            if not handed:
                handed.append(True)
                return stale
            return current.fget(self)  # type: ignore[attr-defined]

        monkeypatch.setattr(sharded_store.ShardedStore, "view", property(view_once_stale))
        picks = np.array([30, 0, 17, 25], dtype=np.int64)
        assert np.array_equal(ds[picks], picks)
        assert handed == [True]
        out = np.zeros(4, dtype=np.int64)
        handed.clear()
        ds.read(picks, out=out)
        assert np.array_equal(out, picks) and handed == [True]


def test_view_arguments_are_checked_before_the_native_call(tmp_path: Path) -> None:
    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    with pytest.raises(ValueError, match="at least one store"):
        View([], "nothing")
    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append([b"abcd", b"efgh"])
    view = View([store, store], "twice")  # the same store twice is two shards of it
    try:
        assert len(view) == 4
        out = np.zeros(3, dtype=np.uint32)
        view.gather_into(np.array([3, 0, 1], dtype=np.int64), out, 4)
        assert out.tobytes() == b"efghabcdefgh"
        with pytest.raises(TypeError, match="int64"):
            view.gather_into(np.array([0], dtype=np.int32), out[:1], 4)
        with pytest.raises(ValueError, match="need 8"):
            view.gather_into(np.array([0, 1], dtype=np.int64), out, 4)
        with pytest.raises(ValueError, match="record 0 is 4 bytes but its destination slot is 2"):
            view.gather_into(np.array([0], dtype=np.int64), np.zeros(1, np.uint16), 2)
        with pytest.raises(ValueError, match="one-dimensional C-contiguous"):
            view.gather_into(np.array([0, 1, 2, 3], dtype=np.int64)[::2], out[:2], 4)
        with pytest.raises(ValueError, match="out must be a writable C-contiguous"):
            view.gather_into(np.array([0, 1], dtype=np.int64), np.zeros(4, dtype=np.uint32)[::2], 4)
        frozen = np.zeros(1, dtype=np.uint32)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="out must be a writable C-contiguous"):
            view.gather_into(np.array([0], dtype=np.int64), frozen, 4)
        assert out.tobytes() == b"efghabcdefgh" and frozen[0] == 0  # nothing was written
        data, offsets = view.gather_ragged(np.array([2, 1], dtype=np.int64))
        assert data.tobytes() == b"abcdefgh" and offsets.tolist() == [0, 4, 8]
    finally:
        view.close()
        store.close()
    with pytest.raises(ValueError, match="closed"):
        len(view)
    with pytest.raises(ValueError, match="closed"):
        store.native_handle


def test_a_view_holds_its_stores_and_closing_a_store_closes_the_view(tmp_path: Path) -> None:
    # The view borrowed only the stores' handles: a store collected under it, or closed before
    # it, freed what the next view call read (a segmentation fault).
    import gc

    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    with Zrecord(tmp_path / "s", create=True, codec="raw") as store:
        store.append_fixed(np.arange(10, dtype=np.uint64), 8)
    view = View([Zrecord(tmp_path / "s")], "collected")
    gc.collect()
    out = np.zeros(2, dtype=np.uint64)
    view.gather_into(np.array([9, 0], dtype=np.int64), out, 8)
    assert out.tolist() == [9, 0] and len(view) == 10
    view.close()

    first = Zrecord(tmp_path / "s")
    second = Zrecord(tmp_path / "s")
    views = [View([first], "one"), View([second, first], "two"), View([second], "other")]
    first.close()
    for closed in views[:2]:
        with pytest.raises(ValueError, match="is closed"):
            len(closed)
        with pytest.raises(ValueError, match="is closed"):
            closed.gather_into(np.array([0], dtype=np.int64), out[:1], 8)
    assert len(views[2]) == 10  # a view over other stores only stays open
    with pytest.raises(ValueError, match="is closed"):
        View([second, first], "late")
    views[2].close()
    second.close()


def test_a_view_of_one_store_twice_never_deadlocks_with_a_writer(tmp_path: Path) -> None:
    # A gather touching both positions of the store used to take its shared lock twice: a
    # compaction queued between the two waited on the first while the second waited on it.
    import threading

    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append_fixed(np.arange(1000, dtype=np.uint64), 8)
    view = View([store, store], "twice")
    indices = np.array([0, 1999] * 100, dtype=np.int64)
    stop = threading.Event()
    failures: list[BaseException] = []

    def repeat(action: Any) -> None:
        try:
            while not stop.is_set():
                action()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    out = np.zeros(len(indices), dtype=np.uint64)
    threads = [
        threading.Thread(target=repeat, args=(lambda: view.gather_into(indices, out, 8),), daemon=True),
        threading.Thread(target=repeat, args=(store.compact,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    stop.wait(2.0)
    stop.set()
    for thread in threads:
        thread.join(10.0)
    stuck = [thread.is_alive() for thread in threads]
    assert stuck == [False, False] and failures == []
    assert out.tolist() == [0, 999] * 100
    view.close()
    store.close()


def test_the_python_limits_agree_with_the_library() -> None:
    import ctypes

    from loaderx._native import library as _native
    from loaderx._store.layout import RECORD_COUNT_MAX, SHARD_COUNT_MAX, SHARD_RECORDS_MAX
    from loaderx.zrecord import RECORD_COUNT_MAX as STORE_RECORDS_MAX

    assert SHARD_RECORDS_MAX == STORE_RECORDS_MAX
    assert RECORD_COUNT_MAX == SHARD_COUNT_MAX * SHARD_RECORDS_MAX == 1 << 44
    out = ctypes.c_void_p()
    # The count is checked before the (absent) handle array is read.
    code = _native.lib.lx_view_open(None, SHARD_COUNT_MAX + 1, ctypes.byref(out))
    assert code == _native.INVALID_ARGUMENT and out.value is None
    assert f"a view holds 1 to {SHARD_COUNT_MAX} stores" in _native.lib.lx_last_error().decode()
    assert _native.lib.lx_view_open(None, 0, ctypes.byref(out)) == _native.INVALID_ARGUMENT


def test_converters_overwrite_a_sharded_dataset_but_nothing_foreign(tmp_path: Path) -> None:
    from loaderx.converter import from_numpy

    path, _data = _sharded(tmp_path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        from_numpy(str(path), np.arange(5, dtype=np.int64))
    assert from_numpy(str(path), np.arange(5, dtype=np.int64), overwrite=True) == 5
    with DenseDataset(path) as ds:
        assert not ds.sharded and (ds[:] == np.arange(5)).all()
    path, _data = _sharded(tmp_path / "again")
    (path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        from_numpy(str(path), np.arange(5, dtype=np.int64), overwrite=True)


def test_a_store_out_of_chunk_space_rolls_over_early(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard whose chunk space runs out (deleted garbage) before its record limit: the
    append that does not fit goes to a new shard. Chunk space cannot really be filled in a
    test (4096 x 4 GiB), so the store reports full past 7 records, as it would."""
    from loaderx.errors import StoreFullError
    from loaderx.zrecord import Zrecord

    real = Zrecord.append_fixed

    def append_fixed(store: Zrecord, data: npt.NDArray[Any], record_size: int, **kw: Any) -> int:
        if len(store) + data.nbytes // record_size > 7:
            raise StoreFullError(f"append to {store.path!r}: out of chunk space")
        return real(store, data, record_size, **kw)

    monkeypatch.setattr(Zrecord, "append_fixed", append_fixed)
    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw") as ds:
        assert ds.append(np.arange(5, dtype=np.int64)) == 0
        assert ds.append(np.arange(5, 10, dtype=np.int64)) == 5  # does not fit: new shard
        assert ds.append(np.arange(10, 12, dtype=np.int64)) == 10
        assert [s["records"] for s in ds.shard_stats()] == [5, 7]
        with pytest.raises(StoreFullError):  # a batch no empty shard can take is refused
            ds.append(np.arange(9, dtype=np.int64))
        assert (ds[:] == np.arange(12)).all()


def test_the_command_line_reports_a_sharded_dataset_whole(tmp_path: Path) -> None:
    from loaderx.cli.inspection import info_of

    path, data = _sharded(tmp_path)
    info = info_of(str(path))
    assert info["records"] == COUNT
    assert info["logical_bytes"] == data.nbytes
    assert info["allocated_bytes"] >= data.nbytes  # the shard folders are counted too


def _flip_byte(chunk: Path, offset: int) -> None:
    with open(chunk, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_verify_names_bad_records_by_their_global_index(tmp_path: Path) -> None:
    import io
    import json

    from loaderx.cli import EXIT_PROBLEM, main
    from loaderx.verify import BadRecord

    path, data = _sharded(tmp_path)
    with DenseDataset(path) as ds:
        assert ds.sharded and ds.verify().ok
        ds.sync()  # every shard's store, nothing to report
    record = data[0].nbytes  # raw records sit in index order in each shard's 0.zr
    # Record 2 of the first shard (the dataset's own folder), 5 of the second, 7 of the third.
    _flip_byte(path / "0.zr", 2 * record + 1)
    _flip_byte(path / "shard-000001" / "0.zr", 5 * record)
    _flip_byte(path / "shard-000002" / "0.zr", 7 * record + 3)
    want = [BadRecord(2, "checksum"), BadRecord(CAPACITY + 5, "checksum"), BadRecord(2 * CAPACITY + 7, "checksum")]
    with DenseDataset(path) as ds:
        report = ds.verify()
        assert report.bad == want and report.bad_count == 3
        assert report.records == COUNT and report.checksummed == COUNT and report.has_checksums
        # The records beside them read back exactly.
        intact = np.array([1, 3, CAPACITY + 4, CAPACITY + 6, 2 * CAPACITY + 8, COUNT - 1])
        np.testing.assert_array_equal(ds[intact], data[intact])
    out = io.StringIO()
    assert main(["verify", str(path), "--json"], out=out) == EXIT_PROBLEM
    listed = json.loads(out.getvalue())
    assert listed["bad"] == [{"index": b.index, "reason": b.reason} for b in want]
    assert listed["records"] == COUNT and listed["ok"] is False


def test_retraining_the_dictionary_of_a_sharded_dataset_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    from loaderx.errors import DictionaryError

    data = _dense_data()
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="zstd_dict", dict_size=1024,
                      shard_records=CAPACITY) as ds:
        ds.train_dict(data[::5])
        ds.append(data)
        assert ds.sharded
        with pytest.raises(DictionaryError, match=r"shard-000002': the store already has a dictionary and 500 records"):
            ds.train_dict(data[::3])
        ds.append(data[:10])  # the shards' dictionary still compresses new records
    with DenseDataset(tmp_path / "d") as ds:
        np.testing.assert_array_equal(ds[np.arange(COUNT + 10)], np.concatenate([data, data[:10]]))


def test_a_ragged_view_gather_that_meets_a_delete_sizes_its_records_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sizing and copying are two native calls: a delete between them makes the copy refuse a
    slot of the wrong size (SIZE_MISMATCH), and the pair runs again, up to a limit."""
    from loaderx._native import library as _native
    from loaderx._store import shared_calls
    from loaderx._store.view import View
    from loaderx.zrecord import Zrecord

    store = Zrecord(tmp_path / "s", create=True, codec="raw")
    store.append([b"a", b"bcd", b"efghij"])
    view = View([store], "one")
    real = _native.lib.lx_view_gather
    calls: list[int] = []

    def refuse_first(*args: object) -> int:
        calls.append(1)
        return _native.SIZE_MISMATCH if len(calls) == 1 else int(real(*args))

    monkeypatch.setattr(_native.lib, "lx_view_gather", refuse_first)
    try:
        data, offsets = view.gather_ragged(np.array([2, 0, 1], dtype=np.int64))
        assert data.tobytes() == b"efghijabcd" and offsets.tolist() == [0, 6, 7, 10]
        assert len(calls) == 2
        # A copy refused every time gives up after a bounded number of rounds, with a message.
        calls.clear()

        def refuse_always(*args: object) -> int:
            calls.append(1)
            return _native.SIZE_MISMATCH

        monkeypatch.setattr(_native.lib, "lx_view_gather", refuse_always)
        with pytest.raises(ValueError, match="gather of 1 records from 'one'"):
            view.gather_ragged(np.array([1], dtype=np.int64))
        assert len(calls) == shared_calls._RAGGED_GATHER_ATTEMPTS
    finally:
        monkeypatch.undo()
        view.close()
        store.close()


def test_a_closed_sharded_dataset_raises_as_a_closed_store_does(tmp_path: Path) -> None:
    path, data = _sharded(tmp_path)
    ds = DenseDataset(path)
    ds.close()
    out = np.full((2, *SHAPE), 7, dtype=np.uint16)
    for call in (
        lambda: len(ds),
        lambda: ds[3],
        lambda: ds[[]],
        lambda: ds[:],
        lambda: ds.read(np.array([0, 1]), out=out),
        lambda: ds.gather_into(np.array([0, 1]), out),
        lambda: ds.append(data[:1]),
        lambda: ds.delete([0]),
        lambda: ds.stats(),
        lambda: ds.verify(),
        lambda: ds.compact(),
    ):
        with pytest.raises(ValueError, match="sharded dataset .* is closed"):
            call()
    assert (out == 7).all()
    with DenseDataset(path) as reopened:  # nothing changed
        assert reopened[:].tobytes() == data.tobytes()


@pytest.mark.parametrize("failing_call", [1, 3, 5])
def test_a_failed_append_across_shards_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    """The batch spans the tail and four new shards; whichever of its five store appends fails
    (the new shards are written first, the tail last), the dataset stays as it was."""
    from loaderx._store.layout import manifest_path
    from loaderx.zrecord import Zrecord

    path, data = _sharded(tmp_path)  # shards of 1000, 1000, 500
    more = _dense_data(4000)[::-1].copy()
    before = Path(manifest_path(str(path))).read_bytes()
    listing = sorted(os.listdir(path))
    original = Zrecord.append_fixed
    calls = []

    def flaky(store: Zrecord, rows: Any, record_size: int) -> int:
        calls.append(store.path)
        if len(calls) == failing_call:
            raise OSError(28, "No space left on device (injected)")
        return original(store, rows, record_size)

    with DenseDataset(path, shard_records=CAPACITY) as ds:
        monkeypatch.setattr(Zrecord, "append_fixed", flaky)
        with pytest.raises(OSError, match="injected"):
            ds.append(more)  # 500 into the tail, then 1000, 1000, 1000 and 500 in new shards
        monkeypatch.setattr(Zrecord, "append_fixed", original)
        assert len(ds) == COUNT and ds[:].tobytes() == data.tobytes()
        assert Path(manifest_path(str(path))).read_bytes() == before
        assert sorted(os.listdir(path)) == listing
        assert len(calls) == failing_call
        assert ds.append(more) == COUNT
        assert ds[:].tobytes() == np.concatenate([data, more]).tobytes()
    with DenseDataset(path) as reopened:
        assert reopened[:].tobytes() == np.concatenate([data, more]).tobytes()
        assert [s["records"] for s in reopened.shard_stats()] == [1000] * 6 + [500]


def test_a_killed_writers_staged_shards_go_with_the_next_commit(tmp_path: Path) -> None:
    """A staging folder is claimed by a lock on a marker beside it; one left by a process that
    died (its lock died with it) is removed by the next commit, a live one is not."""
    import subprocess
    import sys

    from loaderx._store.layout import STAGING_PREFIX
    from loaderx._store.staging import discard_staging, staging_folder

    path, data = _sharded(tmp_path)
    code = (
        "import os, sys\n"
        "from loaderx.shards import staging_folder\n"
        "staged = staging_folder(sys.argv[1])\n"
        "open(os.path.join(staged, '0.zr'), 'wb').write(b'x' * 65536)\n"
        "os._exit(0)  # as if killed: no cleanup runs\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    dead = [n for n in os.listdir(path) if n.startswith(STAGING_PREFIX)]
    assert len(dead) == 2  # the folder and its marker
    mine = staging_folder(path)
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        ds.append(data[:600])  # 500 fill the tail, 100 roll over: a commit
        assert ds[:].tobytes() == np.concatenate([data, data[:600]]).tobytes()
    left = sorted(n for n in os.listdir(path) if n.startswith(STAGING_PREFIX))
    assert left == sorted([os.path.basename(mine), os.path.basename(mine) + ".live"])
    discard_staging(mine)
    assert not [n for n in os.listdir(path) if n.startswith(STAGING_PREFIX)]


_KILLED_APPEND = """
import os, sys
import numpy as np
import loaderx._store.shard_append
from loaderx.dataset import DenseDataset
from loaderx.zrecord import Zrecord

path, where, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = np.load(sys.argv[4])
original_append = Zrecord.append_fixed
original_commit = loaderx._store.shard_append.commit_shards_locked

def append_fixed(store, data, record_size):
    tail = ".staging-" not in store.path
    if tail and where == "before-tail":
        os._exit(9)
    first = original_append(store, data, record_size)
    if tail and where == "after-tail":
        os._exit(9)
    return first

def commit_shards_locked(*args, **kwargs):
    if where == "before-manifest":
        os._exit(9)
    return original_commit(*args, **kwargs)

Zrecord.append_fixed = append_fixed
loaderx._store.shard_append.commit_shards_locked = commit_shards_locked
with DenseDataset(path, shard_records=count) as ds:
    ds.append(rows)
os._exit(0)
"""


@pytest.mark.parametrize("layout", ["sharded", "single store"])
@pytest.mark.parametrize("where", ["before-manifest", "before-tail", "after-tail"])
def test_a_killed_append_across_shards_is_all_or_nothing(
    tmp_path: Path, layout: str, where: str
) -> None:
    """A process dies at each step of an append that spans the tail and new shards: before its
    manifest write, after it but before the tail's part (the commit point), and after the tail's
    part but before the final manifest write. Readers see the dataset as it was in the first
    two cases and with the whole batch in the third; the next write settles it on disk and
    removes what the dead process left."""
    import subprocess
    import sys

    import msgpack

    from loaderx._store.layout import STAGING_PREFIX, manifest_path
    from loaderx._store.manifest import MANIFEST_VERSION_APPENDING

    if layout == "sharded":
        path, data = _sharded(tmp_path)  # shards of 1000, 1000, 500
    else:
        data = _dense_data(700)
        path = tmp_path / "single"
        with DenseDataset(path, dtype=data.dtype, item_shape=SHAPE, codec="raw") as ds:
            ds.append(data)
    more = _dense_data(3200)[::-1].copy()  # the tail's room, then new shards
    np.save(tmp_path / "more.npy", more)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_APPEND, str(path), where, str(CAPACITY),
         str(tmp_path / "more.npy")],
        capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert done.returncode == 9, done.stderr
    expected = np.concatenate([data, more]) if where == "after-tail" else data
    if where != "before-manifest":
        manifest = read_manifest(path)
        assert manifest is not None and manifest.appending is not None  # left in flight
        raw = msgpack.unpackb(Path(manifest_path(str(path))).read_bytes())
        assert raw["version"] == MANIFEST_VERSION_APPENDING
    with DenseDataset(path, readonly=True) as reader:
        assert len(reader) == len(expected) and reader[:].tobytes() == expected.tobytes()
    extra = _dense_data(CAPACITY)  # spans again: the next writer settles, then commits
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        assert ds.append(extra) == len(expected)
        assert ds[:].tobytes() == np.concatenate([expected, extra]).tobytes()
    manifest = read_manifest(path)
    assert manifest is not None and manifest.appending is None
    assert not any(entry.pending for entry in manifest.shards)
    names = os.listdir(path)
    assert not [n for n in names if n.startswith((STAGING_PREFIX, ".claim-"))]
    assert sorted(n for n in names if n.startswith("shard-")) == sorted(
        e.name for e in manifest.shards if e.name != "."
    )
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tobytes() == np.concatenate([expected, extra]).tobytes()
        counts = [s["records"] for s in reopened.shard_stats()]
        assert sum(counts) == len(expected) + CAPACITY and max(counts) == CAPACITY


_KILLED_DELETE = """
import os, sys
import numpy as np
import loaderx._store.shard_delete
from loaderx.dataset import DenseDataset

path, where = sys.argv[1], sys.argv[2]
targets = [int(i) for i in sys.argv[3].split(",")]
original_delete = loaderx._store.shard_delete.delete_each
original_write = loaderx._store.shard_delete.write_manifest

def delete_each(stores, indices, name):
    if where == "before-shards":
        os._exit(9)
    if where in ("between-shards", "held-between-shards"):
        original_delete(stores[:1], indices[:1], name)
        if where == "held-between-shards":  # others start to open meanwhile
            print("between", flush=True)
            import time
            time.sleep(1.0)
        os._exit(9)
    original_delete(stores, indices, name)
    os._exit(9)

def write_manifest(folder, manifest):
    if where == "before-manifest":
        os._exit(9)
    original_write(folder, manifest)

loaderx._store.shard_delete.delete_each = delete_each
loaderx._store.shard_delete.write_manifest = write_manifest
with DenseDataset(path, shard_records=1000) as ds:
    if len(sys.argv) > 4:  # new shards first, for a delete in shards no other handle holds
        loaderx._store.shard_delete.write_manifest = original_write
        ds.append(np.load(sys.argv[4]))
        loaderx._store.shard_delete.write_manifest = write_manifest
    ds.delete(targets)
os._exit(0)
"""


@pytest.mark.parametrize("where", ["before-manifest", "between-shards", "after-shards"])
def test_a_killed_delete_over_several_shards_is_finished_by_the_next_open(
    tmp_path: Path, where: str
) -> None:
    """A process dies in a delete over three shards: after writing its journal, after the first
    shard's part, or after every shard's but before settling the manifest. A read-only open sees
    the dataset as it was or as after the delete, and refuses a half-done one by name; the next
    writable open finishes the delete, exactly as the dead process would have."""
    from loaderx._store.delete_journal import JOURNAL_FILE
    from loaderx.errors import ReadOnlyStoreError

    path, data, expected = _killed_delete(tmp_path, where)  # shards of 1000, 1000, 500
    assert (path / JOURNAL_FILE).exists()
    if where == "between-shards":
        with pytest.raises(ReadOnlyStoreError, match="half done; open the dataset writable"):
            DenseDataset(path, readonly=True)
    else:
        with DenseDataset(path, readonly=True) as reader:
            seen = data if where == "before-manifest" else expected
            assert reader[:].tobytes() == seen.tobytes()
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        final = data if where == "before-manifest" else expected
        assert len(ds) == len(final) and ds[:].tobytes() == final.tobytes()
    assert not (path / JOURNAL_FILE).exists()
    manifest = read_manifest(path)
    assert manifest is not None
    assert all(entry.records_before is None for entry in manifest.shards)
    with DenseDataset(path, readonly=True) as reopened:
        assert [e.records for e in manifest.shards] == [
            int(s["records"]) for s in reopened.shard_stats()
        ]


def test_a_delete_journal_is_removed_after_every_delete(tmp_path: Path) -> None:
    """Done, refused (a shard open elsewhere) or across one shard: no journal stays behind."""
    from loaderx._store.delete_journal import JOURNAL_FILE
    from loaderx.errors import StoreLockedError
    from loaderx.zrecord import Zrecord

    path, data = _sharded(tmp_path)
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        ds.delete([0, 1999])
        assert not (path / JOURNAL_FILE).exists()
        with Zrecord(str(path / "shard-000002"), create=False):
            with pytest.raises(StoreLockedError):
                ds.delete([3, 2400])
        assert not (path / JOURNAL_FILE).exists()
        ds.delete([10])
        assert not (path / JOURNAL_FILE).exists()
        assert len(ds) == COUNT - 3


@pytest.mark.parametrize("then", ["append", "delete"])
@pytest.mark.parametrize("where", ["between-shards", "after-shards"])
def test_a_writer_opened_before_a_killed_delete_finishes_it_first(
    tmp_path: Path, where: str, then: str
) -> None:
    """A handle opened before another process added shards and died in a delete over them: its
    next write finishes that delete (or settles it) first, so the delete is neither left half
    done nor, once its shards all moved, applied a second time over the new records."""
    import subprocess
    import sys

    from loaderx._store.delete_journal import JOURNAL_FILE

    data = _dense_data(1500)
    path = tmp_path / "d"
    with DenseDataset(path, dtype=data.dtype, item_shape=SHAPE, codec="raw",
                      shard_records=CAPACITY) as ds:
        ds.append(data)  # shards of 1000 and 500
    more = _dense_data(3000)[::-1].copy()  # 500 into the tail, then shards 2, 3 and 4
    np.save(tmp_path / "more.npy", more)
    targets = [2005, 2999, 3000, 3500, 4001, 4499, 2017]  # in the new shards only
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    row = _dense_data(1)
    with DenseDataset(reference, shard_records=CAPACITY) as ds:
        ds.append(more)
        ds.delete(targets)
        ds.append(row) if then == "append" else ds.delete([0])
        expected = ds[:]
    with DenseDataset(path, shard_records=CAPACITY) as early:
        done = subprocess.run(
            [sys.executable, "-c", _KILLED_DELETE, str(path), where, ",".join(map(str, targets)),
             str(tmp_path / "more.npy")],
            capture_output=True, text=True, timeout=120,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        assert done.returncode == 9, done.stderr
        assert (path / JOURNAL_FILE).exists()
        early.append(row) if then == "append" else early.delete([0])
        assert early[:].tobytes() == expected.tobytes()
    assert not (path / JOURNAL_FILE).exists()
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as reopened:
            assert reopened[:].tobytes() == expected.tobytes()


def test_a_delete_whose_last_manifest_write_fails_is_settled_by_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every shard deleted, then the manifest write that settles it fails (a full disk): the
    delete raises, the handle still reads what the shards hold, the journal is gone (it can
    never be applied again), and the next write settles the manifest."""
    from loaderx._store.delete_journal import JOURNAL_FILE

    path, data = _sharded(tmp_path)
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    row = _dense_data(1)
    with DenseDataset(reference, shard_records=CAPACITY) as ds:
        ds.delete([5, 1000, 2001])
        ds.append(row)
        expected = ds[:]
    original = shard_delete.write_manifest  # type: ignore[attr-defined]
    writes = []

    def failing_third(folder: str, manifest: Any) -> None:
        writes.append(folder)
        if len(writes) == 2:  # the first is the pending counts, the second settles them
            raise OSError(28, "No space left on device (injected)")
        original(folder, manifest)

    with DenseDataset(path, shard_records=CAPACITY) as ds:
        monkeypatch.setattr("loaderx._store.shard_delete.write_manifest", failing_third)
        with pytest.raises(OSError, match="injected"):
            ds.delete([5, 1000, 2001])
        monkeypatch.setattr("loaderx._store.shard_delete.write_manifest", original)
        assert not (path / JOURNAL_FILE).exists()  # its native call returned: its job is done
        assert len(ds) == COUNT - 3 and ds[:].tobytes() == expected[:-1].tobytes()
        ds.append(row)
        assert ds[:].tobytes() == expected.tobytes()
    assert not (path / JOURNAL_FILE).exists()
    with DenseDataset(path) as reopened:
        assert reopened[:].tobytes() == expected.tobytes()


def test_a_delete_that_empties_the_first_shard(tmp_path: Path) -> None:
    """Every record of shard 0 deleted: the dataset reads on from the next shard, before and
    after reopening (the native view once aborted on an empty first shard)."""
    data = np.arange(20, dtype=np.int64)
    with DenseDataset(tmp_path / "d", dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(data)
        ds.delete(np.arange(10))
        assert ds[:].tolist() == list(range(10, 20))
        assert [s["records"] for s in ds.shard_stats()] == [0, 10]
        assert ds[[0, 9, -1]].tolist() == [10, 19, 19]
    for readonly in (True, False):
        with DenseDataset(tmp_path / "d", readonly=readonly) as reopened:
            assert reopened[:].tolist() == list(range(10, 20))
    with DenseDataset(tmp_path / "d", shard_records=10) as ds:
        ds.append(np.array([20], dtype=np.int64))
        ds.delete(np.arange(10))  # the second shard empty too: only the new one holds records
        assert ds[:].tolist() == [20]
    with DenseDataset(tmp_path / "d", readonly=True) as reopened:
        assert reopened[:].tolist() == [20] and len(reopened) == 1


def _single_store_of_six(tmp_path: Path) -> Path:
    """A single-store int64 dataset holding 0..5."""
    path = tmp_path / "single"
    with DenseDataset(path, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(6, dtype=np.int64))
    return path


# The head of the scripts that play another process appending to the same dataset.
_OTHER_PROCESS = "import sys\nimport numpy as np\nfrom loaderx.dataset import DenseDataset\n"

_DELETER = """
import sys, time
import numpy as np
from loaderx.dataset import DenseDataset
from loaderx.errors import StoreLockedError

path, seconds = sys.argv[1], float(sys.argv[2])
rng = np.random.default_rng(1)
deleted = 0
with DenseDataset(path, shard_records=10) as ds:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            ds.delete(rng.choice(len(ds), 3, replace=False))
            deleted += 1
            ds.append(np.arange(1000 + 3 * deleted, 1003 + 3 * deleted, dtype=np.int64))
        except StoreLockedError:
            pass  # a reader has the shards open right now
print(deleted)
"""


@pytest.mark.parametrize("readonly", [True, False])
def test_opening_while_another_process_deletes(tmp_path: Path, readonly: bool) -> None:
    """Opens, read-only or writable, while another process deletes and appends without pause:
    every open succeeds and reads a dataset of the right length (an open once read the
    manifest, then found shards that a delete had moved meanwhile: 'the counts disagree')."""
    import subprocess
    import sys

    path = tmp_path / "d"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(400, dtype=np.int64))
    deleter = subprocess.Popen(
        [sys.executable, "-c", _DELETER, str(path), "4"], stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    opened = 0
    try:
        while deleter.poll() is None:
            with DenseDataset(path, readonly=readonly, shard_records=10) as ds:
                # Between one of its deletes and its append, or after both, or with the part
                # of the append that went into the shard this handle has open (the shards open
                # here keep any delete out while this handle lives, not the next append).
                values = ds[:]
                assert 397 <= len(values) <= 400 and len(np.unique(values)) == len(values)
            opened += 1
    finally:
        out, _ = deleter.communicate(timeout=60)
    assert deleter.returncode == 0
    assert opened > 20 and int(out) > 20, (opened, out)


def test_two_processes_append_to_one_dataset(tmp_path: Path) -> None:
    """Another process holds the last shard's writer lock (from its first append until it
    closes): an append here seals that shard where it is and goes on in a new one, spanning
    or not, instead of failing; every record lands once, in order."""
    import subprocess
    import sys

    path = tmp_path / "d"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(15, dtype=np.int64))
    code = _OTHER_PROCESS + (
        "with DenseDataset(sys.argv[1], shard_records=10) as other:\n"
        "    other.append(np.arange(16, 18, dtype=np.int64))\n"
        "    other.append(np.arange(18, 43, dtype=np.int64))\n"
    )
    with DenseDataset(path, shard_records=10) as mine:
        mine.append(np.array([15], dtype=np.int64))  # this process now writes the tail
        done = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        assert done.returncode == 0, done.stderr
        # The other closed: its last shard takes these, its writer lock being free again.
        mine.append(np.arange(43, 45, dtype=np.int64))
        assert mine[:].tolist() == list(range(45))
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tolist() == list(range(45))
        counts = [s["records"] for s in reopened.shard_stats()]
    # 10 and 6 (ours, sealed at 6 when the other could not write it), then the other's 2 and 25
    # from a new shard on, then our 2 in its last one.
    assert counts == [10, 6, 10, 10, 9], counts


def _killed_delete(tmp_path: Path, where: str) -> tuple[Path, npt.NDArray[Any], npt.NDArray[Any]]:
    """The three shards of _sharded, a delete over all of them killed at `where` in another
    process; returns the path, the data before and the data the delete leaves."""
    import subprocess
    import sys

    path, data = _sharded(tmp_path)
    expected = _after_delete(tmp_path, path, _TARGETS)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_DELETE, str(path), where, ",".join(map(str, _TARGETS))],
        capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert done.returncode == 9, done.stderr
    return path, data, expected


# A delete over all three shards of _sharded.
_TARGETS = [5, 999, 1000, 1500, 2001, 2499, 17]


def _after_delete(tmp_path: Path, path: Path, targets: list[int]) -> npt.NDArray[Any]:
    """What the dataset at path holds after deleting targets, done on a copy of it."""
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    with DenseDataset(reference, shard_records=CAPACITY) as ds:
        ds.delete(targets)
        result: npt.NDArray[Any] = ds[:]
    return result


def test_a_killed_delete_waits_while_readers_hold_its_shards(tmp_path: Path) -> None:
    """Killed before any shard moved, with a reader open on that consistent state: a writable
    open still opens (reads are consistent), but every write refuses, rather than write over the
    shards the journal has still to delete from, until the readers close; then the next write
    finishes the delete first."""
    from loaderx._store.delete_journal import JOURNAL_FILE
    from loaderx.errors import StoreLockedError

    path, data, expected = _killed_delete(tmp_path, "before-shards")
    row = _dense_data(1)
    with DenseDataset(path, readonly=True) as reader:
        assert reader[:].tobytes() == data.tobytes()
        with DenseDataset(path, shard_records=CAPACITY) as writer:
            assert writer[:].tobytes() == data.tobytes()
            for _ in range(2):
                with pytest.raises(StoreLockedError):
                    writer.append(row)
            assert (path / JOURNAL_FILE).exists()
            reader.close()
            writer.append(row)
            assert writer[:].tobytes() == np.concatenate([expected, row]).tobytes()
    assert not (path / JOURNAL_FILE).exists()
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tobytes() == np.concatenate([expected, row]).tobytes()


def test_commits_refuse_a_killed_delete_until_a_writable_open_finishes_it(tmp_path: Path) -> None:
    """commit_shards (and every parallel conversion with append=True) has no handle on the
    shards to finish a half-done delete with: it refuses, by name, and changes nothing."""
    from loaderx.errors import ReadOnlyStoreError
    from loaderx.shards import commit_shards, staging_folder

    path, data, expected = _killed_delete(tmp_path, "between-shards")
    staged = staging_folder(path)
    with DenseDataset(staged, dtype=data.dtype, item_shape=SHAPE, codec="raw") as shard:
        shard.append(data[:10])
        schema = shard.schema
    with pytest.raises(ManifestError, match="interrupted by a crash; open the dataset writable"):
        commit_shards(path, [staged], schema)
    with pytest.raises(ManifestError, match="interrupted by a crash"):
        from_numpy(str(path), data[:10], codec="raw", workers=2, append=True)
    with pytest.raises(ReadOnlyStoreError, match="half done"):
        DenseDataset(path, readonly=True)
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        assert ds[:].tobytes() == expected.tobytes()
    commit_shards(path, [staged], schema)
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tobytes() == np.concatenate([expected, data[:10]]).tobytes()


def test_an_open_that_waited_for_a_killed_delete_finishes_it(tmp_path: Path) -> None:
    """A writable open that starts while another process's delete is running waits for it;
    when that process dies between shards, the open finishes the delete."""
    import subprocess
    import sys

    from loaderx._store.delete_journal import JOURNAL_FILE

    path, data = _sharded(tmp_path)
    expected = _after_delete(tmp_path, path, _TARGETS)
    deleter = subprocess.Popen(
        [sys.executable, "-c", _KILLED_DELETE, str(path), "held-between-shards",
         ",".join(map(str, _TARGETS))],
        stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    try:
        assert deleter.stdout is not None and deleter.stdout.readline() == "between\n"
        with DenseDataset(path, shard_records=CAPACITY) as ds:  # waits, then finishes it
            assert deleter.poll() == 9
            assert ds[:].tobytes() == expected.tobytes()
            assert not (path / JOURNAL_FILE).exists()
    finally:
        deleter.wait(60)


def test_a_refused_delete_never_runs_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delete refused (a shard open elsewhere) whose manifest cannot be put back (a full
    disk): the caller gets the error, and no later write carries the delete out."""
    from loaderx._store.delete_journal import JOURNAL_FILE
    from loaderx.zrecord import Zrecord

    path, data = _sharded(tmp_path)
    original = shard_delete.write_manifest  # type: ignore[attr-defined]
    calls = []

    def failing_restore(folder: str, manifest: Any) -> None:
        calls.append(folder)
        if len(calls) == 2:  # the first writes the pending counts, the second puts them back
            raise OSError(28, "No space left on device (injected)")
        original(folder, manifest)

    row = _dense_data(1)
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        with Zrecord(str(path / "shard-000002"), create=False):
            monkeypatch.setattr("loaderx._store.shard_delete.write_manifest", failing_restore)
            with pytest.raises(OSError, match="injected"):
                ds.delete([3, 2400])
            monkeypatch.setattr("loaderx._store.shard_delete.write_manifest", original)
        assert not (path / JOURNAL_FILE).exists()
        ds.append(row)
        assert ds[:].tobytes() == np.concatenate([data, row]).tobytes()
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tobytes() == np.concatenate([data, row]).tobytes()
        manifest = read_manifest(path)
        assert manifest is not None and all(e.records_before is None for e in manifest.shards)


def test_a_single_store_writer_elsewhere_is_never_sealed_under(tmp_path: Path) -> None:
    """Another process appends to a single-store dataset (no commit lock): an append here that
    would roll over refuses with StoreLockedError and changes nothing, instead of sealing the
    store that the other process goes on appending to."""
    import subprocess
    import sys

    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    code = _OTHER_PROCESS + (
        "with DenseDataset(sys.argv[1]) as other:\n"
        "    other.append(np.arange(6, 7, dtype=np.int64))\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    other.append(np.arange(7, 9, dtype=np.int64))\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "holding\n"
        with DenseDataset(path, shard_records=10) as mine:
            with pytest.raises(StoreLockedError):
                mine.append(np.arange(100, 104, dtype=np.int64))  # 7 + 4 > 10: rolls over
        assert read_manifest(path) is None
        assert other.stdin is not None
        other.stdin.write("go\n")
        other.stdin.flush()
    finally:
        other.wait(60)
    assert other.returncode == 0
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as reopened:
            assert reopened[:].tolist() == list(range(9))


def test_a_failed_delete_is_never_finished_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The native delete stops after its first shard (injected: a full disk no longer can,
    tests/store/test_zrecord_space.py), and then the manifest write that states the partial result
    fails too: the caller was told it failed, with the first shard's part done, and no later
    write carries out the rest."""
    from loaderx._store.delete_journal import JOURNAL_FILE

    path, data = _sharded(tmp_path)
    original_delete = shard_delete.delete_each
    original_write = shard_delete.write_manifest  # type: ignore[attr-defined]
    writes = []

    def first_shard_then_full(stores: Any, indices: Any, name: str) -> None:
        original_delete(stores[:1], indices[:1], name)
        raise OSError(28, "No space left on device (injected)")

    def failing_settle(folder: str, manifest: Any) -> None:
        writes.append(folder)
        if len(writes) == 2:
            raise OSError(28, "No space left on device (injected)")
        original_write(folder, manifest)

    row = _dense_data(1)
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        monkeypatch.setattr("loaderx._store.shard_delete.delete_each", first_shard_then_full)
        monkeypatch.setattr("loaderx._store.shard_delete.write_manifest", failing_settle)
        with pytest.raises(OSError, match="injected"):
            ds.delete([5, 1500])
        monkeypatch.undo()
        first = data[:CAPACITY].copy()
        first[5] = data[CAPACITY - 1]  # swap-last within the first shard
        partial = np.concatenate([first[: CAPACITY - 1], data[CAPACITY:]])
        assert ds[:].tobytes() == partial.tobytes()
        assert not (path / JOURNAL_FILE).exists()
        ds.append(row)
        assert ds[:].tobytes() == np.concatenate([partial, row]).tobytes()
    with DenseDataset(path, readonly=True) as reopened:
        assert reopened[:].tobytes() == np.concatenate([partial, row]).tobytes()


_OPENER = """
import sys
from loaderx.dataset import DenseDataset

with DenseDataset(sys.argv[1], shard_records=1000) as ds:
    sys.stdout.buffer.write(ds[:].tobytes())
"""


def test_concurrent_opens_of_a_half_done_delete_all_finish_it(tmp_path: Path) -> None:
    """A delete killed between shards, then four processes open the dataset writable at once
    and two more read-only: no open is refused for the others' handles, one of the writable ones
    finishes the delete, and every writable one reads its result."""
    import subprocess
    import sys

    path, data, expected = _killed_delete(tmp_path, "between-shards")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    writers = [
        subprocess.Popen([sys.executable, "-c", _OPENER, str(path)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=root)
        for _ in range(4)
    ]
    reader_code = _OPENER.replace("shard_records=1000", "readonly=True")
    readers = [
        subprocess.Popen([sys.executable, "-c", reader_code, str(path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root)
        for _ in range(2)
    ]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err.decode()
        assert out == expected.tobytes()
    for reader in readers:  # the half-done state refused, or the finished one read
        out, err = reader.communicate(timeout=120)
        assert (reader.returncode == 0 and out == expected.tobytes()) or (
            reader.returncode != 0 and b"half done" in err
        ), err.decode()


def test_temporary_files_of_killed_writes_go_with_the_next_commit_or_delete(tmp_path: Path) -> None:
    """A process killed while writing the manifest or a delete's journal leaves its temporary
    file; every such write holds the commit lock, so the next delete or commit removes them."""
    path, data = _sharded(tmp_path)
    for name in ("shards.msgpack.tmp-11-aaaa", "shards.delete.tmp-12-bbbb"):
        (path / name).write_bytes(b"x" * 4096)
    (path / "notes.tmp-1").write_bytes(b"mine")  # not ours: stays
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        ds.delete([1])
        assert sorted(n for n in os.listdir(path) if ".tmp-" in n) == ["notes.tmp-1"]
        (path / "shards.msgpack.tmp-13-cccc").write_bytes(b"x")
        ds.append(_dense_data(600))  # spans: a commit
    assert sorted(n for n in os.listdir(path) if ".tmp-" in n) == ["notes.tmp-1"]


def _roll_over_in_another_process(path: Path | str) -> None:
    """Another process appends records 6..14 to the single store of six at path with
    shard_records=10: the store is sealed as shard '.' at 10 records, the rest a new shard."""
    import subprocess
    import sys

    code = _OTHER_PROCESS + (
        "with DenseDataset(sys.argv[1], shard_records=10) as other:\n"
        "    other.append(np.arange(6, 15, dtype=np.int64))  # rolls over: '.' sealed at 10\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert done.returncode == 0, done.stderr


def test_a_single_store_handle_never_appends_past_a_rollover_elsewhere(tmp_path: Path) -> None:
    """A handle opened the dataset as a single store and has not appended yet; another process
    (with a smaller shard_records) rolls it over, sealing the store. The first handle's append
    then refuses, saying to reopen, instead of growing the sealed store behind the manifest;
    reopened, it appends as a sharded dataset."""
    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    with DenseDataset(path) as early:
        _roll_over_in_another_process(path)
        with pytest.raises(StoreLockedError, match="became a sharded dataset in another process"):
            early.append(np.arange(100, 102, dtype=np.int64))
    with DenseDataset(path, shard_records=10) as reopened:
        reopened.append(np.arange(15, 17, dtype=np.int64))
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == list(range(17))


def test_an_open_refused_before_its_manifest_loads_never_looks_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writable open that must settle a delete first, and cannot even open a shard (held
    exclusively elsewhere, say by a long compaction): it raises, rather than hand back a handle
    that reads as an empty dataset."""
    from loaderx._store.delete_journal import write_journal
    from loaderx.errors import StoreLockedError
    from loaderx._store.shard_set import ShardSet

    path, data = _sharded(tmp_path)
    write_journal(str(path), [])  # a stale journal: the open goes the settling way

    def held(self: ShardSet, entry: Any) -> Any:
        raise StoreLockedError("held exclusively elsewhere (injected)")

    monkeypatch.setattr(ShardSet, "open_shard", held)
    with pytest.raises(StoreLockedError, match="injected"):
        DenseDataset(path, shard_records=CAPACITY)
    monkeypatch.undo()
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        assert ds[:].tobytes() == data.tobytes()


def test_a_commit_never_seals_a_single_store_that_a_handle_writes(tmp_path: Path) -> None:
    """A handle has appended to a single-store dataset (it is the store's writer) when a
    parallel conversion appends to the same path: the commit that would seal the store as
    shard '.' refuses and changes nothing, so the handle's next append cannot land behind the
    manifest; once the handle closes, the conversion goes through."""
    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    more = np.arange(100, 120, dtype=np.int64)
    with DenseDataset(path) as writer:
        writer.append(np.arange(6, 8, dtype=np.int64))
        with pytest.raises(StoreLockedError):
            from_numpy(str(path), more, codec="raw", workers=2, append=True)
        assert read_manifest(path) is None
        writer.append(np.arange(8, 10, dtype=np.int64))
    assert from_numpy(str(path), more, codec="raw", workers=2, append=True) == len(more)
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == list(range(10)) + more.tolist()


@pytest.mark.parametrize("kind", ["dense", "ragged"])
def test_a_shard_opened_by_itself_refuses_writes_that_change_its_count(
    tmp_path: Path, kind: str
) -> None:
    """Appending to or deleting from a shard folder opened as a dataset of its own changed the
    count its manifest lists: the sharded dataset then refused to open ("the counts disagree")."""
    path = tmp_path / "ds"
    values = np.arange(25, dtype=np.int64)
    if kind == "dense":
        with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
            ds.append(values)  # shards ".", shard-000001, shard-000002
        shard: DenseDataset | RaggedDataset = DenseDataset(path / "shard-000001")
        more: Any = np.arange(3, dtype=np.int64)
    else:
        with RaggedDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
            ds.append([values[i : i + 1] for i in range(25)])
        shard = RaggedDataset(path / "shard-000001")
        more = [np.arange(3, dtype=np.int64)]
    with shard:
        assert not shard.sharded and len(shard) == 10  # reading it is fine
        with pytest.raises(ValueError, match="append refused: .* is a shard of the sharded dataset"):
            shard.append(more)
        with pytest.raises(ValueError, match="delete refused: .* is a shard of the sharded dataset"):
            shard.delete([0])
        assert len(shard) == 10
    opened = DenseDataset(path) if kind == "dense" else RaggedDataset(path)
    with opened:
        assert len(opened) == 25
        opened.append(more)  # through the dataset, both still work
        opened.delete([0])
        assert len(opened) == 25 + len(more) - 1


def test_a_plain_zrecord_on_a_shard_refuses_writes_that_change_it(tmp_path: Path) -> None:
    """A Zrecord opened by itself on a shard folder appended, deleted and compacted: the
    manifest then listed another count than the shard held, and the sharded dataset refused to
    open. It reads the shard as before; every such write refuses, naming the dataset, and
    changes nothing. The dataset's own writes to the same shards still work."""
    path = tmp_path / "ds"
    values = np.arange(25, dtype=np.int64)
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(values)  # shards ".", shard-000001, shard-000002
    real = os.path.realpath(path)
    for folder, what, held in (
        (path / "shard-000001", "a shard", values[10:20]),
        (path, "the top-level store \\(shard '.'\\)", values[:10]),
    ):
        refused = f"refused: Zrecord .* is {what} of the sharded dataset '{real}'"
        with Zrecord(folder) as store:
            assert b"".join(store.gather(slice(None))) == held.tobytes()  # reading is fine
            with pytest.raises(ValueError, match=f"append {refused}.*append through it"):
                store.append([np.int64(7).tobytes()])
            with pytest.raises(ValueError, match=f"append {refused}"):
                store.append_fixed(np.arange(3, dtype=np.int64), 8)
            with pytest.raises(ValueError, match=f"append {refused}"):
                store.claim_writer()
            with pytest.raises(ValueError, match=f"delete {refused}.*delete through it"):
                store.delete([0])
            with pytest.raises(ValueError, match=f"compact {refused}"):
                store.compact()
            with pytest.raises(ValueError, match=f"train_dict {refused}"):
                store.train_dict([b"sample"] * 8, 1024)
            assert b"".join(store.gather(slice(None))) == held.tobytes()
    with DenseDataset(path / "shard-000001") as shard:
        with pytest.raises(ValueError, match="compact refused: .* is a shard of the sharded dataset"):
            shard.compact()
    with DenseDataset(path, shard_records=10) as ds:
        assert ds[:].tolist() == values.tolist()
        ds.delete([0])  # the dataset's own handles on its shards still write them
        ds.append(np.arange(25, 40, dtype=np.int64))
        ds.compact()
        # Swap-last within shard '.': its last record (9) fills the hole.
        expected = [9, *range(1, 9), *range(10, 40)]
        assert ds[:].tolist() == expected
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == expected


def test_a_plain_zrecord_never_appends_past_a_rollover(tmp_path: Path) -> None:
    """A plain Zrecord opened a single-store dataset and had not written yet when the dataset
    rolled over (its store became shard '.'): its first append refuses instead of growing the
    sealed store behind the manifest. Once it has written, it is the store's writer, and the
    rollover refuses instead (StoreLockedError), leaving a single store that goes on taking
    its appends."""
    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    with Zrecord(path) as early, Zrecord(path) as writer:
        writer.append([np.int64(6).tobytes()])
        with DenseDataset(path, shard_records=10) as ds, pytest.raises(StoreLockedError):
            ds.append(np.arange(7, 15, dtype=np.int64))
        writer.append([np.int64(7).tobytes()])
        assert read_manifest(path) is None
    with Zrecord(path) as early:
        with DenseDataset(path, shard_records=10) as ds:
            ds.append(np.arange(8, 15, dtype=np.int64))  # rolls over: '.' sealed at 10
        with pytest.raises(ValueError, match="append refused: .* top-level store"):
            early.append([np.int64(99).tobytes()])
        assert len(early) == 10
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == list(range(15))


def test_a_single_store_handle_never_deletes_past_a_rollover_elsewhere(tmp_path: Path) -> None:
    """A handle opened the dataset as a single store; another process rolled it over, sealing
    the store as shard '.'. The first handle's delete used to take a record out of the sealed
    store, which the manifest lists with its count: the dataset then refused to open ("the
    counts disagree"). Its delete, compact and train_dict now refuse, saying to reopen, and
    change nothing; reopened, it deletes through the sharded dataset."""
    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    with DenseDataset(path) as early:
        _roll_over_in_another_process(path)
        reopen = "became a sharded dataset in another process or handle .* open it again"
        with pytest.raises(StoreLockedError, match=f"delete refused: .*{reopen}"):
            early.delete([0])
        with pytest.raises(StoreLockedError, match=f"compact refused: .*{reopen}"):
            early.compact()
        assert early[:].tolist() == list(range(10))  # what it opened: the sealed store
    with DenseDataset(path, shard_records=10) as reopened:
        assert reopened[:].tolist() == list(range(15))
        reopened.delete([0])
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == [9, *range(1, 9), *range(10, 15)]


# The maintenance calls a plain Zrecord refuses on a shard, with sample arguments.
_MAINTENANCE: dict[str, Any] = {
    "delete": lambda store: store.delete([0]),
    "compact": lambda store: store.compact(),
    "train_dict": lambda store: store.train_dict([b"s" * 64] * 40, 1024),
}


@pytest.mark.parametrize(
    ("operation", "opened_by"),
    [
        ("delete", "absolute path"),
        ("compact", "absolute path"),
        ("train_dict", "absolute path"),
        ("delete", "relative path, then chdir"),
    ],
)
def test_a_plain_zrecord_never_changes_a_store_rolled_over_right_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str, opened_by: str
) -> None:
    """A plain Zrecord on a single store checked that no manifest listed the store, and then
    deleted, compacted or trained its dictionary. Another process could roll the store over
    (sealing it as shard '.' with its count in the manifest) between the check and the native
    call, which then went through: after a delete the dataset no longer opened ("the counts
    disagree"). The call now makes the handle the store's writer and checks again, so it
    refuses and changes nothing. The pause is injected right after the first check, where the
    other process rolls the store over."""
    from loaderx._store import zrecord as zrecord_module

    path = _single_store_of_six(tmp_path)
    plain_lookup = zrecord_module.sharded_dataset_of  # type: ignore[attr-defined]
    rolled: list[bool] = []

    def lookup_then_roll_over(folder: str) -> str | None:
        found = plain_lookup(folder)
        if not rolled:  # the first check has passed: another process rolls the store over now
            rolled.append(True)
            _roll_over_in_another_process(path)
        return found

    monkeypatch.setattr(zrecord_module, "sharded_dataset_of", lookup_then_roll_over)
    opened = path
    if opened_by != "absolute path":
        monkeypatch.chdir(tmp_path)
        opened = Path(path.name)
    with Zrecord(opened) as store:
        if opened_by != "absolute path":
            (tmp_path / "elsewhere").mkdir()
            monkeypatch.chdir(tmp_path / "elsewhere")
        refused = "is the top-level store \\(shard '.'\\) of the sharded dataset"
        with pytest.raises(ValueError, match=f"{operation} refused: Zrecord .* {refused}"):
            _MAINTENANCE[operation](store)
        assert rolled
        assert not store.has_dict
        assert b"".join(store.gather(slice(None))) == np.arange(10, dtype=np.int64).tobytes()
    assert not (path / "dict.zr").exists()
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == list(range(15))


def test_a_plain_zrecord_never_deletes_from_a_staged_store_committed_right_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same race through commit_shards: a plain Zrecord on a staged shard checked that its
    folder was still where it opened it, and then another handle committed the folder into the
    dataset (a rename) before the native delete, which went through on a listed shard. The
    delete's second check, with the store held exclusively, sees the folder moved and refuses."""
    from loaderx._store import zrecord as zrecord_module
    from loaderx.shards import commit_shards, staging_folder

    path = tmp_path / "corpus"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
        schema = ds.schema
    staged = staging_folder(path)
    with DenseDataset(staged, dtype=np.int64, codec="raw") as shard:
        shard.append(np.arange(25, 30, dtype=np.int64))
    plain_lookup = zrecord_module.sharded_dataset_of  # type: ignore[attr-defined]
    committed: list[bool] = []

    def lookup_then_commit(folder: str) -> str | None:
        found = plain_lookup(folder)
        if not committed:  # the first check has passed: another handle commits the folder now
            committed.append(True)
            commit_shards(path, [staged], schema)
        return found

    monkeypatch.setattr(zrecord_module, "sharded_dataset_of", lookup_then_commit)
    with Zrecord(staged) as store:
        with pytest.raises(ValueError, match="delete refused: the folder of Zrecord .* was moved"):
            store.delete([0])
        assert committed
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == list(range(30))


@pytest.mark.parametrize("operation", ["delete", "compact"])
def test_a_single_store_dataset_handle_never_changes_a_store_rolled_over_right_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str
) -> None:
    """A dataset handle that opened its folder as a single store (and never appended, so it is
    not the store's writer) deletes or compacts: its check found no manifest, and then another
    process rolled the dataset over before the native call, which changed the sealed store (a
    delete took a record out of it: the dataset no longer opened, "the counts disagree"). The
    check now runs again inside the call, with the store held exclusively; it refuses, saying
    to reopen. The pause is injected right after the first check, where the other process
    rolls over."""
    from loaderx._data import dataset_base as dataset_module
    from loaderx.errors import StoreLockedError

    path = _single_store_of_six(tmp_path)
    plain_lookup = dataset_module.sharded_dataset_of  # type: ignore[attr-defined]
    rolled: list[bool] = []

    def lookup_then_roll_over(folder: str) -> str | None:
        found = plain_lookup(folder)
        if not rolled:
            rolled.append(True)
            _roll_over_in_another_process(path)
        return found

    monkeypatch.setattr(dataset_module, "sharded_dataset_of", lookup_then_roll_over)
    with DenseDataset(path) as early:
        with pytest.raises(StoreLockedError, match=f"{operation} refused: .*became a sharded"):
            if operation == "delete":
                early.delete([0])
            else:
                early.compact()
        assert rolled
    for readonly in (True, False):
        with DenseDataset(path, readonly=readonly) as ds:
            assert ds[:].tolist() == list(range(15))


def test_a_delete_never_runs_on_a_store_another_thread_rolls_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One handle, two threads: a delete had taken the single store and was about to delete
    when another thread's append rolled the store over (shard '.', its count in the manifest).
    The delete then took a record out of the sealed store and the dataset no longer opened.
    The delete now holds the rollover lock from its check to its end, so the rollover waits
    and seals the store at its count after the delete. The pause is injected: the delete waits
    inside Zrecord.delete for the rollover to finish (at most 1.5 s, when it is kept out)."""
    import threading

    from loaderx._store import zrecord as zrecord_module

    path = _single_store_of_six(tmp_path)
    paused = threading.Event()
    go = threading.Event()
    plain_normalize = zrecord_module.normalize_index  # type: ignore[attr-defined]
    deleter: list[int] = []

    def pausing_normalize(index: object, length: int) -> Any:
        if deleter and threading.get_ident() == deleter[0]:
            paused.set()
            go.wait(10)
        return plain_normalize(index, length)

    monkeypatch.setattr(zrecord_module, "normalize_index", pausing_normalize)
    errors: list[BaseException] = []

    def run(body: Any) -> None:
        try:
            body()
        except BaseException as error:  # reported by the test thread
            errors.append(error)

    with DenseDataset(path, shard_records=10) as ds:
        ds.append(np.arange(6, 8, dtype=np.int64))  # this handle writes its single store
        def delete_first() -> None:
            deleter.append(threading.get_ident())
            ds.delete([0])

        delete = threading.Thread(target=run, args=(delete_first,))
        delete.start()
        assert paused.wait(10)
        append = threading.Thread(
            target=run, args=(lambda: ds.append(np.arange(8, 15, dtype=np.int64)),)
        )
        append.start()
        append.join(1.5)  # ends at once before the fix; waits for the delete after it
        go.set()
        delete.join(10)
        append.join(10)
        assert not delete.is_alive() and not append.is_alive()
        assert not errors, errors
    with DenseDataset(path, readonly=True) as reopened:
        assert sorted(reopened[:].tolist()) == [*range(1, 15)]
        assert reopened.verify().bad_count == 0


def test_a_commit_refuses_a_staged_shard_another_handle_writes(tmp_path: Path) -> None:
    """commit_shards renamed a staged store that a handle still had open for writing: the
    handle's next append went into what had become a listed shard (its path, the old staging
    folder, no longer showed it), and the dataset no longer opened ("the counts disagree").
    The commit now claims each staged store's writer lock: it refuses while a handle writes one,
    changing nothing, and commits once that handle is closed."""
    from loaderx.errors import StoreLockedError
    from loaderx.shards import commit_shards, staging_folder

    path = tmp_path / "corpus"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
    before = (path / "shards.msgpack").read_bytes()
    staged = [staging_folder(path), staging_folder(path)]
    writer = DenseDataset(staged[0], dtype=np.int64, codec="raw")
    writer.append(np.arange(25, 30, dtype=np.int64))
    with DenseDataset(staged[1], dtype=np.int64, codec="raw") as other:
        other.append(np.arange(30, 32, dtype=np.int64))
    with pytest.raises(StoreLockedError, match="commit refused: staged shard .* is open for writing"):
        commit_shards(path, staged, writer.schema)
    assert (path / "shards.msgpack").read_bytes() == before
    assert all(os.path.isdir(folder) for folder in staged)
    writer.append(np.arange(100, 101, dtype=np.int64))  # still its own store: it may write
    writer.close()
    commit_shards(path, staged, writer.schema)
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == [*range(30), 100, 30, 31]


@pytest.mark.parametrize("handle", ["zrecord", "dataset"])
def test_a_handle_on_a_staged_folder_never_writes_it_once_committed(
    tmp_path: Path, handle: str
) -> None:
    """A handle opened a staged shard and had not written when commit_shards renamed the
    folder into the dataset as a shard. Its shard check looked at its path, the old staging
    folder, and let its append grow the listed shard: the dataset no longer opened. A handle
    whose folder moved now refuses its first write, changing nothing."""
    from loaderx.shards import commit_shards, staging_folder

    path = tmp_path / "corpus"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
    staged = [staging_folder(path), staging_folder(path)]
    for values, folder in ((range(25, 30), staged[0]), (range(30, 32), staged[1])):
        with DenseDataset(folder, dtype=np.int64, codec="raw") as shard:
            shard.append(np.array(values, dtype=np.int64))
            schema = shard.schema
    early: Zrecord | DenseDataset = (
        Zrecord(staged[0]) if handle == "zrecord" else DenseDataset(staged[0])
    )
    with early:
        commit_shards(path, staged, schema)
        with pytest.raises(ValueError, match="append refused: .* was moved or replaced"):
            if isinstance(early, Zrecord):
                early.append([np.int64(99).tobytes()])
            else:
                early.append(np.array([99], dtype=np.int64))
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == list(range(32))


def test_a_plain_zrecord_opened_by_a_relative_path_checks_its_own_folder_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Zrecord opened on a shard by a relative path looked for the manifest relative to the
    current directory at its first write: after a chdir it found none there and appended to
    the shard, and the dataset no longer opened. It now checks the folder it opened."""
    path = tmp_path / "ds"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with Zrecord(os.path.join("ds", "shard-000001")) as store:
        monkeypatch.chdir(tmp_path / "elsewhere")
        with pytest.raises(ValueError, match="append refused: .* is a shard of the sharded dataset"):
            store.append([np.int64(99).tobytes()])
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == list(range(25))
