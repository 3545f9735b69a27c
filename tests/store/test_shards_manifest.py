"""The shard manifest: parsing, atomic writes, and commit_shards (creation, appends, refusals,
rollback, crash leftovers, concurrent committers)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from pathlib import Path

import msgpack
import numpy as np
import pytest

from loaderx.dataset import DenseDataset
from loaderx.errors import ManifestError, SchemaError
from loaderx._store.schema import SCHEMA_FILE, Codec, make_schema, read_schema
from loaderx._store.layout import MANIFEST_FILE, SHARD_COUNT_MAX, shard_name
from loaderx._store.manifest import Manifest, ShardEntry, parse_manifest, read_manifest, write_manifest
from loaderx._store.shard_commit import commit_shards
from loaderx._store.staging import staging_folder

SCHEMA = make_schema("dense", np.int64, (), "raw", "balanced")


def _stage(dataset: Path, values: np.ndarray, codec: Codec = "raw") -> str:
    """One complete single-store shard holding `values`, built in a staging folder."""
    folder = staging_folder(dataset)
    with DenseDataset(folder, dtype=values.dtype, item_shape=(), codec=codec) as ds:
        ds.append(values)
    return folder


def _listing(folder: Path) -> dict[str, bytes]:
    """Every file under folder with its bytes (the dataset as the disk holds it)."""
    found: dict[str, bytes] = {}
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".zr"):
                found[os.path.relpath(path, folder)] = b"store"  # sparse 4 GiB: compare by name
            else:
                found[os.path.relpath(path, folder)] = Path(path).read_bytes()
    return found


def test_manifest_round_trip_and_atomic_write(tmp_path: Path) -> None:
    manifest = Manifest([ShardEntry(".", 5), ShardEntry("shard-000001", 7, 9)], generation=3)
    write_manifest(tmp_path, manifest)
    assert os.listdir(tmp_path) == [MANIFEST_FILE]  # no temporary file left behind
    back = read_manifest(tmp_path)
    assert back is not None
    assert back.generation == 3
    assert back.shards == manifest.shards
    assert back.records == 12
    assert read_manifest(tmp_path / "nothing") is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"format": "other"}, "not a loaderx shard manifest"),
        ({"format": "loaderx-shards", "version": 3, "generation": 0, "shards": []}, "version 3"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": ".", "records": 5, "records_after": 7}, {"name": "shard-000001", "records": 3, "pending": True}]}, "malformed append in flight"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5, "records_after": 7}]}, "malformed append in flight"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5}, {"name": "shard-000001", "records": 3, "pending": True}]}, "malformed append in flight"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5, "records_after": 7}, {"name": "shard-000001", "records": 3, "pending": True}, {"name": "shard-000002", "records": 3}]}, "malformed append in flight"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5, "records_after": 5}, {"name": "shard-000001", "records": 3, "pending": True}]}, "records_after not above"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5, "records_after": 7}, {"name": "shard-000001", "records": 3, "pending": 1}]}, "bad pending 1"),
        ({"format": "loaderx-shards", "version": 2, "generation": 0, "shards": [{"name": ".", "records": 5, "records_before": 6}, {"name": "shard-000001", "records": 5, "records_after": 7}, {"name": "shard-000002", "records": 3, "pending": True}]}, "an append in flight in a manifest mid-delete"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "x", "records": 1}]}, "bad name"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "shard-000000", "records": -1}]}, "bad records"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "shard-000000", "records": 1 << 25}]}, "at most"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "shard-000000", "records": 1}, {"name": ".", "records": 1}]}, "only be shard 0"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "shard-000001", "records": 1}]}, "the first shard is 'shard-000001'; .* an entry is missing"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": "shard-000000", "records": 1}] * 2}, "twice"),
        ({"format": "loaderx-shards", "version": 0, "generation": 0, "shards": []}, "bad manifest version 0"),
        ({"format": "loaderx-shards", "version": True, "generation": 0, "shards": []}, "bad manifest version True"),
        ({"format": "loaderx-shards", "version": 1, "generation": -1, "shards": []}, "bad generation -1"),
        ({"format": "loaderx-shards", "version": 1, "generation": "0", "shards": []}, "bad generation '0'"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": {}}, "'shards' must be a list"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [0] * (SHARD_COUNT_MAX + 1)}, f"lists {SHARD_COUNT_MAX + 1} shards; the limit is {SHARD_COUNT_MAX}"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [[".", 1]]}, "shard entry 0 is not a map"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": ".", "records": 5, "records_before": 4}]}, "records_before below records"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": ".", "records": 5, "records_before": False}]}, "bad records_before False"),
        ({"format": "loaderx-shards", "version": 1, "generation": 0, "shards": [{"name": ".", "records": 5, "recosds_before": 6}]}, r"shard entry 0 has unknown fields \['recosds_before'\]"),
    ],
)
def test_malformed_manifests_are_refused(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        parse_manifest(msgpack.packb(raw), "m")
    with pytest.raises(ManifestError, match="not a valid msgpack"):
        parse_manifest(b"\xc1", "m")


def test_commit_creates_a_dataset_and_appends_shards(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    first = _stage(dataset, np.arange(10, dtype=np.int64))
    second = _stage(dataset, np.arange(10, 13, dtype=np.int64))
    manifest = commit_shards(dataset, [first, second], SCHEMA)
    assert manifest.names == [shard_name(0), shard_name(1)]
    assert [e.records for e in manifest.shards] == [10, 3]
    assert not os.path.exists(first) and not os.path.exists(second)
    assert read_schema(str(dataset)) == SCHEMA
    third = _stage(dataset, np.arange(4, dtype=np.int64))
    again = commit_shards(dataset, [third], SCHEMA)
    assert again.names == ["shard-000000", "shard-000001", "shard-000002"]
    assert again.generation == manifest.generation + 1
    with DenseDataset(os.path.join(dataset, "shard-000002")) as shard:
        assert (shard[:] == np.arange(4)).all()


def test_a_single_store_dataset_becomes_shard_zero(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    with DenseDataset(dataset, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(6, dtype=np.int64))
    manifest = commit_shards(dataset, [_stage(dataset, np.arange(2, dtype=np.int64))], SCHEMA)
    assert manifest.names == [".", "shard-000001"]
    assert [e.records for e in manifest.shards] == [6, 2]


def test_refusals_leave_the_dataset_unchanged(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    commit_shards(dataset, [_stage(dataset, np.arange(3, dtype=np.int64))], SCHEMA)
    other = _stage(dataset, np.arange(3, dtype=np.int64), codec="zstd")
    before = _listing(dataset)
    with pytest.raises(SchemaError, match="codec: store has 'zstd', asked for 'raw'"):
        commit_shards(dataset, [other], SCHEMA)
    assert _listing(dataset) == before
    with pytest.raises(FileNotFoundError, match="not a folder"):
        commit_shards(dataset, [str(tmp_path / "missing")], SCHEMA)
    empty = staging_folder(dataset)
    with pytest.raises(ManifestError, match="no meta.zr"):
        commit_shards(dataset, [empty], SCHEMA)
    wrong = make_schema("dense", np.int32, (), "raw", "balanced")
    with pytest.raises(SchemaError, match="another schema than the shards"):
        commit_shards(dataset, [], wrong)
    good = _stage(dataset, np.arange(2, dtype=np.int64))
    schemaless = _stage(dataset, np.arange(2, dtype=np.int64))
    os.unlink(os.path.join(schemaless, SCHEMA_FILE))
    staged_before = _listing(dataset)  # the staging folders live inside the dataset's
    with pytest.raises(ValueError, match="a staged shard folder is listed twice"):
        commit_shards(dataset, [good, good + os.sep], SCHEMA)
    with pytest.raises(ManifestError, match="is itself sharded; stage single stores"):
        commit_shards(dataset, [str(dataset)], SCHEMA)
    with pytest.raises(SchemaError, match=r"staged shard .* has no schema.msgpack"):
        commit_shards(dataset, [good, schemaless], SCHEMA)
    assert _listing(dataset) == staged_before
    assert [e.records for e in read_manifest(dataset).shards] == [3]  # type: ignore[union-attr]
    # A bare store (meta.zr, no schema) is not a dataset shards may be added to.
    bare = tmp_path / "bare"
    shutil.copytree(schemaless, bare)
    with pytest.raises(SchemaError, match="is a Zrecord store without schema.msgpack; refusing to add shards"):
        commit_shards(bare, [good], SCHEMA)
    assert not (bare / MANIFEST_FILE).exists() and os.path.isdir(good)


def test_an_oversized_manifest_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    with open(tmp_path / MANIFEST_FILE, "wb") as f:
        f.truncate((1 << 26) + 1)  # sparse: one byte past the limit
    with pytest.raises(ManifestError, match="is too large to be a loaderx shard manifest"):
        read_manifest(tmp_path)


def test_a_failed_move_moves_everything_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = tmp_path / "ds"
    commit_shards(dataset, [_stage(dataset, np.arange(3, dtype=np.int64))], SCHEMA)
    staged = [_stage(dataset, np.arange(n, dtype=np.int64)) for n in (1, 2)]
    before = _listing(dataset)
    real_rename = os.rename
    calls: list[str] = []

    def failing_rename(src: str, dst: str) -> None:
        calls.append(src)
        if len(calls) == 2:
            raise OSError(18, "Invalid cross-device link")
        real_rename(src, dst)

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(OSError, match="cross-device"):
        commit_shards(dataset, staged, SCHEMA)
    monkeypatch.undo()
    assert _listing(dataset) == before
    assert all(os.path.isdir(path) for path in staged)


def test_a_failed_first_commit_removes_the_schema_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dataset = tmp_path / "ds"
    staged = _stage(dataset, np.arange(3, dtype=np.int64))

    def failing_write(folder: object, manifest: Manifest) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("loaderx._store.shard_commit.write_manifest", failing_write)
    with pytest.raises(OSError, match="No space"):
        commit_shards(dataset, [staged], SCHEMA)
    # The staged shard stays, still claimed by this process (its marker beside it).
    assert sorted(os.listdir(dataset)) == sorted(
        [os.path.basename(staged), os.path.basename(staged) + ".live", "shards.lock"]
    )


def test_unlisted_shard_folders_are_removed_by_the_next_commit(tmp_path: Path) -> None:
    dataset = tmp_path / "ds"
    commit_shards(dataset, [_stage(dataset, np.arange(3, dtype=np.int64))], SCHEMA)
    leftover = _stage(dataset, np.arange(3, dtype=np.int64))
    os.rename(leftover, dataset / "shard-000001")  # a crash between the move and the manifest
    manifest = commit_shards(dataset, [_stage(dataset, np.arange(5, dtype=np.int64))], SCHEMA)
    assert manifest.names == ["shard-000000", "shard-000001"]
    assert [e.records for e in manifest.shards] == [3, 5]


def test_a_shard_folder_of_the_dataset_is_refused_as_a_staged_shard(tmp_path: Path) -> None:
    # Committing one of the dataset's own shards renamed it to the next shard's name: the
    # manifest then listed a folder that was gone and the dataset no longer opened.
    dataset = tmp_path / "ds"
    with DenseDataset(dataset, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))  # shards ".", shard-000001, shard-000002
    single = tmp_path / "single"
    with DenseDataset(single, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(4, dtype=np.int64))
    unlisted = _stage(dataset, np.arange(2, dtype=np.int64))
    os.rename(unlisted, dataset / "shard-000007")  # named like a shard: the commit removes those
    cases = [(dataset, dataset / "shard-000001"), (dataset, dataset / "shard-000002" / "."),
             (dataset, dataset / "shard-000007"), (single, single)]
    for target, staged in cases:
        before = _listing(target)
        with pytest.raises(ValueError, match="is a shard folder of .* already; build new shards "
                           r"in staging_folder\(path\)"):
            commit_shards(target, [str(staged)], SCHEMA)
        after = _listing(target)
        for listing in (before, after):  # the commit lock's file, made before anything is checked
            listing.pop("shards.lock", None)
        assert after == before
    with DenseDataset(dataset, readonly=True) as ds:
        assert ds[:].tolist() == list(range(25))
    with DenseDataset(single, readonly=True) as ds:
        assert not ds.sharded and ds[:].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_file_under_the_next_shards_name_is_removed_by_the_next_commit(
    tmp_path: Path, kind: str
) -> None:
    """A stray file (or dangling link) named like the next shard: rmtree could not remove it,
    and every append that rolled over then failed to move its shard there (NotADirectoryError),
    for good."""
    dataset = tmp_path / "ds"
    with DenseDataset(dataset, dtype=np.int64, codec="raw", shard_records=100) as ds:
        ds.append(np.arange(250, dtype=np.int64))
    stray = dataset / "shard-000003"
    if kind == "file":
        stray.write_bytes(b"x")
    else:
        stray.symlink_to(tmp_path / "nowhere")
    with DenseDataset(dataset, shard_records=100) as ds:
        assert ds.append(np.arange(250, 500, dtype=np.int64)) == 250
        assert ds[:].tolist() == list(range(500))
    assert (dataset / "shard-000003").is_dir() and not (dataset / "shard-000003").is_symlink()
    with DenseDataset(dataset, readonly=True) as reader:
        assert [s["records"] for s in reader.shard_stats()] == [100, 100, 100, 100, 100]


def _commit_worker(dataset: str, value: int, rounds: int) -> None:
    for _ in range(rounds):
        commit_shards(dataset, [_stage(Path(dataset), np.full(value, value, dtype=np.int64))], SCHEMA)


def test_concurrent_committers_lose_nothing(tmp_path: Path) -> None:
    dataset = str(tmp_path / "ds")
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_commit_worker, args=(dataset, value, 4)) for value in (1, 2, 3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    manifest = read_manifest(dataset)
    assert manifest is not None
    assert len(manifest.shards) == 12
    assert sorted(e.records for e in manifest.shards) == [1] * 4 + [2] * 4 + [3] * 4
    for entry in manifest.shards:
        with DenseDataset(os.path.join(dataset, entry.name)) as shard:
            assert (shard[:] == entry.records).all()


def test_a_damaged_delete_journal_is_refused_by_name(tmp_path: Path) -> None:
    """A journal that is not one, or whose indices fall outside their shard, is refused at the
    writable open that would finish the delete, naming the file; nothing is deleted."""
    import shutil
    import zlib

    import msgpack
    import numpy as np

    from loaderx.dataset import DenseDataset
    from loaderx._store.delete_journal import JOURNAL_FILE, ShardDelete, read_journal, write_journal
    from loaderx._store.manifest import read_manifest, write_manifest

    good = tmp_path / "good"
    with DenseDataset(good, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
    manifest = read_manifest(good)
    assert manifest is not None
    manifest.shards[0].records_before = manifest.shards[0].records
    manifest.shards[0].records -= 1
    write_manifest(good, manifest)  # as a killed delete leaves it, before any shard moved
    write_journal(str(good), [ShardDelete(manifest.shards[0].name, 10, np.array([3]))])
    [part] = read_journal(str(good)) or []
    assert (part.name, part.records_before, part.indices.tolist()) == (manifest.shards[0].name, 10, [3])
    written = (good / JOURNAL_FILE).read_bytes()
    record = msgpack.unpackb(written)
    assert record["version"] == 2 and record["check"] == zlib.crc32(record["shards"])
    other_index = msgpack.packb([{"name": manifest.shards[0].name, "records_before": 10,
                                  "indices": np.array([4], "<i8").tobytes()}])
    flipped = bytearray(written)
    flipped[written.index(np.array([3], "<i8").tobytes())] ^= 0x01  # index 3 becomes 2
    for name, content in [
        # Damage that still names a record of the shard: only the check tells.
        ("other index", msgpack.packb({**record, "shards": other_index})),
        ("flipped bit", bytes(flipped)),
        ("no check", msgpack.packb({**record, "check": None})),
        ("version 3", msgpack.packb({**record, "version": 3})),
        ("garbage", b"\xc1 not msgpack"),
        ("outside", msgpack.packb({"format": "loaderx-delete", "version": 1, "shards": [
            {"name": manifest.shards[0].name, "records_before": 10,
             "indices": np.array([10], "<i8").tobytes()}]})),
        ("twice", msgpack.packb({"format": "loaderx-delete", "version": 1, "shards": [
            {"name": manifest.shards[0].name, "records_before": 10,
             "indices": np.array([2, 2], "<i8").tobytes()}]})),
    ]:
        broken = tmp_path / name
        shutil.copytree(good, broken)
        (broken / JOURNAL_FILE).write_bytes(content)
        with pytest.raises(ManifestError, match=JOURNAL_FILE.replace(".", r"\.")):
            DenseDataset(broken, shard_records=10)
        with DenseDataset(broken, readonly=True) as reader:  # read-only: nothing half done
            assert reader[:].tolist() == list(range(25))
    # A version 1 journal (no check; a delete killed under an older loaderx) is still finished.
    older = tmp_path / "older"
    shutil.copytree(good, older)
    (older / JOURNAL_FILE).write_bytes(msgpack.packb({
        "format": "loaderx-delete", "version": 1, "shards": msgpack.unpackb(record["shards"])}))
    for folder in (good, older):  # the intact journal is finished
        with DenseDataset(folder, shard_records=10) as ds:
            assert ds[:].tolist() == [0, 1, 2, 9, 4, 5, 6, 7, 8] + list(range(10, 25))


def test_a_damaged_key_never_makes_a_half_done_delete_readable(tmp_path: Path) -> None:
    """A delete over two shards killed between them: shard 0 deleted, shard 1 not, both marked
    in the manifest. One flipped bit in shard 0's "records_before" key made the entry read as
    settled, and a read-only open served the half-done delete (record 3 gone, record 13 kept)
    as if it were a dataset; an unknown field is now refused as the damage it is."""
    from loaderx._store.delete_journal import ShardDelete, write_journal
    from loaderx.errors import ReadOnlyStoreError
    from loaderx.zrecord import Zrecord

    path = tmp_path / "d"
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(np.arange(25, dtype=np.int64))
    manifest = read_manifest(path)
    assert manifest is not None and [e.name for e in manifest.shards][:2] == [".", "shard-000001"]
    for entry in manifest.shards[:2]:
        entry.records_before, entry.records = 10, 9
    write_manifest(path, manifest)
    write_journal(str(path), [ShardDelete(".", 10, np.array([3])),
                              ShardDelete("shard-000001", 10, np.array([3]))])
    # The killed delete got this far: shard 0 only (its own handle, as the dataset opens it).
    with Zrecord(path, _dataset_owned=True) as store:
        store.delete(np.array([3]))
    with pytest.raises(ReadOnlyStoreError, match="half done"):
        DenseDataset(path, readonly=True)
    data = (path / MANIFEST_FILE).read_bytes()
    at = data.index(b"records_before")
    (path / MANIFEST_FILE).write_bytes(data[:at + 4] + b"s" + data[at + 5:])  # r -> s: one bit
    with pytest.raises(ManifestError, match=r"shards\.msgpack: shard entry 0 has unknown fields"):
        DenseDataset(path, readonly=True)
    with pytest.raises(ManifestError, match=r"shards\.msgpack: shard entry 0 has unknown fields"):
        DenseDataset(path, shard_records=10)


def test_the_manifest_signature_tells_two_versions_apart_when_their_stat_agrees(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewritten manifest can get the freed inode, the size and the coarse mtime of the one
    before it; the signature a writer checks before every write still differs, by generation."""
    import os

    from loaderx._store import shard_set
    from loaderx._store.manifest import Manifest, ShardEntry, write_manifest

    folder = str(tmp_path)
    write_manifest(folder, Manifest([ShardEntry("shard-000001", 7)], generation=5))
    real_fstat = os.fstat
    fd = os.open(os.path.join(folder, "shards.msgpack"), os.O_RDONLY)
    first_stat = real_fstat(fd)
    os.close(fd)
    monkeypatch.setattr(os, "fstat", lambda fd: first_stat)  # same inode, size and mtime
    before = shard_set.manifest_signature(folder)
    write_manifest(folder, Manifest([ShardEntry("shard-000001", 8)], generation=6))
    after = shard_set.manifest_signature(folder)
    assert before is not None and after is not None
    assert before[:3] == after[:3] and before != after


def _three_shards(path: Path, count: int = 25) -> np.ndarray:
    """A dataset of shards '.', shard-000001, shard-000002 of up to 10 records each."""
    values = np.arange(count, dtype=np.int64)
    with DenseDataset(path, dtype=np.int64, codec="raw", shard_records=10) as ds:
        ds.append(values)
    manifest = read_manifest(path)
    assert manifest is not None
    assert [(e.name, e.records) for e in manifest.shards] == [
        (".", 10), ("shard-000001", 10), ("shard-000002", count - 20)
    ]
    return values


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        # Five indices where the manifest says one record goes: four records more deleted.
        ([("shard-000001", 10, [0, 1, 2, 3, 4])],
         r"takes shard 'shard-000001' from 10 to 5 records, shards\.msgpack from 10 to 9"),
        # A part for a shard the delete never touched.
        ([("shard-000001", 10, [3]), (".", 10, [0, 1])],
         r"deletes from shard '\.', which shards\.msgpack does not show mid-delete"),
        # The same shard twice (lx_stores_delete refused it with a bare ValueError).
        ([("shard-000001", 10, [3]), ("shard-000001", 10, [4])], "lists a shard twice"),
        # The manifest's shard has no part: it would be settled undeleted.
        ([], r"shows shards \['shard-000001'\] mid-delete but .*shards\.delete has no part"),
    ],
)
def test_a_delete_journal_that_disagrees_with_the_manifest_deletes_nothing(
    tmp_path: Path, parts: list[tuple[str, int, list[int]]], message: str
) -> None:
    """A killed delete's journal and manifest are written by one delete: a journal that names
    other shards or other counts is damaged, and finishing it deleted records the delete never
    selected (data loss at a writable open)."""
    from loaderx._store.delete_journal import ShardDelete, write_journal

    path = tmp_path / "d"
    values = _three_shards(path)
    manifest = read_manifest(path)
    assert manifest is not None
    manifest.shards[1].records_before, manifest.shards[1].records = 10, 9
    write_manifest(path, manifest)  # a delete of one record of shard-000001, killed early
    write_journal(str(path), [ShardDelete(name, before, np.array(local, np.int64))
                              for name, before, local in parts])
    with pytest.raises(ManifestError, match=message):
        DenseDataset(path, shard_records=10)
    with DenseDataset(path, readonly=True) as reader:  # nothing moved
        assert reader[:].tolist() == values.tolist()


def test_a_manifest_with_two_shard_names_swapped_is_refused_not_read_shuffled(
    tmp_path: Path,
) -> None:
    """Shards of equal counts swapped in the manifest passed every count check and read each
    other's records at the wrong global indices."""
    path = tmp_path / "d"
    values = _three_shards(path, count=30)
    raw = msgpack.unpackb((path / MANIFEST_FILE).read_bytes())
    shards = raw["shards"]
    shards[1]["name"], shards[2]["name"] = "shard-000002", "shard-000001"
    (path / MANIFEST_FILE).write_bytes(msgpack.packb(raw))
    for readonly in (True, False):
        with pytest.raises(ManifestError, match=r"shards\.msgpack: shard 'shard-000002' follows "
                           r"'\.'; shards are listed in consecutive order"):
            DenseDataset(path, readonly=readonly, shard_records=10)
    with DenseDataset(path / "shard-000001", readonly=True) as shard:
        assert (shard[:] == values[10:20]).all()  # nothing was written


def test_a_manifest_missing_a_middle_shard_is_refused_and_the_shard_kept(tmp_path: Path) -> None:
    """A manifest that lost the entry of a middle shard read the later shards at shifted
    indices, and the next rollover removed the unlisted shard folder as a crash's leftover."""
    path = tmp_path / "d"
    values = _three_shards(path)
    raw = msgpack.unpackb((path / MANIFEST_FILE).read_bytes())
    del raw["shards"][1]
    (path / MANIFEST_FILE).write_bytes(msgpack.packb(raw))
    with pytest.raises(ManifestError, match=r"shard 'shard-000002' follows '\.'; .* an entry is "
                       "missing or out of place"):
        DenseDataset(path, readonly=True, shard_records=10)
    with pytest.raises(ManifestError, match="an entry is missing or out of place"):
        with DenseDataset(path, shard_records=10) as ds:
            ds.append(np.arange(20, dtype=np.int64))  # a rollover: it removed shard-000001
    with DenseDataset(path / "shard-000001", readonly=True) as shard:
        assert (shard[:] == values[10:20]).all()


def test_a_folder_in_place_of_the_manifest_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The open read the manifest's first bytes for its signature and got a bare
    IsADirectoryError that named no file."""
    from loaderx import cli

    path = tmp_path / "d"
    _three_shards(path)
    (path / MANIFEST_FILE).unlink()
    (path / MANIFEST_FILE).mkdir()
    expected = f"{path / MANIFEST_FILE} is a folder, not a loaderx shard manifest"
    for readonly in (True, False):
        with pytest.raises(ManifestError, match=expected):
            DenseDataset(path, readonly=readonly, shard_records=10)
    assert cli.main(["info", str(path)]) == 1
    assert capsys.readouterr().err == f"loaderx info: {expected}\n"


def test_a_manifest_at_the_largest_generation_still_takes_writes(tmp_path: Path) -> None:
    """A manifest whose generation is msgpack's largest integer (a damaged type byte makes
    one) opened, and its next write failed with a bare OverflowError naming nothing; the
    generation wraps instead (it only tells versions apart)."""
    path = tmp_path / "d"
    _three_shards(path)
    raw = msgpack.unpackb((path / MANIFEST_FILE).read_bytes())
    raw["generation"] = 2**64 - 1
    (path / MANIFEST_FILE).write_bytes(msgpack.packb(raw))
    with DenseDataset(path, shard_records=10) as ds:
        ds.append(np.arange(25, 40, dtype=np.int64))
        ds.delete([0])
        assert ds[:].tolist() == [9] + list(range(1, 9)) + list(range(10, 40))
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == [9] + list(range(1, 9)) + list(range(10, 40))
    manifest = read_manifest(path)
    assert manifest is not None and manifest.generation < 10


def test_a_shard_folder_replaced_by_a_link_to_elsewhere_is_never_written_through(
    tmp_path: Path,
) -> None:
    """A listed shard folder that is a symlink to a store outside the dataset (another
    dataset's shard, say): a writable open appended, deleted and compacted in that folder."""
    path = tmp_path / "d"
    values = _three_shards(path)
    outside = tmp_path / "elsewhere"
    (path / "shard-000002").rename(outside)
    (path / "shard-000002").symlink_to(outside)
    with pytest.raises(ManifestError, match=r"shard 'shard-000002' is a symbolic link to "
                       f"'{outside}', not a shard folder of the dataset; refusing to write"):
        with DenseDataset(path, shard_records=10) as ds:
            ds.append(np.arange(25, 27, dtype=np.int64))  # into the tail: the linked folder
            ds.delete([24])
    with DenseDataset(outside, readonly=True) as shard:
        assert shard[:].tolist() == values[20:].tolist()
    with DenseDataset(path, readonly=True) as ds:  # reading through it changes nothing
        assert ds[:].tolist() == values.tolist()


@pytest.mark.parametrize("kept", [slice(1, None), slice(0, 0)])
def test_a_manifest_that_lost_its_top_level_entry_is_refused(tmp_path: Path, kept: slice) -> None:
    """A manifest without its entry for the top-level store ('.') read the other shards at
    shifted indices (or nothing at all), and the next rollover's commit removed every shard
    folder it did not list."""
    path = tmp_path / "d"
    values = _three_shards(path)
    raw = msgpack.unpackb((path / MANIFEST_FILE).read_bytes())
    raw["shards"] = raw["shards"][kept]
    if raw["shards"]:
        raw["shards"][0]["name"], raw["shards"][1]["name"] = "shard-000000", "shard-000001"
        os.rename(path / "shard-000001", path / "shard-000000")
        os.rename(path / "shard-000002", path / "shard-000001")
    (path / MANIFEST_FILE).write_bytes(msgpack.packb(raw))
    message = r"shards\.msgpack does not list the store at the top level of .* as shard '\.'"
    with pytest.raises(ManifestError, match=message):
        DenseDataset(path, readonly=True, shard_records=10)
    with pytest.raises(ManifestError, match=message):
        with DenseDataset(path, shard_records=10) as ds:
            ds.append(np.arange(30, dtype=np.int64))
    shards = sorted(name for name in os.listdir(path) if name.startswith("shard-"))
    assert len(shards) == 2
    with DenseDataset(path / shards[0], readonly=True) as shard:
        assert shard[:].tolist() == values[10:20].tolist()


@pytest.mark.skipif(not hasattr(os, "O_NOFOLLOW"), reason="POSIX: O_NOFOLLOW")
def test_a_lock_file_replaced_by_a_link_creates_nothing_outside_the_dataset(
    tmp_path: Path,
) -> None:
    """The commit lock was opened with O_CREAT through a symlink in its place: every append
    created (or locked) the file the link named, anywhere outside the dataset."""
    path = tmp_path / "d"
    values = _three_shards(path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (path / "shards.lock").unlink()
    (path / "shards.lock").symlink_to(outside / "made-here")
    with DenseDataset(path, shard_records=10) as ds:
        assert ds[:].tolist() == values.tolist()  # reading takes no commit lock
        with pytest.raises(ManifestError, match=r"shards\.lock is a symbolic link \(to '.*made-"
                           r"here'\), not the dataset's lock file"):
            ds.append(np.arange(25, 27, dtype=np.int64))
    assert os.listdir(outside) == []
    with DenseDataset(path, readonly=True) as ds:
        assert ds[:].tolist() == values.tolist()


def test_stray_folders_under_the_names_of_markers_and_temporaries_block_no_commit(
    tmp_path: Path,
) -> None:
    """A folder named like a staging folder's marker, a claim file or a manifest's temporary
    file: the commit's cleaning unlinked it, failed with IsADirectoryError, and so did every
    later commit (the dataset could no longer roll over). Such folders are left alone."""
    path = tmp_path / "d"
    values = _three_shards(path)
    strays = [".staging-1-dead.live", ".claim-0123456789ab", "shards.msgpack.tmp-1-abcdef01"]
    for name in strays:
        (path / name).mkdir()
    (path / ".staging-1-dead").mkdir()  # its (dead) staging folder: removed or not, no matter
    more = np.arange(25, 50, dtype=np.int64)
    with DenseDataset(path, shard_records=10) as ds:
        ds.append(more)  # past the tail: new shards, one commit
        assert ds[:].tolist() == values.tolist() + more.tolist()
    for name in strays:
        assert (path / name).is_dir()


def test_a_damaged_count_of_a_delete_in_progress_never_passes_it_as_consistent(
    tmp_path: Path,
) -> None:
    """A killed delete, done on one shard of two: a read-only open refuses it as half done.
    With the done shard's count in the manifest damaged (lowered, still below the count before),
    neither shard matched its count after, so the delete read as applied nowhere, and the
    read-only open returned the half-deleted records."""
    from loaderx._store.delete_journal import ShardDelete, write_journal
    from loaderx.zrecord import Zrecord

    path = tmp_path / "d"
    _three_shards(path)
    manifest = read_manifest(path)
    assert manifest is not None
    for entry in manifest.shards[:2]:
        entry.records_before, entry.records = 10, 8
    write_manifest(path, manifest)
    write_journal(str(path), [ShardDelete(".", 10, np.array([1, 3])),
                              ShardDelete("shard-000001", 10, np.array([1, 3]))])
    with Zrecord(path, _dataset_owned=True) as store:  # the killed delete got this far
        store.delete(np.array([1, 3]))
    raw = msgpack.unpackb((path / MANIFEST_FILE).read_bytes())
    raw["shards"][0]["records"] = 7  # damaged: 7 <= 8 <= 10 still passes the count check
    (path / MANIFEST_FILE).write_bytes(msgpack.packb(raw))
    with pytest.raises(ManifestError, match=r"shard '\.' holds 8 records, neither the 10 "
                       r"before the delete in progress in shards\.msgpack nor the 7 after it"):
        DenseDataset(path, readonly=True, shard_records=10)
