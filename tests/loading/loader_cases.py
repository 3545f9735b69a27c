"""What the DataLoader tests (test_dataloader*.py) share: the records and their streams, the
thread-leak check every test runs under, and small helpers that take steps and compare them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset


RECORDS = 1000
ITEM_SHAPE = (4, 3)
ITEM_SIZE = 12  # elements per data record


def encoded(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
    """What the data stream holds for each index: record i is i * 12 + [0, 12)."""
    values = indices[:, None] * ITEM_SIZE + np.arange(ITEM_SIZE)[None, :]
    return values.astype(np.int32).reshape(len(indices), *ITEM_SHAPE)


def loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("loaderx-prefetch")]


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    yield
    assert loader_threads() == []


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("loader")
    every = np.arange(RECORDS, dtype=np.int64)
    from_numpy(base / "data", encoded(every), codec="zstd")
    from_numpy(base / "label", every, codec="raw")
    from_numpy(base / "short", every[:-1], codec="raw")
    return base


@pytest.fixture
def streams(folder: Path) -> Iterator[dict[str, DenseDataset]]:
    data = DenseDataset(folder / "data")
    label = DenseDataset(folder / "label")
    yield {"data": data, "label": label}
    data.close()
    label.close()


def check_aligned(batch: dict[str, Any], indices: npt.NDArray[np.int64] | None = None) -> None:
    labels = batch["label"]
    assert labels.dtype == np.int64
    assert ((labels >= 0) & (labels < RECORDS)).all()
    assert np.array_equal(batch["data"], encoded(labels))
    if indices is not None:
        assert np.array_equal(labels, indices)


def take(loader: DataLoader, count: int) -> list[dict[str, Any]]:
    return [next(loader) for _ in range(count)]


def snapshot(loader: DataLoader, count: int) -> list[tuple[bytes, bytes]]:
    """Copies of count batches, each taken before the next is asked for."""
    copies = []
    for _ in range(count):
        batch = next(loader)
        copies.append((batch["data"].tobytes(), batch["label"].tobytes()))
    return copies
