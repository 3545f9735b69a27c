"""Shared pytest fixtures: a fresh store folder per test and deterministic random data."""

from __future__ import annotations

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
