"""The loader's look-ahead over a real S3-protocol server (moto's): a worker process's eviction
keeps what the consumer's look-ahead pinned (loaderx._remote.shared_hints)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

from .s3_server import S3Server

ROOT = Path(__file__).resolve().parents[2]


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


def hint_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("hints/*.npz"))


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
