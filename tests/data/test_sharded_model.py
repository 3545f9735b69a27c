"""Random appends, deletes, compactions and reopens of a sharded dataset, checked after every
step against a model of its shards: the records in order, each shard's count, and what a reader
that stays open sees (the shards it opened plus appends to the last; docs/sharding.md).

Tiny shards (1 to 6 records) make nearly every append roll over and every delete span shards."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._store.schema import Codec
from loaderx.dataset import DenseDataset, RaggedDataset

from dataset_cases import swap_last_delete

STEPS = 60
Record = npt.NDArray[np.int32]


class ShardedModel:
    """The shards as lists of records; appends fill the last shard, then start new ones."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.shards: list[list[Record]] = [[]]

    def records(self, shards: int | None = None) -> list[Record]:
        return [record for shard in self.shards[:shards] for record in shard]

    def append(self, records: list[Record]) -> None:
        for record in records:
            if len(self.shards[-1]) == self.capacity:
                self.shards.append([])
            self.shards[-1].append(record)

    def delete(self, targets: list[int]) -> None:
        """Swap-last within each shard, on the shard's local indices."""
        total = len(self.records())
        chosen = sorted({t % total for t in targets})
        start = 0
        for k, shard in enumerate(self.shards):
            local = [g - start for g in chosen if start <= g < start + len(shard)]
            start += len(shard)
            self.shards[k] = swap_last_delete(shard, local)


class Trial:
    """One dataset driven by one random stream, dense or ragged."""

    def __init__(self, path: str, seed: int, ragged: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.path = path
        self.ragged = ragged
        self.codec: Codec = "zstd" if self.rng.integers(2) else "raw"
        self.model = ShardedModel(int(self.rng.integers(1, 7)))
        self.next_value = 0

    def open(self, readonly: bool = False) -> Any:
        if readonly:
            return (RaggedDataset if self.ragged else DenseDataset)(self.path, readonly=True)
        if self.ragged:
            return RaggedDataset(self.path, dtype=np.int32, codec=self.codec,
                                 shard_records=self.model.capacity)
        return DenseDataset(self.path, dtype=np.int32, item_shape=(2,), codec=self.codec,
                            shard_records=self.model.capacity)

    def new_records(self, count: int) -> list[Record]:
        records = []
        for _ in range(count):
            length = int(self.rng.integers(0, 5)) if self.ragged else 2
            records.append(np.arange(self.next_value, self.next_value + length, dtype=np.int32))
            self.next_value += length + 1
        return records

    def append(self, ds: Any) -> None:
        records = self.new_records(int(self.rng.integers(0, 3 * self.model.capacity + 2)))
        if not records and not self.ragged:
            return
        batch = records if self.ragged else np.array(records, dtype=np.int32).reshape(-1, 2)
        assert ds.append(batch) == len(self.model.records())
        self.model.append(records)

    def delete(self, ds: Any) -> None:
        total = len(self.model.records())
        if total:
            count = int(self.rng.integers(1, 6))
            targets = [int(t) for t in self.rng.integers(-total, total, count)]
            ds.delete(targets)
            self.model.delete(targets)

    def check(self, ds: Any, shards: int | None = None) -> None:
        want = self.model.records(shards)
        assert len(ds) == len(want)
        if not self.ragged:
            assert [s["records"] for s in ds.shard_stats()] == [
                len(shard) for shard in self.model.shards[:shards]]
        if not want:
            return
        indices = self.rng.integers(-len(want), len(want), int(self.rng.integers(1, 12)))
        for got, index in zip(ds[indices], indices):
            assert np.array_equal(got, want[index]) and np.asarray(got).dtype == np.int32
        stop = int(self.rng.integers(-len(want) - 2, len(want) + 2))
        step = int(self.rng.choice([1, 2, -1, 3]))
        picked = ds[:stop:step]
        assert len(picked) == len(want[:stop:step])
        for got, expected in zip(picked, want[:stop:step]):
            assert np.array_equal(got, expected)
        if not self.ragged:
            positions = (indices % len(want)).astype(np.int64)
            out = np.empty((len(positions), 2), dtype=np.int32)
            ds.gather_into(positions, out)
            assert np.array_equal(out, np.array([want[i] for i in positions]))


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
@pytest.mark.parametrize("seed", range(6))
def test_a_sharded_dataset_matches_its_model(tmp_path: Any, seed: int, ragged: bool) -> None:
    trial = Trial(os.path.join(tmp_path, "ds"), seed, ragged)
    ds = trial.open()
    reader, reader_shards = None, 0
    try:
        for _ in range(STEPS):
            operation = trial.rng.choice(
                ["append", "append", "delete", "compact", "reopen", "reader", "readonly"])
            if operation in ("delete", "compact") and reader is not None:
                reader.close()  # a delete or compaction needs the shards open nowhere else
                reader = None
            if operation == "append":
                trial.append(ds)
            elif operation == "delete":
                trial.delete(ds)
            elif operation == "compact":
                ds.compact()
            elif operation == "reopen":
                ds.close()
                ds = trial.open()
            elif operation == "reader":
                if reader is None:
                    reader, reader_shards = trial.open(readonly=True), len(trial.model.shards)
                trial.check(reader, reader_shards)
            else:
                with trial.open(readonly=True) as fresh:
                    trial.check(fresh)
            trial.check(ds)
    finally:
        if reader is not None:
            reader.close()
        ds.close()
    with trial.open(readonly=True) as final:
        trial.check(final)
