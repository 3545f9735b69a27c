"""Deletes across shards: the index space stays dense, a refused delete changes nothing, an
interrupted one still opens, and a delete killed part-way is waited for, refused or finished by
the next writable open, and never run once it failed or was refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx._store import shard_delete
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import ManifestError
from loaderx.shards import read_manifest
from loaderx.zrecord import Zrecord

from shard_cases import (
    CAPACITY, COUNT, KILLED_DELETE, OTHER_PROCESS, SHAPE, TARGETS, after_delete, dense_data,
    killed_delete, sharded, single_store_of_six,
)

pytestmark = pytest.mark.compiled


def test_delete_keeps_the_index_space_dense_shard_by_shard(tmp_path: Path) -> None:
    path, data = sharded(tmp_path)
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

    path, data = sharded(tmp_path)
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
    path, data = sharded(tmp_path)
    manifest = read_manifest(path)
    assert manifest is not None
    manifest.shards[1].records_before = 1000  # the manifest says a delete of 4 was under way
    manifest.shards[1].records = 996
    from loaderx._store.manifest import write_manifest

    write_manifest(path, manifest)
    with DenseDataset(path) as ds:  # the store never got the delete: still consistent
        assert ds[:].tobytes() == data.tobytes()


def test_a_killed_delete_waits_while_readers_hold_its_shards(tmp_path: Path) -> None:
    """Killed before any shard moved, with a reader open on that consistent state: a writable
    open still opens (reads are consistent), but every write refuses, rather than write over the
    shards the journal has still to delete from, until the readers close; then the next write
    finishes the delete first."""
    from loaderx._store.delete_journal import JOURNAL_FILE
    from loaderx.errors import StoreLockedError

    path, data, expected = killed_delete(tmp_path, "before-shards")
    row = dense_data(1)
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

    path, data, expected = killed_delete(tmp_path, "between-shards")
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

    path, data = sharded(tmp_path)
    expected = after_delete(tmp_path, path, TARGETS)
    with subprocess.Popen(  # leaving the block closes its pipe
        [sys.executable, "-c", KILLED_DELETE, str(path), "held-between-shards",
         ",".join(map(str, TARGETS))],
        stdout=subprocess.PIPE, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    ) as deleter:
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

    path, data = sharded(tmp_path)
    original = shard_delete.write_manifest  # type: ignore[attr-defined]
    calls = []

    def failing_restore(folder: str, manifest: Any) -> None:
        calls.append(folder)
        if len(calls) == 2:  # the first writes the pending counts, the second puts them back
            raise OSError(28, "No space left on device (injected)")
        original(folder, manifest)

    row = dense_data(1)
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

    path = single_store_of_six(tmp_path)
    code = OTHER_PROCESS + (
        "with DenseDataset(sys.argv[1]) as other:\n"
        "    other.append(np.arange(6, 7, dtype=np.int64))\n"
        "    print('holding', flush=True)\n"
        "    sys.stdin.readline()\n"
        "    other.append(np.arange(7, 9, dtype=np.int64))\n"
    )
    with subprocess.Popen(  # leaving the block closes its pipes
        [sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    ) as other:
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

    path, data = sharded(tmp_path)
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

    row = dense_data(1)
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

    path, data, expected = killed_delete(tmp_path, "between-shards")
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
    path, data = sharded(tmp_path)
    for name in ("shards.msgpack.tmp-11-aaaa", "shards.delete.tmp-12-bbbb"):
        (path / name).write_bytes(b"x" * 4096)
    (path / "notes.tmp-1").write_bytes(b"mine")  # not ours: stays
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        ds.delete([1])
        assert sorted(n for n in os.listdir(path) if ".tmp-" in n) == ["notes.tmp-1"]
        (path / "shards.msgpack.tmp-13-cccc").write_bytes(b"x")
        ds.append(dense_data(600))  # spans: a commit
    assert sorted(n for n in os.listdir(path) if ".tmp-" in n) == ["notes.tmp-1"]
