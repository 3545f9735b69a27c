"""Shared pytest fixtures: a fresh store folder per test and deterministic random data."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    """A path for a new store (the folder does not exist yet; Zrecord creates it)."""
    return str(tmp_path / "store")


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Turns a skip raised inside a test (pytest.skip, importorskip) into a failure under CI."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("LOADERX_FORBID_SKIPS") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} skipped under LOADERX_FORBID_SKIPS=1: {report.longrepr}"


@contextlib.contextmanager
def traversable_by_others(*paths: str) -> Iterator[None]:
    """Lets an unprivileged user reach paths (the checkout, the venv) for the duration: each
    path gets the others' search and read bits (imports list the folders they search), every
    ancestor only the search bit (a home folder such as /root stays unlistable), and each
    folder changed gets its old mode back after. A checkout made with `mktemp -d` is 0700, so
    `nobody` could not import loaderx from it."""
    changed: list[tuple[str, int]] = []
    try:
        for path in paths:
            folder = os.path.realpath(path)
            wanted = stat.S_IXOTH | stat.S_IROTH
            while True:
                mode = stat.S_IMODE(os.stat(folder).st_mode)
                if mode & wanted != wanted:
                    os.chmod(folder, mode | wanted)
                    changed.append((folder, mode))
                wanted = stat.S_IXOTH
                parent = os.path.dirname(folder)
                if parent == folder:
                    break
                folder = parent
        yield
    finally:
        for folder, mode in reversed(changed):
            os.chmod(folder, mode)


def interpreter_folders() -> list[str]:
    """The folders a child running sys.executable reads before it runs a line: the venv
    (sys.prefix), the installation the venv was made from (sys.base_prefix: the standard
    library, the real executable) and, when libpython is a shared library, its folder (the
    executable's RUNPATH). pyenv installs all of these under /root, which is 0700: a child as
    nobody then cannot load libpython, or on a machine that has a system libpython of the same
    minor version (Debian's 3.11) loads that one instead and runs another patch release."""
    folders = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and isinstance(libdir, str):
        folders.append(libdir)
    return folders


@pytest.fixture
def others_can_reach() -> Callable[..., contextlib.AbstractContextManager[None]]:
    """traversable_by_others, for tests that run sys.executable as an unprivileged user: the
    paths given (the checkout) and every folder that interpreter needs (interpreter_folders)."""

    def reach(*paths: str) -> contextlib.AbstractContextManager[None]:
        return traversable_by_others(*paths, *interpreter_folders())

    return reach
