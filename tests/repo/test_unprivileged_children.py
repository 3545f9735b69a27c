"""The harness of the tests that run a child as an unprivileged user (the permission tests in
tests/cli, tests/data and tests/store): the child must run the very interpreter of the suite."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

import loaderx

ROOT = str(Path(__file__).resolve().parents[2])
_UNPRIVILEGED = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
_PROBE = "import sys, loaderx; print(sys.version); print(sys.base_prefix); print(loaderx.__file__)"


def _ancestor_modes(path: str) -> dict[str, int]:
    modes = {}
    folder = os.path.realpath(path)
    while True:
        modes[folder] = os.stat(folder).st_mode
        if os.path.dirname(folder) == folder:
            return modes
        folder = os.path.dirname(folder)


def test_an_unprivileged_child_runs_the_suites_own_interpreter(
    others_can_reach: Callable[..., AbstractContextManager[None]],
) -> None:
    """others_can_reach made the checkout and the venv reachable, not the installation the venv
    was made from. With pyenv's Pythons (under /root, mode 0700) a child as nobody could not
    load libpython: on 3.13 it exited 127 before running a line; on 3.11 it loaded Debian's
    system libpython3.11 instead and ran 3.11.2's standard library under 3.11.7's name."""
    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode:
        pytest.fail("setpriv (util-linux) is needed to run this test as an unprivileged user")
    prefix = _UNPRIVILEGED if os.geteuid() == 0 else []
    before = _ancestor_modes(sys.base_prefix)
    # The installation's own folder is listed by imports; its ancestors (pyenv's /root among
    # them) only need the search bit, and get no more: nobody may not list /root meanwhile.
    top = os.path.realpath(sys.base_prefix)
    opened = {folder: mode | stat.S_IXOTH | (stat.S_IROTH if folder == top else 0)
              for folder, mode in before.items()}
    with others_can_reach(ROOT):
        assert _ancestor_modes(sys.base_prefix) == opened
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd="/",
            env={**os.environ, "PYTHONPATH": ROOT}, timeout=120, check=False,
        )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [sys.version, sys.base_prefix, loaderx.__file__]
    # Every folder the fixture opened has its own mode back.
    assert _ancestor_modes(sys.base_prefix) == before
