"""Gathers on one sharded dataset handle while the same handle deletes and compacts: every
record a gather returns for index i is a record i held before or after a delete that overlapped
the gather, never another one (issue 40, point 1). Records carry their identity in their bytes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from loaderx.dataset import DenseDataset
from loaderx.errors import StoreLockedError

RECORDS = 1200
SHARD_RECORDS = 100


def _identity(ids: np.ndarray) -> np.ndarray:
    return np.stack([ids, ids * 7 + 3], axis=1).astype(np.int64)


def test_gathers_during_deletes_on_the_same_handle_return_before_or_after(tmp_path: Path) -> None:
    ds = DenseDataset(str(tmp_path / "ds"), dtype=np.int64, item_shape=(2,), codec="raw",
                      shard_records=SHARD_RECORDS)
    ds.append(_identity(np.arange(RECORDS)))
    assert ds.sharded
    lock = threading.Lock()
    versions = [ds[:][:, 0].copy()]
    deleting = [0]
    reads: list[tuple[int, int, np.ndarray, np.ndarray]] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                with lock:
                    first = len(versions) - 1
                    length = len(versions[-1])
                idx = rng.integers(0, max(1, length), 64)
                out = np.empty((64, 2), dtype=np.int64)
                try:
                    ds.gather_into(idx, out)
                except IndexError:
                    continue  # a delete shrank the dataset below one of the indices
                with lock:
                    last = len(versions) - 1 + deleting[0]
                assert (out[:, 1] == out[:, 0] * 7 + 3).all(), "a torn or foreign record"
                reads.append((first, last, idx, out[:, 0].copy()))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    def deleter() -> None:
        rng = np.random.default_rng(99)
        try:
            for round_ in range(40):
                with lock:
                    deleting[0] = 1
                    length = len(versions[-1])
                ds.delete(np.unique(rng.integers(0, length, 5)))
                if round_ % 10 == 9:
                    try:
                        ds.compact()
                    except StoreLockedError:
                        pass
                now = ds[:][:, 0].copy()
                with lock:
                    versions.append(now)
                    deleting[0] = 0
        except BaseException as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            stop.set()

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in (1, 2)]
    threads.append(threading.Thread(target=deleter))
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert len(versions) == 41 and reads, (len(versions), len(reads), time.monotonic() - started)
    wrong = 0
    for first, last, idx, got in reads:
        for position, index in enumerate(idx.tolist()):
            allowed = {int(versions[v][index]) for v in range(first, min(last, len(versions) - 1) + 1)
                       if index < len(versions[v])}
            if int(got[position]) not in allowed:
                wrong += 1
    assert wrong == 0, f"{wrong} records that their index held neither before nor after a delete"
    ds.close()
