"""The loader's look-ahead over a real S3-protocol server (moto's): thread and process loaders
fetch the steps ahead of the consumer into the shared cache before any worker asks for them,
give the same bytes either way, stop the look-ahead on close() and collection, and a worker
process's eviction keeps what the consumer's look-ahead pinned (loaderx._remote.shared_hints)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx._loading.look_ahead import LookAhead
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.mixture import MixtureLoader

from .s3_server import S3Server

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 30.0


def images(count: int = 600, width: int = 700, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (count, width), dtype=np.uint8)
    data[: count // 2, : width // 2] = 3
    return data


@pytest.fixture
def dense_url(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> tuple[str, np.ndarray]:
    data = images()
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    s3_env.upload_tree(tmp_path / "local", s3_bucket, "ds")
    return f"s3://{s3_bucket}/ds", data


def half_cache(url: str, cache: Path) -> int:
    """Half of what the dataset takes in the cache: a fetch then brings only the records it
    was asked for (a cache that holds everything takes their neighbours along), and the
    look-ahead's window is a quarter of the dataset."""
    with DenseDataset(url, cache_dir=cache) as ds:
        assert ds._remote is not None
        return ds._remote.fetcher.total_cost // 2


def present(ds: DenseDataset, indices: np.ndarray) -> bool:
    assert ds._remote is not None
    return not ds._remote.fetcher.missing(np.asarray(indices, dtype=np.int64))


def wait_for(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def look_ahead_of(loader: DataLoader | MixtureLoader) -> LookAhead:
    ahead = loader._look_ahead
    assert isinstance(ahead, LookAhead)
    return ahead


def hint_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("hints/*.npz"))


def one_worker_loader(ds: DenseDataset, seed: int, prefetch: int) -> DataLoader:
    """Batches of 10 from one spawned worker process, `prefetch` steps ahead of the consumer."""
    return DataLoader({"x": ds}, batch_size=10, seed=seed, worker_type="process", workers=1,
                      prefetch=prefetch, start_method="spawn")


def test_process_workers_find_the_steps_ahead_fetched(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense_url
    cache = tmp_path / "cache"
    with DenseDataset(url, cache_dir=cache, cache_bytes=half_cache(url, cache)) as ds:
        with one_worker_loader(ds, seed=4, prefetch=2) as loader:
            ahead = look_ahead_of(loader)
            assert ahead.running
            for step in range(3):
                np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
            # No worker was sent a step from here on (they run `prefetch` steps ahead): only
            # the consumer's look-ahead can have fetched these.
            first = loader.step + loader.prefetch
            unasked = np.concatenate([loader.indices(s) for s in range(first, first + 4)])
            assert wait_for(lambda: present(ds, unasked)), "the look-ahead fetched nothing"
            assert hint_files(cache), "the look-ahead's pins are not published"
            for step in range(3, 12):
                np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
        assert not ahead.running
        assert loader._look_ahead is None
        assert not hint_files(cache), "close() left the look-ahead's hints behind"


def test_process_and_thread_loaders_give_the_same_bytes(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, _ = dense_url
    budget = half_cache(url, tmp_path / "cache")
    batches: dict[str, list[np.ndarray]] = {}
    for worker_type in ("thread", "process"):
        # A cache of its own each: the process loader starts as cold as the thread one did.
        with DenseDataset(url, cache_dir=tmp_path / f"cache-{worker_type}",
                          cache_bytes=budget) as ds:
            with DataLoader({"x": ds}, batch_size=12, seed=9, mode="iid",
                            worker_type=worker_type, workers=2, prefetch=3,
                            start_method="spawn") as loader:
                batches[worker_type] = [next(loader)["x"] for _ in range(15)]
    for by_threads, by_processes in zip(batches["thread"], batches["process"]):
        assert by_threads.dtype == by_processes.dtype and by_threads.shape == by_processes.shape
        assert by_threads.tobytes() == by_processes.tobytes()


def test_a_collected_process_loader_stops_its_look_ahead(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense_url
    cache = tmp_path / "cache"
    with DenseDataset(url, cache_dir=cache, cache_bytes=half_cache(url, cache)) as ds:
        loader = one_worker_loader(ds, seed=2, prefetch=1)
        np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(0)])
        ahead = look_ahead_of(loader)
        del loader
        gc.collect()
        assert wait_for(lambda: not ahead.running)
        assert "loaderx-look-ahead" not in [t.name for t in threading.enumerate()]
        assert wait_for(lambda: not hint_files(cache))


def test_a_mixture_with_worker_processes_fetches_ahead(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense_url
    other = images(300, seed=8)
    from_numpy(str(tmp_path / "other"), other, codec="raw")
    budget = half_cache(url, tmp_path / "cache")
    by_source = [data, other]
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=budget) as remote, \
            DenseDataset(str(tmp_path / "other"), readonly=True) as local:
        with MixtureLoader([{"x": remote}, {"x": local}], [0.7, 0.3], batch_size=12, seed=3,
                           source_key="source", worker_type="process", workers=1,
                           prefetch=2, start_method="spawn") as loader:
            ahead = look_ahead_of(loader)

            def expected(step: int) -> np.ndarray:
                chosen, indices = loader.sampler.batch(step)
                return np.stack([by_source[s][i] for s, i in zip(chosen.tolist(), indices.tolist())])

            def remote_rows(step: int) -> np.ndarray:
                chosen, indices = loader.sampler.batch(step)
                rows: np.ndarray = indices[chosen == 0]
                return rows

            for step in range(3):
                np.testing.assert_array_equal(next(loader)["x"], expected(step))
            first = loader.step + loader.prefetch
            unasked = np.concatenate([remote_rows(s) for s in range(first, first + 4)])
            assert wait_for(lambda: present(remote, unasked)), "the look-ahead fetched nothing"
            for step in range(3, 12):
                np.testing.assert_array_equal(next(loader)["x"], expected(step))
        assert not ahead.running


# --- eviction across processes ------------------------------------------------------------

READ_THE_REST = """
    import numpy as np
    from loaderx.dataset import DenseDataset
    with DenseDataset({url!r}, cache_dir={cache!r}, cache_bytes={budget}) as ds:
        for start in range({first}, len(ds), 40):
            ds[np.arange(start, min(start + 40, len(ds)))]
"""


def _run_child(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]


def test_another_process_evicting_keeps_what_a_look_ahead_pinned(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """What a worker process does when its fetch finds the cache full, with the consumer's
    look-ahead holding the lowest records (the ones an eviction that knows nothing takes
    first): they stay while the hints are published, and go once they are withdrawn."""
    url, data = dense_url
    cache = tmp_path / "cache"
    budget = half_cache(url, cache) // 2
    held = np.arange(20, dtype=np.int64)
    child = READ_THE_REST.format(url=url, cache=str(cache), budget=budget, first=20)
    with DenseDataset(url, cache_dir=cache, cache_bytes=budget) as ds:
        assert ds._remote is not None
        fetcher = ds._remote.fetcher
        np.testing.assert_array_equal(ds[held], data[held])
        token = fetcher.pin(held)
        fetcher.set_future(held, np.full(len(held), 7, dtype=np.int64))
        _run_child(child)  # reads every other record, through a cache a sixth of their size
        assert present(ds, held)
        np.testing.assert_array_equal(ds[held], data[held])
        fetcher.unpin(token)
        nothing = np.empty(0, np.int64)
        fetcher.set_future(nothing, nothing)
        assert not hint_files(cache)
        _run_child(child)
        assert not present(ds, held)  # unpinned, the lowest records were the first to go


def test_the_hints_of_a_process_that_died_are_ignored_and_removed(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, _ = dense_url
    cache = tmp_path / "cache"
    _run_child(f"""
        import os
        import numpy as np
        from loaderx.dataset import DenseDataset
        ds = DenseDataset({url!r}, cache_dir={str(cache)!r}, cache_bytes=100000)
        held = np.arange(5, dtype=np.int64)
        ds._remote.fetcher.pin(held)
        ds._remote.fetcher.set_future(held, held)
        os._exit(0)  # dies without closing: its hints file stays, its lock goes
        """)
    assert len(hint_files(cache)) == 1
    with DenseDataset(url, cache_dir=cache, cache_bytes=100000) as ds:
        assert ds._remote is not None
        pinned, indices, ahead = ds._remote.fetcher._hints.others()
        assert len(pinned) == len(indices) == len(ahead) == 0
    assert not hint_files(cache)
    assert not list(cache.rglob("hints/*.lock"))
