"""Shared pytest fixtures: a fresh store folder per test and deterministic random data."""

from __future__ import annotations

import os
from collections.abc import Iterator
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
