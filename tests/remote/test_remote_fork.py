"""A process forked after the object-store client was used: obstore's runtime does not survive
fork (its threads are not copied, its epoll instance is shared with the parent), so such a
process refuses every request with a RemoteError that says what to do, and reads only what the
cache already holds. Before, torch's DataLoader with its default (fork) workers over a dataset
opened from a URL crashed the training process with a segfault."""

from __future__ import annotations

import os
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
        batches = iter(loader)
        try:
            with pytest.raises(RemoteError, match="multiprocessing_context='forkserver'"):
                list(batches)
        finally:
            # torch leaves its workers to the iterator's collection, and the traceback pytest
            # keeps holds the iterator: they lived until multiprocessing's exit hook, which
            # joined them for ever in two CI runs (a worker waiting on its index queue). Stop
            # them here, as torch's own shutdown does: a None in each queue, then a join.
            batches._shutdown_workers()  # type: ignore[attr-defined]
        assert [w for w in batches._workers if w.is_alive()] == []  # type: ignore[attr-defined]
        np.testing.assert_array_equal(ds[np.arange(len(data))], data)



def test_a_forked_child_closing_the_dataset_leaves_its_own_files_alone(
    remote_images: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """The child's copies of the dataset's lock descriptors are closed at the fork
    (lock_descriptors), so their numbers may name the child's own files by the time it closes
    the dataset it inherited. close() there must close none of them. Before, the replica
    closed its in-use lock's number again: a file the child had opened since was closed
    under it (or close() raised EBADF)."""
    url, data = remote_images
    ds = DenseDataset(url, cache_dir=tmp_path / "cache")
    mine = tmp_path / "mine"
    mine.write_bytes(b"the child's own file")
    try:

        def child() -> None:
            # The lowest free numbers include the ones freed at the fork: take a few.
            held = [os.open(mine, os.O_RDONLY) for _ in range(8)]
            ds.close()
            for fd in held:
                assert os.pread(fd, 5, 0) == b"the c"
                os.close(fd)

        wait_child(run_child(child))
        np.testing.assert_array_equal(ds[np.arange(len(data))], data)  # the parent's is open
    finally:
        ds.close()
