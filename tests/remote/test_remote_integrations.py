"""The integrations over a dataset read from a real S3 server: torch's DataLoader with spawned
workers (each reopens the dataset from its URL and shares the cache), JAX's device_prefetch,
and Ray's read_dataset."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.torch import TorchDataset

from .s3_server import S3Server
from .test_remote_read import images, publish


@pytest.fixture
def remote_images(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> tuple[str, np.ndarray]:
    data = images(200, 64)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    return publish(s3_env, s3_bucket, tmp_path / "local"), data


def test_torch_workers_reopen_the_dataset_from_its_url(
    remote_images: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = remote_images
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        # The consumer has used the client before its workers start: spawned workers make
        # their own (a forked one could not; test_remote_fork.py).
        ds[np.arange(5)]
        loader = torch.utils.data.DataLoader(
            TorchDataset({"x": ds}), batch_size=None, num_workers=2,
            # spawn, not forkserver: a forkserver an earlier test started would give the
            # workers its own environment, without this test's credentials (remote.md).
            multiprocessing_context="spawn", timeout=120,
        )
        got = [sample["x"].numpy() for sample in loader]
    np.testing.assert_array_equal(np.stack(got), data)


def test_jax_device_prefetch_over_a_remote_loader(
    remote_images: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    from loaderx.jax import device_prefetch

    url, data = remote_images
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        loader = DataLoader({"x": ds}, batch_size=10, seed=2)
        expected = [data[loader.indices(step)] for step in range(6)]
        with device_prefetch(loader, size=2) as batches:
            for step, batch in zip(range(6), batches):
                np.testing.assert_array_equal(np.asarray(batch["x"]), expected[step])
        loader.close()


def test_ray_reads_a_remote_dataset(
    remote_images: tuple[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from loaderx.ray import read_dataset

    url, data = remote_images
    # Ray's workers read through the default cache: the test's own, not the user's.
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "ray-cache"))
    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True,
             log_to_driver=False)
    try:
        rows = read_dataset(url).take_all()
    finally:
        ray.shutdown()
    name = url.rsplit("/", 1)[-1]
    np.testing.assert_array_equal(np.stack([row[name] for row in rows]), data)


def test_ray_writes_columns_to_a_url(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from loaderx.ray import write_dataset

    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    rows = images(64, 16)
    ray.init(num_cpus=1, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        ray.data.DataContext.get_current().execution_options.preserve_order = True
        source = ray.data.from_items([{"x": row, "y": i} for i, row in enumerate(rows)])
        url = f"s3://{s3_bucket}/table"
        write_dataset(source, url)
        write_dataset(source, url, append=True)
    finally:
        ray.shutdown()
    with DenseDataset(f"{url}/x") as xs, DenseDataset(f"{url}/y") as ys:
        np.testing.assert_array_equal(xs.read(np.arange(128)), np.concatenate([rows, rows]))
        np.testing.assert_array_equal(ys.read(np.arange(128)), np.concatenate([np.arange(64)] * 2))


def test_process_workers_read_a_remote_dataset(remote_images: tuple[str, np.ndarray],
                                               tmp_path: Path) -> None:
    """Worker processes reopen the dataset from its URL (with the same cache folder) and give
    the thread loader's batches. Spawned: they take the environment as it is now (the test's
    endpoint); a forkserver started by an earlier test would hand them its own, older one."""
    url, data = remote_images
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        with DataLoader({"x": ds}, batch_size=10, seed=4, worker_type="process",
                        workers=2, start_method="spawn") as loader:
            for step in range(6):
                np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
