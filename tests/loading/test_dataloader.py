"""Tests for loaderx.dataloader: batches aligned across streams and following the sampler,
endlessness, transforms, resume by step, seeds, cyclic coverage, shard=, and how a loader
gathers its streams (one native call for single stores, on its own after a rollover). The
test_dataloader_*.py files beside this one take threads, buffers, arguments and state;
loader_cases.py holds the fixtures they share."""

from __future__ import annotations

import threading
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.sampler import MODES, Mode, Sampler

# Fixtures are found by name in the module: imported, pytest uses them.
from loader_cases import (
    ITEM_SHAPE, RECORDS, check_aligned, encoded, folder, no_thread_leaks, snapshot, streams, take,
)

pytestmark = pytest.mark.compiled


def test_batches_align_across_streams_and_follow_the_sampler(
    streams: dict[str, DenseDataset],
) -> None:
    sampler = Sampler(RECORDS, 32, mode="cyclic", seed=7)
    with DataLoader(streams, batch_size=32, seed=7) as loader:
        for step in range(100):
            assert loader.step == step
            batch = next(loader)
            assert set(batch) == {"data", "label"}
            assert batch["data"].shape == (32, *ITEM_SHAPE)
            assert batch["data"].dtype == np.int32
            assert batch["label"].shape == (32,)
            check_aligned(batch, sampler.batch(step))
            assert np.array_equal(loader.indices(step), sampler.batch(step))


@pytest.mark.parametrize("mode", MODES)
def test_endless_far_past_one_pass(streams: dict[str, DenseDataset], mode: Mode) -> None:
    # 100 records a step over 1000 records: 300 steps are 30 passes.
    sampler = Sampler(RECORDS, 100, mode=mode, seed=3)
    with DataLoader(streams, batch_size=100, mode=mode, seed=3) as loader:
        for step, batch in enumerate(loader):
            check_aligned(batch, sampler.batch(step))
            if step == 299:
                break
        assert loader.step == 300


def test_transform_is_applied_on_every_batch(streams: dict[str, DenseDataset]) -> None:
    def collate(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        return {
            "x": batch["data"].reshape(len(batch["data"]), -1).astype(np.float32),
            "y": batch["label"] + 1,
        }

    sampler = Sampler(RECORDS, 16, mode="iid", seed=11)
    with DataLoader(streams, batch_size=16, mode="iid", seed=11, transform=collate) as loader:
        for step in range(50):
            batch = next(loader)
            indices = sampler.batch(step)
            assert set(batch) == {"x", "y"}
            assert batch["x"].dtype == np.float32
            assert np.array_equal(batch["x"], encoded(indices).reshape(16, -1).astype(np.float32))
            assert np.array_equal(batch["y"], indices + 1)


@pytest.mark.parametrize("mode", MODES)
def test_resume_at_step_k_equals_the_uninterrupted_run(
    streams: dict[str, DenseDataset], mode: Mode
) -> None:
    total = 40
    with DataLoader(streams, batch_size=48, mode=mode, seed=5, prefetch=1, workers=1) as loader:
        reference = snapshot(loader, total)
    for k, prefetch, workers in [(0, 2, 2), (1, 4, 4), (13, 3, 1), (17, 8, 3), (29, 1, 2)]:
        with DataLoader(
            streams, batch_size=48, mode=mode, seed=5, start_step=k,
            prefetch=prefetch, workers=workers,
        ) as resumed:
            assert resumed.step == k
            assert snapshot(resumed, total - k) == reference[k:]
            assert resumed.step == total


def test_resume_from_a_checkpointed_step(streams: dict[str, DenseDataset]) -> None:
    with DataLoader(streams, batch_size=64, seed=9, prefetch=6, workers=3) as first:
        take(first, 23)
        checkpoint = (first.seed, first.step)
        expected = snapshot(first, 10)
    seed, step = checkpoint
    assert step == 23
    with DataLoader(streams, batch_size=64, seed=seed, start_step=step) as second:
        assert snapshot(second, 10) == expected


@pytest.mark.parametrize("mode", ["iid", "cyclic"])
def test_same_seed_same_stream_other_seed_other_stream(
    streams: dict[str, DenseDataset], mode: Mode
) -> None:
    runs = []
    for seed in (1, 1, 2):
        with DataLoader(streams, batch_size=32, mode=mode, seed=seed, workers=2) as loader:
            runs.append(snapshot(loader, 12))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


@pytest.mark.parametrize("batch_size", [100, 125, 300])
def test_cyclic_reaches_every_record_once_per_cycle(
    streams: dict[str, DenseDataset], batch_size: int
) -> None:
    steps_per_cycle = RECORDS // batch_size
    with DataLoader(streams, batch_size=batch_size, mode="cyclic", seed=4) as loader:
        for _cycle in range(3):
            labels = np.concatenate([next(loader)["label"] for _ in range(steps_per_cycle)])
            # No record twice in a cycle; when batch_size divides the length, every record once.
            assert len(np.unique(labels)) == len(labels) == steps_per_cycle * batch_size
            if RECORDS % batch_size == 0:
                assert np.array_equal(np.sort(labels), np.arange(RECORDS))


def test_transform_error_surfaces_at_its_step(streams: dict[str, DenseDataset]) -> None:
    def picky(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        if int(batch["label"][0]) == 5 * 10:  # sequential: step 5 starts at record 50
            raise ArithmeticError("collate failed on the batch starting at record 50")
        return batch

    with DataLoader(
        streams, batch_size=10, mode="sequential", transform=picky, prefetch=4, workers=4
    ) as loader:
        for step in range(5):
            check_aligned(next(loader), np.arange(step * 10, step * 10 + 10))
        with pytest.raises(ArithmeticError, match="record 50") as info:
            next(loader)
        names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
        assert "picky" in names
        # The failed step is consumed; the loader goes on with the next one.
        assert loader.step == 6
        check_aligned(next(loader), np.arange(60, 70))


def test_a_transform_must_return_a_dict(streams: dict[str, DenseDataset]) -> None:
    def bad(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        return [batch["data"]]  # type: ignore[return-value]

    with DataLoader(streams, batch_size=8, transform=bad) as loader:
        with pytest.raises(TypeError, match="batch dict"):
            next(loader)


def test_shards_are_slices_of_the_global_batch(streams: dict[str, DenseDataset]) -> None:
    whole = Sampler(RECORDS, 3 * 16, mode="cyclic", seed=8)
    parts = []
    for index in range(3):
        with DataLoader(streams, batch_size=16, seed=8, shard=(index, 3)) as loader:
            parts.append([next(loader) for _ in range(6)])
    for step in range(6):
        glued = {
            name: np.concatenate([parts[index][step][name] for index in range(3)])
            for name in ("data", "label")
        }
        check_aligned(glued, whole.batch(step))


def test_a_transform_runs_on_worker_threads_only(streams: dict[str, DenseDataset]) -> None:
    """Without a transform the consumer may make steps itself while it waits; a user's transform
    is never run on the consumer's thread (it might wait for something the consumer does)."""
    threads: set[str] = set()

    def record_thread(batch: dict[str, npt.NDArray[Any]]) -> dict[str, Any]:
        threads.add(threading.current_thread().name)
        return batch

    sampler = Sampler(RECORDS, 16, seed=3)
    with DataLoader(streams, batch_size=16, seed=3, transform=record_thread, workers=1) as loader:
        assert loader.workers == 1
        for step in range(40):
            check_aligned(next(loader), sampler.batch(step))
    assert threads == {"loaderx-prefetch-0"}
    with DataLoader(streams, batch_size=16, seed=3, prefetch=3, workers=1) as loader:
        assert [int(next(loader)["label"][0]) for _ in range(40)] == [
            int(sampler.batch(step)[0]) for step in range(40)
        ]


def test_streams_of_single_stores_are_gathered_in_one_native_call(
    streams: dict[str, DenseDataset],
) -> None:
    """Two streams that each read one store go through one lx_store_gather_streams call a step
    (the small one beside the large one), with the same batches as stream by stream."""
    with DataLoader(streams, batch_size=16, seed=5, workers=1) as loader:
        assert loader._maker._together is not None  # noqa: SLF001
        sampler = Sampler(RECORDS, 16, seed=5)
        for step in range(40):
            check_aligned(next(loader), sampler.batch(step))


def test_a_stream_closed_under_the_loader_raises_as_a_gather_would(folder: Path) -> None:
    """A closed stream refuses the one-call gather; the step then gathers stream by stream
    and raises that stream's own error, as before the one call existed."""
    data = DenseDataset(folder / "data")
    label = DenseDataset(folder / "label")
    loader = DataLoader({"data": data, "label": label}, batch_size=16, seed=5, prefetch=1,
                        workers=1)
    try:
        check_aligned(next(loader))
        time.sleep(0.2)  # the worker has made the next step: taken as made
        next(loader)
        label.close()
        with pytest.raises(ValueError, match="is closed"):
            for _ in range(3):
                next(loader)
    finally:
        loader.close()
        data.close()


def test_a_stream_that_rolls_over_to_shards_is_then_gathered_on_its_own(tmp_path: Path) -> None:
    """When a stream's dataset rolls over from one store to shards (appends past its
    shard_records), the loader stops gathering all streams in one call and reads every stream
    through its dataset; every batch stays exact."""
    every = np.arange(RECORDS, dtype=np.int64)
    data = DenseDataset(tmp_path / "data", dtype=np.int32, item_shape=ITEM_SHAPE, codec="raw",
                        shard_records=RECORDS + 8)
    data.append(encoded(every))
    label = DenseDataset(tmp_path / "label", dtype=np.int64, item_shape=(), codec="raw")
    label.append(every)
    sampler = Sampler(RECORDS, 16, seed=5)
    try:
        with DataLoader({"data": data, "label": label}, batch_size=16, seed=5, prefetch=1,
                        workers=1) as loader:
            assert loader._maker._together is not None  # noqa: SLF001
            for step in range(5):
                check_aligned(next(loader), sampler.batch(step))
            data.append(encoded(np.arange(RECORDS, RECORDS + 16, dtype=np.int64)))
            assert data.sharded
            for step in range(5, 40):
                check_aligned(next(loader), sampler.batch(step))
            assert loader._maker._together is None  # noqa: SLF001
    finally:
        data.close()
        label.close()
