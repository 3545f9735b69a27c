"""A lost manifest is refused, never read as the top-level store alone (issue 40): a dataset
that rolled over keeps its first store at the top ("."), so without shards.msgpack it looked
like a single-store dataset and opened as its first shard, the other shards silently left out;
the next commit then removed them as a crash's leftovers. Every commit now writes the manifest
before any shard folder moves in, and a rollover killed at any step still opens as it was."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.cli import EXIT_PROBLEM, main
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import ManifestError
from loaderx.shards import read_manifest

pytestmark = pytest.mark.compiled

FIRST = 300  # records in the single store before it rolls over
MORE = 500  # appended with a shard capacity of CAPACITY: shards "." (full), 000001, 000002
CAPACITY = 400


def _rows(count: int) -> npt.NDArray[np.int32]:
    return (np.arange(count * 3, dtype=np.int32) * 7 + 1).reshape(count, 3)


def _single_store(path: Path) -> None:
    with DenseDataset(path, dtype=np.int32, item_shape=(3,), codec="raw") as ds:
        ds.append(_rows(FIRST))


def _roll_over(path: Path) -> None:
    with DenseDataset(path, shard_records=CAPACITY) as ds:
        ds.append(_rows(FIRST + MORE)[FIRST:])


def _listing(path: Path) -> list[str]:
    """The folder's files but its lock files (a lock file is made on first use and stays)."""
    return sorted(name for name in os.listdir(path) if not name.endswith(".lock"))


def test_a_rolled_over_dataset_without_its_manifest_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ds"
    _single_store(path)
    _roll_over(path)
    manifest = read_manifest(path)
    assert manifest is not None and manifest.names[0] == "."
    os.remove(path / "shards.msgpack")
    before = _listing(path)
    for readonly in (False, True):
        with pytest.raises(ManifestError, match=r"shard-000001.*top-level store.*missing"):
            DenseDataset(path, readonly=readonly)
    # A commit into it (here an append through the converter's staged shards) is refused too:
    # it used to read the top store as the whole dataset and remove the other shards.
    for workers in (1, 2):
        with pytest.raises(ManifestError, match="manifest shards.msgpack is missing"):
            from_numpy(str(path), _rows(10), codec="raw", append=True, workers=workers,
                       shard_records=CAPACITY)
    assert main(["info", str(path)], out=io.StringIO()) == EXIT_PROBLEM
    assert "manifest shards.msgpack is missing" in capsys.readouterr().err
    assert _listing(path) == before


def test_a_commit_into_a_single_store_writes_the_manifest_before_moving_shards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the first shard folder's move into the dataset, the manifest is already there."""
    path = tmp_path / "ds"
    _single_store(path)
    seen: list[bool] = []
    rename = os.rename

    def watching(source: str, target: str) -> None:
        if os.fspath(target).startswith(str(path / "shard-")):
            seen.append((path / "shards.msgpack").exists())
        rename(source, target)

    monkeypatch.setattr(os, "rename", watching)
    _roll_over(path)
    assert seen and all(seen), seen
    with DenseDataset(path) as ds:
        assert ds[:].tobytes() == _rows(FIRST + MORE).tobytes()


def test_a_failed_first_commit_leaves_the_single_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ds"
    _single_store(path)
    before = _listing(path)
    rename = os.rename

    def failing(source: str, target: str) -> None:
        if os.path.basename(os.fspath(target)) == "shard-000002":
            raise OSError("injected failure at the second shard's move")
        rename(source, target)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="injected"):
        from_numpy(str(path), _rows(FIRST + MORE)[FIRST:], codec="raw", append=True,
                   workers=2, shard_records=CAPACITY // 2)
    monkeypatch.undo()
    assert _listing(path) == before  # no manifest, no shard folder: a single store again
    with DenseDataset(path) as ds:
        assert not ds.sharded and ds[:].tobytes() == _rows(FIRST).tobytes()


def _killed_rollover(path: Path, target: int, appender: str) -> bool:
    """Rolls the single store at path over in a child killed at its target-th change to the
    disk; returns whether the child finished before that."""
    pid = os.fork()
    if pid == 0:
        count = [0]

        def hooked(name: str) -> None:
            call = getattr(os, name)

            def run_it(*args: object, **kwargs: object) -> object:
                count[0] += 1
                if count[0] == target:
                    os.kill(os.getpid(), signal.SIGKILL)
                return call(*args, **kwargs)

            setattr(os, name, run_it)

        for name in ("rename", "replace", "unlink", "rmdir", "mkdir"):
            hooked(name)
        try:
            if appender == "handle":
                _roll_over(path)
            else:
                from_numpy(str(path), _rows(FIRST + MORE)[FIRST:], codec="raw", append=True,
                           workers=2, shard_records=CAPACITY)
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return False
    assert os.WEXITSTATUS(status) == 0, status
    return True


@pytest.mark.parametrize("appender", ["handle", "converter"])
def test_a_rollover_killed_at_any_step_opens_before_or_after_it(
    tmp_path: Path, appender: str
) -> None:
    """Killed before each of its changes to the disk in turn, the rollover leaves the dataset
    with its old records or all of them, never refused as a lost manifest; the next append
    then lands on top of whichever it is."""
    old, new = _rows(FIRST).tobytes(), _rows(FIRST + MORE).tobytes()
    seen: set[str] = set()
    kills = 0
    for target in range(1, 400):
        path = tmp_path / f"run{target}" / "ds"
        _single_store(path)
        finished = _killed_rollover(path, target, appender)
        with DenseDataset(path, readonly=True) as ds:
            found = ds[:].tobytes()
        assert found in (old, new), (target, len(found))
        seen.add("new" if found == new else "old")
        if finished:
            break
        kills += 1
        if found == old:  # the next append lands over whatever the kill left
            _roll_over(path)
            with DenseDataset(path) as ds:
                assert ds[:].tobytes() == new
    assert kills > 5 and seen == {"old", "new"}, (kills, seen)
