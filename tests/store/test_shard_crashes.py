"""Sharded writes killed or failed part-way (SIGKILL in a child process, a manifest write that
fails): staged shards, appends and deletes across shards are all or nothing, and the next
writer or open finishes or discards what was left."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx._store import shard_delete
from loaderx.dataset import DenseDataset
from loaderx.shards import read_manifest
from loaderx.zrecord import Zrecord

from shard_cases import CAPACITY, COUNT, KILLED_DELETE, SHAPE, dense_data, killed_delete, sharded

pytestmark = pytest.mark.compiled


def test_a_killed_writers_staged_shards_go_with_the_next_commit(tmp_path: Path) -> None:
    """A staging folder is claimed by a lock on a marker beside it; one left by a process that
    died (its lock died with it) is removed by the next commit, a live one is not."""
    import subprocess
    import sys

    from loaderx._store.layout import STAGING_PREFIX
    from loaderx._store.staging import discard_staging, staging_folder

    path, data = sharded(tmp_path)
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
        path, data = sharded(tmp_path)  # shards of 1000, 1000, 500
    else:
        data = dense_data(700)
        path = tmp_path / "single"
        with DenseDataset(path, dtype=data.dtype, item_shape=SHAPE, codec="raw") as ds:
            ds.append(data)
    more = dense_data(3200)[::-1].copy()  # the tail's room, then new shards
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
    extra = dense_data(CAPACITY)  # spans again: the next writer settles, then commits
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

    path, data, expected = killed_delete(tmp_path, where)  # shards of 1000, 1000, 500
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

    path, data = sharded(tmp_path)
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

    data = dense_data(1500)
    path = tmp_path / "d"
    with DenseDataset(path, dtype=data.dtype, item_shape=SHAPE, codec="raw",
                      shard_records=CAPACITY) as ds:
        ds.append(data)  # shards of 1000 and 500
    more = dense_data(3000)[::-1].copy()  # 500 into the tail, then shards 2, 3 and 4
    np.save(tmp_path / "more.npy", more)
    targets = [2005, 2999, 3000, 3500, 4001, 4499, 2017]  # in the new shards only
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    row = dense_data(1)
    with DenseDataset(reference, shard_records=CAPACITY) as ds:
        ds.append(more)
        ds.delete(targets)
        ds.append(row) if then == "append" else ds.delete([0])
        expected = ds[:]
    with DenseDataset(path, shard_records=CAPACITY) as early:
        done = subprocess.run(
            [sys.executable, "-c", KILLED_DELETE, str(path), where, ",".join(map(str, targets)),
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

    path, data = sharded(tmp_path)
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    row = dense_data(1)
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
