"""User subclasses of DenseDataset, RaggedDataset and DataLoader: made, read, iterated and
pickled like their bases, with their own attributes, super() calls and weak references, and
the loader calling a dataset subclass's overrides.

The mypyc-compiled classes (what the wheels ship) let such a class be defined but refused to
make one ("interpreted classes cannot inherit from compiled"), while the interpreted classes
allowed it. These tests run in both builds (`compiled`)."""

from __future__ import annotations

import pickle
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataloader import Batch, DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset

pytestmark = pytest.mark.compiled


class ScaledDataset(DenseDataset):
    """A subclass with its own keyword, attributes and a read that calls super()."""

    def __init__(self, path: Any, scale: float = 1.0, **options: Any) -> None:
        super().__init__(path, **options)
        self.scale = scale
        self.reads = 0

    def __getitem__(self, index: object) -> Any:
        self.reads += 1
        return super().__getitem__(index) * self.scale


class CountingDataset(DenseDataset):
    """Counts the loader's gathers (the method a loader reads a dense stream with)."""

    gathers = 0

    def gather_into(self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any]) -> None:
        type(self).gathers += 1
        super().gather_into(indices, out)
        out += 1000


class Tokens(RaggedDataset):
    packed = 0

    def longest(self) -> int:
        return int(self.lengths(slice(None)).max())

    def gather_packed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None = None,
    ) -> bool:
        type(self).packed += 1
        return super().gather_packed(indices, out, offsets, rows)


class TaggedLoader(DataLoader):
    def __init__(self, *arguments: Any, tag: str = "", **keywords: Any) -> None:
        super().__init__(*arguments, **keywords)
        self.tag = tag

    def __next__(self) -> Batch:
        batch = super().__next__()
        batch["tag"] = self.tag
        return batch


def dense(path: Path) -> npt.NDArray[np.float32]:
    records = np.arange(30, dtype=np.float32).reshape(10, 3)
    with DenseDataset(path, dtype=np.float32, item_shape=(3,), codec="raw") as ds:
        ds.append(records)
    return records


def test_a_dense_subclass_reads_through_its_override(tmp_path: Path) -> None:
    records = dense(tmp_path / "d")
    with ScaledDataset(tmp_path / "d", scale=2.0, readonly=True) as ds:
        assert isinstance(ds, DenseDataset) and type(ds) is ScaledDataset
        assert ds.dtype == np.float32
        assert (len(ds), ds.item_shape, ds.readonly) == (10, (3,), True)
        np.testing.assert_array_equal(ds[1], records[1] * 2)
        np.testing.assert_array_equal(ds[[4, 0]], records[[4, 0]] * 2)
        np.testing.assert_array_equal(ds.read(slice(0, 2)), records[:2])  # read() is not overridden
        assert ds.reads == 2
        ds.note = "added"  # type: ignore[attr-defined]
        assert getattr(ds, "note") == "added" and weakref.ref(ds)() is ds
        assert repr(ds).startswith("ScaledDataset(")
        got = pickle.loads(pickle.dumps(ds))
        with got:  # reopened by the subclass itself, its own keyword at its default
            assert type(got) is ScaledDataset and got.scale == 1.0 and got.readonly
            np.testing.assert_array_equal(got[2], records[2])


def test_a_ragged_subclass_adds_a_method(tmp_path: Path) -> None:
    with Tokens(tmp_path / "t", dtype=np.int32) as ds:
        ds.append([np.arange(n, dtype=np.int32) for n in (3, 7, 1)])
        assert ds.longest() == 7
        assert [record.tolist() for record in ds] == [[0, 1, 2], list(range(7)), [0]]
        assert type(pickle.loads(pickle.dumps(ds))) is Tokens
        Tokens.packed = 0
        with DataLoader({"t": ds}, batch_size=2, mode="sequential", prefetch=1, workers=1) as loader:
            batch = next(loader)
        assert batch["t"].tolist() == [0, 1, 2, *range(7)] and Tokens.packed >= 1


def test_the_loader_calls_a_subclass_override(tmp_path: Path) -> None:
    records = dense(tmp_path / "d")
    CountingDataset.gathers = 0
    with CountingDataset(tmp_path / "d") as ds:
        with DataLoader({"x": ds}, batch_size=4, mode="sequential", prefetch=1, workers=1) as loader:
            batch = next(loader)
        np.testing.assert_array_equal(batch["x"], records[:4] + 1000)
        assert CountingDataset.gathers >= 1


def test_a_loader_subclass(tmp_path: Path) -> None:
    records = dense(tmp_path / "d")
    with DenseDataset(tmp_path / "d") as ds:
        with TaggedLoader({"x": ds}, batch_size=2, mode="sequential", tag="mine") as loader:
            assert isinstance(loader, DataLoader) and loader.tag == "mine"
            batch = next(loader)
            assert batch["tag"] == "mine" and loader.step == 1
            np.testing.assert_array_equal(batch["x"], records[:2])
            assert weakref.ref(loader)() is loader
            assert "streams=[x], batch_size=2" in repr(loader)
        assert loader.closed
