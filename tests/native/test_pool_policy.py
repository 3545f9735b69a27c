"""The pool policy (loaderx._native.library.set_pool_policy, lx_pool_set_policy): whether the pool's
helper threads join large gathers. Every policy gives the same bytes, from a store and from a
view of shards, also while another thread changes it (and the stores policy with it); a bad
value of either policy is refused with the policy left as it was."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._native import library as _native
from loaderx.dataset import DenseDataset

RECORD_SHAPE = (4096,)  # 256 records make a 1 MiB batch: large enough for the pool's helpers
COUNT = 1024
POLICIES = (_native.POOL_AUTO, _native.POOL_ALWAYS, _native.POOL_NEVER)
# The batches above may stream, so their stores follow this policy (test_streaming_stores.py).
STORES_POLICIES = (_native.STORES_STREAMING, _native.STORES_CACHED, _native.STORES_AUTO)


@pytest.fixture(autouse=True)
def restore_policy() -> Iterator[None]:
    yield
    _native.set_pool_policy(_native.POOL_AUTO)
    _native.set_stores_policy(_native.STORES_AUTO)


def _records() -> npt.NDArray[np.uint8]:
    return np.random.default_rng(5).integers(0, 256, (COUNT, *RECORD_SHAPE), dtype=np.uint8)


def _datasets(tmp_path: Path, data: npt.NDArray[np.uint8]) -> list[DenseDataset]:
    single = DenseDataset(tmp_path / "single", dtype=np.uint8, item_shape=RECORD_SHAPE, codec="raw")
    sharded = DenseDataset(
        tmp_path / "sharded", dtype=np.uint8, item_shape=RECORD_SHAPE, codec="raw", shard_records=300
    )
    for dataset in (single, sharded):
        dataset.append(data)
    return [single, sharded]


def test_the_default_is_auto_and_each_policy_reads_back() -> None:
    assert _native.pool_policy() == _native.POOL_AUTO
    for policy in POLICIES:
        _native.set_pool_policy(policy)
        assert _native.pool_policy() == policy


def test_every_policy_gathers_the_same_bytes_from_a_store_and_from_shards(tmp_path: Path) -> None:
    data = _records()
    datasets = _datasets(tmp_path, data)
    rng = np.random.default_rng(6)
    for policy in POLICIES:
        _native.set_pool_policy(policy)
        # Enough batches for the advisor's warm-up to send some each way under POOL_AUTO.
        for _ in range(24):
            indices = rng.integers(0, COUNT, 256)
            for dataset in datasets:
                out = np.full((256, *RECORD_SHAPE), 0xAA, dtype=np.uint8)
                dataset.gather_into(indices, out)
                np.testing.assert_array_equal(out, data[indices])
                np.testing.assert_array_equal(dataset[indices], data[indices])
    for dataset in datasets:
        dataset.close()


# The process-wide policies of the library, each with its setter, getter, a value other than
# the default, and its name: the pool's, and the stores' (tests/native/test_streaming_stores.py).
SETTINGS = [
    (_native.set_pool_policy, _native.pool_policy, _native.POOL_NEVER, "POOL"),
    (_native.set_stores_policy, _native.stores_policy, _native.STORES_CACHED, "STORES"),
]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda setting: str(setting[3]))
@pytest.mark.parametrize("bad", [3, -1, 1 << 32, "auto", 1.0, None])
def test_a_bad_policy_is_refused_and_the_policy_kept(
    setting: tuple[Callable[[int], None], Callable[[], int], int, str], bad: object
) -> None:
    set_policy, policy, chosen, name = setting
    set_policy(chosen)
    try:
        with pytest.raises(ValueError, match=f"{name}_AUTO") as raised:
            set_policy(bad)  # type: ignore[arg-type]
        if bad == 3:  # in range for the C call: the library's own message
            what = name.lower()
            assert f"{what} policy 3 is not one of LX_{name}_AUTO (0)" in str(raised.value)
        assert policy() == chosen
    finally:
        set_policy(0)


def test_gathers_stay_exact_while_another_thread_switches_the_policies(tmp_path: Path) -> None:
    data = _records()
    datasets = _datasets(tmp_path, data)
    stop = threading.Event()
    failures: list[str] = []
    gathers = [0] * len(datasets)

    def reader(which: int) -> None:
        rng = np.random.default_rng(which)
        out = np.empty((256, *RECORD_SHAPE), dtype=np.uint8)
        while not stop.is_set():
            indices = rng.integers(0, COUNT, 256)
            datasets[which].gather_into(indices, out)
            if not np.array_equal(out, data[indices]):
                failures.append(f"wrong bytes from dataset {which}")
                return
            gathers[which] += 1

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(len(datasets))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    switches = 0
    try:
        # Until every reader has gathered under many policy changes (the deadline only guards
        # against a hang: it is far beyond what this takes).
        while min(gathers) < 100 and not failures and time.monotonic() < deadline:
            _native.set_pool_policy(POLICIES[switches % len(POLICIES)])
            _native.set_stores_policy(STORES_POLICIES[switches % len(STORES_POLICIES)])
            switches += 1
            time.sleep(0.0002)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []
    assert min(gathers) >= 100
    assert switches >= 30
    for dataset in datasets:
        dataset.close()
