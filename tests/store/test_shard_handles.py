"""Other handles and processes on a sharded dataset: opens while another process deletes,
appends from two processes, and single-store handles (a dataset's, or a plain Zrecord on a
shard) that never write to a store once another handle rolled it over or committed it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.shards import read_manifest
from loaderx.zrecord import Zrecord

from shard_cases import CAPACITY, OTHER_PROCESS, sharded, single_store_of_six

pytestmark = pytest.mark.compiled


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
    code = OTHER_PROCESS + (
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


def _roll_over_in_another_process(path: Path | str) -> None:
    """Another process appends records 6..14 to the single store of six at path with
    shard_records=10: the store is sealed as shard '.' at 10 records, the rest a new shard."""
    import subprocess
    import sys

    code = OTHER_PROCESS + (
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

    path = single_store_of_six(tmp_path)
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

    path, data = sharded(tmp_path)
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

    path = single_store_of_six(tmp_path)
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

    path = single_store_of_six(tmp_path)
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

    path = single_store_of_six(tmp_path)
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

    path = single_store_of_six(tmp_path)
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

    path = single_store_of_six(tmp_path)
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

    path = single_store_of_six(tmp_path)
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
