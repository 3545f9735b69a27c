"""Reading what parallel conversions write: two distributed ranks split every global batch of a
multi-host training read, and a reader running during a conversion sees the old dataset or
the new one, never a mix.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.shards import read_manifest


HOST_BATCH = 24
HOST_STEPS = 12


def host_batches(path: str, rank: int, world: int, start_step: int,
                 batch_size: int = HOST_BATCH) -> list[npt.NDArray[Any]]:
    """This host's label batches for steps start_step .. HOST_STEPS-1."""
    from loaderx.dataloader import DataLoader

    streams = {"image": DenseDataset(f"{path}/image"), "label": DenseDataset(f"{path}/label")}
    out = []
    with DataLoader(streams, batch_size=batch_size, seed=3, start_step=start_step,
                    shard=(rank, world) if world > 1 else None) as loader:
        for batch in loader:
            labels = batch["label"]
            # The image rows travel with their labels: image k was written from label k.
            np.testing.assert_array_equal(batch["image"][:, 0], labels % 251)
            out.append(labels)
            if loader.step == HOST_STEPS:
                break
    return out


def distributed_rank(rank: int, world: int, path: str, init: str, results: Any) -> None:
    """One torch.distributed (gloo) rank: reads its shard and gathers every rank's batches."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        mine = host_batches(path, dist.get_rank(), dist.get_world_size(), 0)
        resumed = host_batches(path, dist.get_rank(), dist.get_world_size(), 7)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, (mine, resumed))
        if rank == 0:
            results.put([[b.tolist() for b in m] for m, _ in gathered]
                        + [[b.tolist() for b in r] for _, r in gathered])
    finally:
        dist.destroy_process_group()


def _result_of(ranks: list[Any], results: Any, timeout: float) -> Any:
    """The first result the ranks put, failing at once when a rank died first (a crashed rank
    would otherwise cost the whole timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=1.0)
        except queue.Empty:
            dead = [p.exitcode for p in ranks if p.exitcode not in (None, 0)]
            assert not dead, f"a rank exited with {dead} before putting its result"
    raise AssertionError(f"no result from the ranks in {timeout} s")


def test_two_distributed_ranks_split_every_global_batch(tmp_path: Path) -> None:
    path = str(tmp_path / "corpus")
    count = 1000
    labels = np.arange(count, dtype=np.int64)
    images = np.repeat((labels % 251).astype(np.uint8)[:, None], 16, axis=1)
    from_numpy(f"{path}/label", labels, codec="raw", workers=2, shard_records=150)
    from_numpy(f"{path}/image", images, workers=2, shard_records=150)
    assert len(read_manifest(f"{path}/label").shards) == 8  # type: ignore[union-attr]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    init = f"file://{tmp_path / 'rendezvous'}"
    ranks = [ctx.Process(target=distributed_rank, args=(r, 2, path, init, results))
             for r in range(2)]
    for process in ranks:
        process.start()
    gathered = _result_of(ranks, results, 300.0)
    for process in ranks:
        process.join(60)
        assert process.exitcode == 0
    fresh, resumed = gathered[:2], gathered[2:]
    single = host_batches(path, 0, 1, 0, 2 * HOST_BATCH)  # one process, the global batch
    assert len(single) == HOST_STEPS
    for step, global_batch in enumerate(single):
        halves = [fresh[0][step], fresh[1][step]]
        assert len(halves[0]) == len(halves[1]) == HOST_BATCH
        assert not set(halves[0]) & set(halves[1])
        assert halves[0] + halves[1] == global_batch.tolist()
    for step in range(7, HOST_STEPS):
        assert resumed[0][step - 7] == fresh[0][step]
        assert resumed[1][step - 7] == fresh[1][step]


def read_versions(path: str, stop: Any, seen: Any) -> None:
    """Reads the whole dataset again and again; records which version each read saw."""
    from loaderx.errors import CorruptStoreError

    counts = {"old": 0, "new": 0, "absent": 0, "gone": 0, "mixed": 0}
    while not stop.is_set():
        try:
            with DenseDataset(path) as ds:
                data = ds[:]
        except FileNotFoundError:
            counts["absent"] += 1  # between the two renames of a swap
            continue
        except CorruptStoreError as error:
            # The old folder was deleted after the swap, before this reader opened a chunk
            # it had not touched yet (stores open chunk files on first use): an error, never
            # data from the other version.
            assert "is missing" in str(error), error
            counts["gone"] += 1
            continue
        if len(data) == 300 and (data == 1).all():
            counts["old"] += 1
        elif len(data) == 500 and (data == 2).all():
            counts["new"] += 1
        else:
            counts["mixed"] += 1
    seen.put(counts)


def test_a_concurrent_reader_sees_the_old_or_the_new_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    old = np.ones((300, 64), dtype=np.uint8)
    new = np.full((500, 64), 2, dtype=np.uint8)
    from_numpy(path, old, workers=2, shard_records=100)
    ctx = multiprocessing.get_context("spawn")
    stop, seen = ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=read_versions, args=(path, stop, seen))
    reader.start()
    try:
        time.sleep(1.0)
        for round_index in range(6):
            version = new if round_index % 2 == 0 else old
            from_numpy(path, version, workers=2, shard_records=100, overwrite=True)
            time.sleep(0.2)
    finally:
        stop.set()
    counts = seen.get(timeout=60)
    reader.join(60)
    assert counts["mixed"] == 0, counts
    assert counts["old"] > 0 and counts["new"] > 0, counts
