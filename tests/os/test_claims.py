"""loaderx._os.claims: a claimed folder survives every cleaner while its process lives, and goes with
the next cleaner once its process is dead (killed without any cleanup)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaderx._os import claims
from loaderx._os.folder_swap import FolderLock

from forked_child import held_by_another_thread, run_child, wait_child

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = ".job-"
CLAIM = ".job-claim-"  # shares PREFIX on purpose: claim files must never pass for folders


def _names(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_a_claim_is_an_empty_folder_with_a_held_marker(tmp_path: Path) -> None:
    path = claims.claim_folder(str(tmp_path / "new"), PREFIX, CLAIM)
    name = os.path.basename(path)
    assert name.startswith(PREFIX) and os.listdir(path) == []
    assert _names(tmp_path / "new") == [name, name + claims.LIVE_SUFFIX]
    with pytest.raises(BlockingIOError):  # another descriptor is refused: this process holds it
        FolderLock(path + claims.LIVE_SUFFIX, blocking=False)
    assert claims.remove_dead(str(tmp_path / "new"), PREFIX, CLAIM) == 0
    assert _names(tmp_path / "new") == [name, name + claims.LIVE_SUFFIX]
    claims.discard(path)
    assert _names(tmp_path / "new") == []


def test_a_dead_processes_claims_go_and_a_live_ones_stay(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "from loaderx._os import claims\n"
        f"path = claims.claim_folder(sys.argv[1], {PREFIX!r}, {CLAIM!r})\n"
        "open(os.path.join(path, 'data'), 'wb').write(b'x' * 4096)\n"
        "os._exit(0)  # as if killed: no cleanup runs\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, cwd=ROOT)
    (tmp_path / (CLAIM + "0123456789ab")).touch()  # killed before its claim became a marker
    (tmp_path / (PREFIX + "stray" + claims.LIVE_SUFFIX)).touch()  # killed before its folder
    (tmp_path / (PREFIX + "unmarked")).mkdir()  # not made by claim_folder: never judged
    (tmp_path / "other").mkdir()
    mine = claims.claim_folder(str(tmp_path), PREFIX, CLAIM)
    assert len(_names(tmp_path)) == 8
    assert claims.remove_dead(str(tmp_path), PREFIX, CLAIM) == 1  # the dead process's folder
    mine_name = os.path.basename(mine)
    assert _names(tmp_path) == sorted(
        [PREFIX + "unmarked", "other", mine_name, mine_name + claims.LIVE_SUFFIX]
    )
    claims.release(mine)  # moved elsewhere by its owner, say: the folder is no longer ours
    assert _names(tmp_path) == sorted([PREFIX + "unmarked", "other", mine_name])


def test_a_claim_file_taken_by_a_cleaner_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment between making a claim file and locking it: a cleaner that finds the file
    unlocked removes it, and the creator notices and claims again."""
    real = FolderLock
    calls: list[str] = []

    def cleaner_first(path: str, blocking: bool) -> FolderLock:
        if not calls:
            assert claims.remove_dead(str(tmp_path), PREFIX, CLAIM) == 0
            assert not os.path.exists(path)  # the cleaner took it
        calls.append(path)
        return real(path, blocking)

    monkeypatch.setattr("loaderx._os.claims.FolderLock", cleaner_first)
    path = claims.claim_folder(str(tmp_path), PREFIX, CLAIM)
    assert len(calls) == 2 and calls[0] != calls[1]
    monkeypatch.undo()
    assert _names(tmp_path) == sorted([os.path.basename(path), os.path.basename(path) + ".live"])
    assert claims.remove_dead(str(tmp_path), PREFIX, CLAIM) == 0
    claims.discard(path)


def test_cleaners_never_take_a_live_claim(tmp_path: Path) -> None:
    """Another process cleans the same folder without pause while this one claims, checks and
    discards folders: every folder and marker stays for as long as it is claimed."""
    code = (
        "import sys, time\n"
        "from loaderx._os import claims\n"
        "end = time.monotonic() + float(sys.argv[2])\n"
        "while time.monotonic() < end:\n"
        f"    claims.remove_dead(sys.argv[1], {PREFIX!r}, {CLAIM!r})\n"
    )
    cleaner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), "4"], cwd=ROOT)
    try:
        time.sleep(0.5)  # the cleaner is running
        claimed = 0
        while cleaner.poll() is None:
            path = claims.claim_folder(str(tmp_path), PREFIX, CLAIM)
            with open(os.path.join(path, "data"), "wb") as file:
                file.write(b"y" * 1024)
            assert os.path.isfile(path + claims.LIVE_SUFFIX)
            with open(os.path.join(path, "data"), "rb") as file:
                assert file.read() == b"y" * 1024
            claims.discard(path)
            claimed += 1
    finally:
        cleaner.wait(30)
    assert cleaner.returncode == 0
    assert claimed > 50
    assert _names(tmp_path) == []


def test_a_forked_child_holds_none_of_its_parents_claims(tmp_path: Path) -> None:
    """The child's copies of the markers' descriptors are closed at the fork: releasing an
    inherited claim used to close whatever file of the child's own had taken the number (or
    raise EBADF), and a parent thread holding the claims' guard at the fork made the child's
    next claim hang for good."""
    parent = str(tmp_path)
    inherited = claims.claim_folder(parent, PREFIX, CLAIM)
    def child() -> None:
        own = os.open(os.devnull, os.O_RDONLY)  # the lowest free number: the marker's was
        claims.release(inherited)  # ends the claim here: the folder is committed elsewhere
        os.fstat(own)  # still open
        os.close(own)
        mine = claims.claim_folder(parent, PREFIX, CLAIM)
        claims.discard(mine)
        assert not os.path.exists(mine) and not os.path.exists(mine + claims.LIVE_SUFFIX)

    with held_by_another_thread(claims._held_guard):
        pid = run_child(child)
    wait_child(pid)
    assert os.path.isdir(inherited)  # the parent's folder is untouched, and never a dead one
    assert claims.remove_dead(parent, PREFIX, CLAIM) == 0 and os.path.isdir(inherited)
    claims.discard(inherited)
    assert _names(tmp_path) == []


def test_a_forked_childs_release_leaves_its_parents_live_claim(tmp_path: Path) -> None:
    """A forked child's release of a claim it inherited used to delete the marker of a folder
    its parent still used: the folder was then never judged, so once the parent was killed it
    stayed for good (a parallel conversion's parts, a whole dataset's bytes). A child that moved
    the folder away itself still ends the claim's marker."""
    code = (
        "import os, sys\n"
        "from loaderx._os import claims\n"
        f"used = claims.claim_folder(sys.argv[1], {PREFIX!r}, {CLAIM!r})\n"
        f"moved = claims.claim_folder(sys.argv[1], {PREFIX!r}, {CLAIM!r})\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    claims.release(used)  # the parent still writes there\n"
        "    os.rename(moved, os.path.join(sys.argv[1], 'published'))\n"
        "    claims.release(moved)  # moved into place by the child: the claim ends here\n"
        "    os._exit(0)\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "assert os.path.isfile(used + claims.LIVE_SUFFIX)\n"
        "assert not os.path.exists(moved + claims.LIVE_SUFFIX)\n"
        "assert claims.remove_dead(sys.argv[1], "
        f"{PREFIX!r}, {CLAIM!r}) == 0 and os.path.isdir(used)  # still live\n"
        "open(os.path.join(used, 'data'), 'wb').write(b'x' * 4096)\n"
        "print(os.path.basename(used))\n"
        "os._exit(0)  # as if killed: no cleanup runs\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    used = done.stdout.strip()
    assert _names(tmp_path) == sorted(["published", used, used + claims.LIVE_SUFFIX])
    assert claims.remove_dead(str(tmp_path), PREFIX, CLAIM) == 1  # its holder is dead
    assert _names(tmp_path) == ["published"]


def test_a_ctrl_c_as_a_claim_is_released_still_releases_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real SIGINT as release() removes the marker (the claim already off this process's
    books): the marker goes and its lock's descriptor is closed, and the interrupt is raised
    after. Before, both stayed until the process ended (no later release found the claim), so
    the marker's flock was held and no cleaner could judge it."""
    from loaderx._os.lock_descriptors import open_count  # private: descriptors held open

    before = open_count()
    path = claims.claim_folder(str(tmp_path), PREFIX, CLAIM)
    unlink = os.unlink
    interrupts = [signal.SIGINT]

    def interrupted_then_unlinking(target: str, *args: object, **kwargs: object) -> None:
        if interrupts and str(target).endswith(claims.LIVE_SUFFIX):
            signal.raise_signal(interrupts.pop())  # Python's handler runs here
        unlink(target)

    monkeypatch.setattr(os, "unlink", interrupted_then_unlinking)
    with pytest.raises(KeyboardInterrupt):
        claims.discard(path)
    monkeypatch.setattr(os, "unlink", unlink)
    assert not interrupts
    assert _names(tmp_path) == [] and open_count() == before
