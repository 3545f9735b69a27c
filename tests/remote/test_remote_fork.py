"""A process forked after the object-store client was used: obstore's runtime does not survive
fork (its threads are not copied, its epoll instance is shared with the parent), so such a
process refuses every request with a RemoteError that says what to do, and reads only what the
cache already holds. Before, torch's DataLoader with its default (fork) workers over a dataset
opened from a URL crashed the training process with a segfault."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from forked_child import run_child, wait_child
from loaderx.dataset import DenseDataset
from loaderx.errors import RemoteError
from loaderx.torch import TorchDataset

from .test_remote_integrations import remote_images  # noqa: F401  (a fixture)


def test_a_forked_child_reads_the_cache_and_refuses_requests(
    remote_images: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = remote_images
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:  # the open made requests

        def cold_child() -> None:
            try:
                ds[np.arange(10)]
            except RemoteError as error:
                assert "forked from process" in str(error) and "forkserver" in str(error)
            else:
                raise AssertionError("a forked child fetched records")

        wait_child(run_child(cold_child))
        # The parent's client is untouched: it fetches and reads exactly as before.
        np.testing.assert_array_equal(ds[np.arange(len(data))], data)

        def warm_child() -> None:
            assert np.array_equal(ds[np.arange(len(data))], data)  # no request needed

        wait_child(run_child(warm_child))


def test_torch_fork_workers_over_a_url_raise_instead_of_crashing(
    remote_images: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = remote_images
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        loader = torch.utils.data.DataLoader(
            TorchDataset({"x": ds}), batch_size=None, num_workers=2,
            multiprocessing_context="fork", timeout=120,
        )
        with pytest.raises(RemoteError, match="multiprocessing_context='forkserver'"):
            list(loader)
        np.testing.assert_array_equal(ds[np.arange(len(data))], data)

