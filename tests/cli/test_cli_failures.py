"""The loaderx command when things go wrong around it: Ctrl-C leaves a destination as it was
and exits 130 without a traceback, a closed stdout is said before any work, running out of
memory is one line and exit 1, and an unreadable store is a permission error, not "no store"."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.cli import EXIT_INTERRUPTED, EXIT_PROBLEM
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

# Fixtures are found by name in the module: imported, pytest uses them.
from cli_cases import ROOT, images, run, tree


def sigint_in(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
    """Ctrl-C while owner.name runs: a real SIGINT, raised as KeyboardInterrupt by Python's own
    handler at the next bytecode, as when the user presses it during a long command."""
    original = getattr(owner, name)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        # The command runs in a thread of its own (loaderx.cli.job): the main thread takes the
        # signal and raises KeyboardInterrupt in this thread, which Python delivers at its next
        # bytecode. Waiting here stands for the rest of a long call, as the user's Ctrl-C
        # would arrive while it runs.
        time.sleep(0.3)
        return result

    monkeypatch.setattr(owner, name, interrupted)


def run_interrupted(*argv: str) -> tuple[int, str]:
    """run(), failing the test (not ending the session) if Ctrl-C escapes main()."""
    try:
        return run(*argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() as a KeyboardInterrupt (a traceback for the user)")


@pytest.mark.parametrize("command", ["convert", "recode"])
def test_ctrl_c_in_convert_or_recode_leaves_the_destination_and_exits_130(
    tmp_path: Path, images: np.ndarray, command: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C during a conversion used to end in a KeyboardInterrupt traceback. Now one line
    says so, the exit status is 130 and the store being replaced is left exactly as it was."""
    from_numpy(tmp_path / "src", images[:50], codec="raw")
    from_numpy(tmp_path / "dest", images[50:60], codec="raw")
    before = tree(tmp_path)
    from loaderx.zrecord import Zrecord

    sigint_in(monkeypatch, Zrecord, "append_fixed")  # Zrecord: compiled classes cannot be patched
    source = str(tmp_path / ("images.npy" if command == "convert" else "src"))
    status, text = run_interrupted(command, source, str(tmp_path / "dest"), "--overwrite",
                                   "--quiet")
    assert status == EXIT_INTERRUPTED and text == ""
    left = ("a destination not reported done was left as it was" if command == "convert"
            else "the destination was left as it was")
    assert capsys.readouterr().err == f"loaderx {command}: interrupted; {left}\n"
    assert tree(tmp_path) == before  # no partial folder left beside it either
    with DenseDataset(tmp_path / "dest") as ds:
        assert np.array_equal(ds[:], images[50:60])


def test_ctrl_c_in_an_inspecting_command_exits_130_without_a_traceback(
    tmp_path: Path, images: np.ndarray, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "ds", images, codec="raw")
    sigint_in(monkeypatch, Zrecord, "verify")
    assert run_interrupted("verify", str(tmp_path / "ds")) == (EXIT_INTERRUPTED, "")
    assert capsys.readouterr().err == "loaderx verify: interrupted\n"


def test_python_m_loaderx_with_stdout_closed_says_so_before_doing_anything(
    tmp_path: Path, images: np.ndarray
) -> None:
    """`loaderx ... >&-` used to convert, then die in a traceback (AttributeError: 'NoneType'
    object has no attribute 'flush'): Python sets sys.stdout to None for a closed stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for argv in (["info", str(tmp_path)], ["convert", str(tmp_path / "images.npy"),
                                           str(tmp_path / "ds"), "--quiet"]):
        done = subprocess.run([sys.executable, "-m", "loaderx", *argv], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env, check=False,
                              preexec_fn=lambda: os.close(1))
        assert done.returncode == EXIT_PROBLEM
        assert done.stderr == f"loaderx {argv[0]}: standard output is closed; nothing was done\n"
    assert not (tmp_path / "ds").exists()


def test_out_of_memory_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`head -n 100000` of 1 MiB records asks NumPy for 98 GiB: its MemoryError used to end
    the command in a traceback. (Simulated: the test machine has no such dataset to spare.)"""
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "ds", np.zeros((10, 4), np.uint8), codec="raw")
    wanted = ("Unable to allocate 97.7 GiB for an array with shape (100000, 1048576) and data "
              "type uint8")

    def too_big(*args: Any, **kwargs: Any) -> None:
        raise MemoryError(wanted)

    # Zrecord, not the dataset: mypyc-compiled classes cannot be patched.
    monkeypatch.setattr(Zrecord, "gather_into", too_big)
    assert run("head", str(tmp_path / "ds"), "-n", "100000") == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == f"loaderx head: out of memory ({wanted})\n"


def test_a_store_the_user_may_not_read_is_a_permission_error_not_no_store(
    tmp_path: Path, others_can_reach: Callable[..., AbstractContextManager[None]]
) -> None:
    """A store folder of mode 700 owned by someone else was "not a loaderx dataset or Zrecord
    store (no schema.msgpack, no meta.zr)", and a store in a folder the user may not enter "no
    such file or folder": os.path.isfile and exists say False for both."""
    parent = tempfile.mkdtemp(prefix="loaderx-cli-", dir=tempfile.gettempdir())
    try:
        os.chmod(parent, 0o755)
        from_numpy(os.path.join(parent, "ds"), np.arange(10), codec="raw")
        os.makedirs(os.path.join(parent, "locked"))
        from_numpy(os.path.join(parent, "locked", "ds"), np.arange(10), codec="raw")
        os.chmod(os.path.join(parent, "ds"), 0o700)
        os.chmod(os.path.join(parent, "locked"), 0o700)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for store, denied in (
            ("ds", "permission denied looking into 'ds' (cannot tell whether it holds a store; "
                   "check the folder's permissions): 'ds'"),
            ("locked/ds", "Permission denied: 'locked/ds'"),
        ):
            with others_can_reach(str(ROOT)):
                done = subprocess.run(
                    [*(prefix if os.geteuid() == 0 else []), sys.executable, "-m", "loaderx",
                     "info", store], cwd=parent,
                    capture_output=True, text=True, env=env, timeout=120, check=False,
                )
            assert (done.returncode, done.stdout) == (EXIT_PROBLEM, "")
            assert done.stderr == f"loaderx info: [Errno 13] {denied}\n"
    finally:
        shutil.rmtree(parent)
