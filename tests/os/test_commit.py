"""loaderx._os.folder_swap: a conversion with overwrite=True killed at every step of its commit leaves
the old or the new dataset, and the next open or conversion finishes or rolls back the swap and
removes every hidden folder a killed run left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from loaderx._os import folder_swap as commit
from loaderx.converter import from_iterator, from_numpy, recode
from loaderx.dataset import DenseDataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OLD = np.arange(60, dtype=np.int32).reshape(20, 3)
NEW = np.arange(90, dtype=np.int32).reshape(30, 3) * 7

# Runs one conversion that exits on the spot (os._exit: no cleanup, like a SIGKILL) right before
# its step-th file-system step of the commit: a rename, an fsync, a removal, a folder creation.
KILLED_CONVERSION = """
import os, sys
sys.path.insert(0, {root!r})
import numpy as np
import loaderx._os.folder_swap as commit
from loaderx.converter import from_numpy

steps = 0
def killed_before(function):
    def step(*args, **kwargs):
        global steps
        steps += 1
        if steps == {step}:
            os._exit(9)
        return function(*args, **kwargs)
    return step

class OsWithSteps:
    def __getattr__(self, name):
        return getattr(os, name)
    replace = staticmethod(killed_before(os.replace))
    rmdir = staticmethod(killed_before(os.rmdir))

class ShutilWithSteps:
    rmtree = staticmethod(killed_before(commit.shutil.rmtree))

commit.os = OsWithSteps()
commit.shutil = ShutilWithSteps()
commit.fsync_folder = killed_before(commit.fsync_folder)
commit.fsync_tree = killed_before(commit.fsync_tree)
from_numpy({path!r}, np.arange(90, dtype=np.int32).reshape(30, 3) * 7, overwrite=True)
print("steps", steps)
"""


def run_killed(path: str, step: int) -> subprocess.CompletedProcess[str]:
    script = KILLED_CONVERSION.format(root=ROOT, path=path, step=step)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)


def hidden(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if ".loaderx-" in n)


def holds(path: str, expected: np.ndarray) -> bool:
    with DenseDataset(path) as ds:
        values = ds[:]
    return values.shape == expected.shape and bool((values == expected).all())


def test_a_kill_before_any_step_of_the_commit_leaves_the_old_or_the_new(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    outcomes = []
    step = 1
    while True:
        from_numpy(path, OLD, overwrite=True)
        assert hidden(tmp_path) == []
        done = run_killed(path, step)
        if done.returncode == 0:  # the conversion took fewer steps than this: all were tried
            assert done.stdout.split() == ["steps", str(step - 1)]
            assert holds(path, NEW)
            break
        assert done.returncode == 9, done.stderr
        left = hidden(tmp_path)
        # Opening finishes or rolls back the swap: the old or the new dataset, complete.
        if holds(path, OLD):
            outcomes.append("old")
        else:
            assert holds(path, NEW), f"step {step}: neither dataset is complete"
            outcomes.append("new")
        # The next conversion removes whatever the killed one left.
        from_numpy(path, OLD, overwrite=True)
        assert hidden(tmp_path) == [], f"step {step} left {left}; still there: {hidden(tmp_path)}"
        assert holds(path, OLD)
        step += 1
    # The commit has at least: fsync tree, rename to new, fsync, rename old aside, rename new
    # in, fsync, remove old, fsync. Early kills keep the old dataset, late ones the new.
    assert len(outcomes) >= 8, outcomes
    assert outcomes[0] == "old" and outcomes[-1] == "new"
    assert outcomes == sorted(outcomes, key=lambda o: o == "new"), outcomes


def test_recover_finishes_a_swap_whose_destination_is_missing(tmp_path: Path) -> None:
    # The state a kill between "dst -> old" and "new -> dst" leaves.
    path = str(tmp_path / "ds")
    from_numpy(path, OLD)
    from_numpy(str(tmp_path / "built"), NEW)
    os.replace(path, str(tmp_path / commit.hidden_name("ds", commit.OLD, "tok1")))
    os.replace(str(tmp_path / "built"), str(tmp_path / commit.hidden_name("ds", commit.NEW, "tok1")))
    assert holds(path, NEW)  # the open finished the swap
    assert hidden(tmp_path) == []


def test_recover_rolls_back_a_swap_that_had_not_started(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    from_numpy(path, OLD)
    from_numpy(str(tmp_path / "built"), NEW)
    os.replace(str(tmp_path / "built"), str(tmp_path / commit.hidden_name("ds", commit.NEW, "t2")))
    os.mkdir(tmp_path / commit.hidden_name("ds", commit.PARTIAL, "t3"))
    commit.recover(path)
    assert hidden(tmp_path) == []
    assert holds(path, OLD)


def test_recover_leaves_the_folders_of_a_live_conversion_alone(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    from_numpy(path, OLD)
    staged = commit.StagedFolder(path)  # holds the flock a running conversion holds
    try:
        commit.recover(path)
        assert hidden(tmp_path) == [os.path.basename(staged.path)]
    finally:
        staged.abort()
    assert hidden(tmp_path) == []


def test_other_destinations_leftovers_are_not_touched(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    other = tmp_path / commit.hidden_name("ds2", commit.PARTIAL, "x1")
    os.mkdir(other)
    from_numpy(path, OLD)
    assert hidden(tmp_path) == [other.name]


@pytest.mark.parametrize("converter", ["from_iterator", "recode"])
def test_every_converter_recovers_and_commits_through_the_same_path(
    tmp_path: Path, converter: str
) -> None:
    path = str(tmp_path / "ds")
    source = str(tmp_path / "source")
    from_numpy(source, NEW)
    from_iterator(path, [np.arange(3, dtype=np.int32)])
    os.mkdir(tmp_path / commit.hidden_name("ds", commit.PARTIAL, "dead1"))
    if converter == "from_iterator":
        from_iterator(path, [np.arange(5, dtype=np.int32)], overwrite=True)
    else:
        os.rename(path, str(tmp_path / commit.hidden_name("ds", commit.OLD, "dead2")))
        recode(source, path, codec="raw", overwrite=True)
        assert holds(path, NEW)
    assert hidden(tmp_path) == []


@pytest.mark.parametrize("removed", ["before the lock", "after the lock"])
def test_a_staging_folder_removed_before_it_is_locked_is_made_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, removed: str
) -> None:
    """Another conversion into the same new destination runs recover(), which removes an
    unlocked staging folder as a crash's leftover. Removed before our lock took it, the folder
    made the lock's open raise FileNotFoundError out of the conversion (a flaky failure of the
    two-conversions test in a CI run); removed just after, the stat of its path did. A staging
    folder is then made anew."""
    real_lock = commit.FolderLock
    calls: list[str] = []

    def racing_lock(folder: str, blocking: bool) -> commit.FolderLock:
        calls.append(folder)
        if len(calls) == 1 and removed == "before the lock":
            os.rmdir(folder)  # what the other conversion's recover() does
        lock = real_lock(folder, blocking)
        if len(calls) == 1 and removed == "after the lock":
            os.rmdir(folder)
        return lock

    monkeypatch.setattr(commit, "FolderLock", racing_lock)
    staged = commit.StagedFolder(str(tmp_path / "dst"))
    monkeypatch.setattr(commit, "FolderLock", real_lock)
    assert len(calls) == 2 and calls[0] != calls[1] and staged.path == calls[1]
    assert os.path.isdir(staged.path)
    assert os.path.samestat(os.fstat(staged._lock.fd), os.stat(staged.path))
    staged.abort()
    assert sorted(os.listdir(tmp_path)) == []


def test_a_dataset_removed_after_its_swap_stays_removed(tmp_path: Path) -> None:
    # A kill while the finished swap removed the old folder leaves it beside the new dataset;
    # the user then removes the dataset. The old folder must never come back in its place.
    path = str(tmp_path / "ds")
    from_numpy(path, OLD)
    os.replace(path, str(tmp_path / commit.hidden_name("ds", commit.OLD, "tok4")))
    assert not os.path.exists(path)
    with pytest.raises(FileNotFoundError, match="no loaderx dataset"):
        DenseDataset(path)  # a writable open runs the recovery: nothing is restored
    assert hidden(tmp_path) == [] and not os.path.exists(path)
    # The same state met by a conversion: it creates the new dataset, no FileExistsError.
    from_numpy(str(tmp_path / "x"), NEW)
    os.replace(str(tmp_path / "x"), str(tmp_path / commit.hidden_name("ds", commit.OLD, "tok5")))
    from_numpy(path, NEW[:5])
    assert holds(path, NEW[:5]) and hidden(tmp_path) == []


def test_a_read_only_open_of_an_interrupted_swap_says_what_to_do(tmp_path: Path) -> None:
    path = str(tmp_path / "ds")
    from_numpy(path, OLD)
    from_numpy(str(tmp_path / "built"), NEW)
    os.replace(path, str(tmp_path / commit.hidden_name("ds", commit.OLD, "tok6")))
    os.replace(str(tmp_path / "built"), str(tmp_path / commit.hidden_name("ds", commit.NEW, "tok6")))
    with pytest.raises(FileNotFoundError, match="interrupted.*without readonly=True"):
        DenseDataset(path, readonly=True)
    assert len(hidden(tmp_path)) == 2  # a read-only open changed nothing
    assert holds(path, NEW)  # a writable open finishes the swap
