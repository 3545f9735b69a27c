"""What a second core gives a transform in this run: the transform alone (no loader) in one
process against two, each process running the same number of batches.

On a shared machine the other jobs decide how much of the second core is free, and that
bounds any loader that spreads the transform over processes: a loader's processes-vs-threads
ratio is read against this figure from the same run (2.0x on an idle 2-core machine).

A worker process also gathers its batch and copies the transform's output into a slot of
shared memory, while a thread loader gathers on its other thread as the transform runs:
`worker_share` measures what part of a worker's step is the transform (in runs on the 2-core
VM, 0.92 to 0.96; processes/threads then still reached 0.85 to 1.03 of the headroom, since
the thread loader itself falls short of one transform per batch time).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

# Batches each process transforms per measurement: long enough that fork and exit are small
# beside it (a GIL-bound transform of 256 samples takes tens of milliseconds).
BATCHES = 24


def _apply(transform: Callable[[np.ndarray], np.ndarray], batch: np.ndarray) -> None:
    for _ in range(BATCHES):
        transform(batch)


def _seconds(work: Callable[..., None], args: tuple[Any, ...], processes: int) -> float:
    """Wall time of `processes` forked processes each running work(*args), from the first start
    to the last exit."""
    context = multiprocessing.get_context("fork")
    started = time.perf_counter()
    workers = [context.Process(target=work, args=args) for _ in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a measuring process exited with {worker.exitcode}")
    return time.perf_counter() - started


def process_gain(work: Callable[..., None], args: tuple[Any, ...], rounds: int) -> float:
    """Median over `rounds` of how much more of work(*args) two processes get through per second
    than one: 2 x (one process's time) / (two processes' time), 2.0 on two idle cores."""
    gains = []
    for _ in range(rounds):
        one = _seconds(work, args, 1)
        two = _seconds(work, args, 2)
        gains.append(2 * one / two)
    return statistics.median(gains)


def two_process_gain(transform: Callable[[np.ndarray], np.ndarray], batch: np.ndarray,
                     rounds: int) -> float:
    """process_gain of BATCHES batches of the transform."""
    return process_gain(_apply, (transform, batch), rounds)


def worker_share(path: str, transform: Callable[[np.ndarray], np.ndarray], records: int,
                 batch: int, rounds: int) -> float:
    """Median over rounds x BATCHES steps of transform / (gather + transform + write into a
    slot), the three parts of a worker process's step, timed in this process. The write is the
    workers' own (a slot file of loaderx._loading.shared_ring and its write_batch)."""
    from loaderx._loading.shared_ring import Layout, SlotFiles, write_batch
    from loaderx.dataset import DenseDataset

    rng = np.random.default_rng(3)
    shares = []
    with DenseDataset(path) as dataset:
        out = np.empty((batch, *dataset.item_shape), dtype=dataset.dtype)
        dataset.gather_into(np.arange(batch, dtype=np.int64), out)
        layout = Layout({"x": transform(out)})
        files = SlotFiles(SlotFiles.new_prefix(), layout.size)
        slot = files.create(0)
        try:
            for _ in range(rounds * BATCHES):
                indices = rng.choice(records, batch, replace=False).astype(np.int64)
                started = time.perf_counter()
                dataset.gather_into(indices, out)
                gathered = time.perf_counter()
                result = transform(out)
                transformed = time.perf_counter()
                write_batch(layout, slot, {"x": result})
                written = time.perf_counter()
                shares.append((transformed - gathered) / (written - started))
        finally:
            slot.close()
            files.unlink_all()
    return statistics.median(shares)


__all__ = ["process_gain", "two_process_gain", "worker_share"]
