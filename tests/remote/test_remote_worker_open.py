"""Loaders over a real S3-protocol server (moto's) whose endpoint is cut while they start:
worker processes reopen the datasets themselves, and a reopening that fails (the store out of
reach) fails the step it was for, as a thread loader's read does, instead of killing the worker
and closing the loader. next() raises a RemoteError for that step, the loader stays open, and
once the endpoint is back the batches come again, byte-identical to the thread loader's, in
step order. And worker processes forked from a consumer reading a URL are refused.

The endpoint is tools/netproxy.py in front of the server, stopped and started again on its port:
a restarted moto answers before the kit has put its objects back, and a read in between got a
404 (FileNotFoundError) instead of the outage's RemoteError."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import RemoteError

from .proxied import NetProxy, proxied_images
from .s3_server import S3Server

BATCH = 10
# (worker_type, start_method): the thread loader, and worker processes with the start methods
# that may read a URL (fork is refused: test_fork_over_a_url_is_refused).
MODES = [("thread", None), ("process", "forkserver"), ("process", "spawn")]
MODE_IDS = ["thread", "forkserver", "spawn"]


def scaled(batch: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """A transform (module level, so that spawn and forkserver can send it)."""
    x = batch["x"].astype(np.float32)
    return {"x": x * 0.25 + 1.0, "total": x.sum(axis=1)}


def expected(data: np.ndarray, step: int) -> dict[str, npt.NDArray[Any]]:
    """Step `step` of a sequential loader over data, transformed: the thread loader's batch."""
    rows = (np.arange(BATCH) + step * BATCH) % len(data)
    return scaled({"x": data[rows]})


def assert_batch(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert list(got) == list(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
        assert got[key].tobytes() == want[key].tobytes()


def leftovers() -> tuple[list[str], list[str]]:
    """This process's loader worker processes still alive and /dev/shm slot files still there."""
    workers = [p.name for p in multiprocessing.active_children()
               if p.name.startswith("loaderx-worker")]
    files = sorted(p.name for p in Path("/dev/shm").glob(f"loaderx-{os.getpid()}-*"))
    return workers, files


@pytest.fixture
def served(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, np.ndarray, NetProxy]]:
    """A dataset on the server, reached through the proxy; a short retry budget, so that a read
    or an open fails within seconds once the proxy stops (the workers take the environment when
    they start)."""
    with proxied_images(s3_env, s3_bucket, tmp_path, monkeypatch,
                        retry_seconds=1, timeout_seconds=1) as found:
        yield found


def take(loader: DataLoader) -> tuple[int, dict[str, Any] | RemoteError]:
    """(the step next() was for, its batch copied or the RemoteError it raised)."""
    step = loader.step
    try:
        return step, {key: value.copy() for key, value in next(loader).items()}
    except RemoteError as error:
        return step, error


@pytest.mark.parametrize(("worker_type", "method"), MODES, ids=MODE_IDS)
def test_workers_started_while_the_store_is_down_fail_their_steps_then_go_on(
    served: tuple[str, np.ndarray, NetProxy], tmp_path: Path, worker_type: str,
    method: str | None
) -> None:
    """Step 0 is in the cache, step 1 is not, and the endpoint is cut before the loader starts.
    A worker started with forkserver or spawn reopens the dataset, which lists it: that killed
    the worker (exit code 1), and next() raised WorkerError("... the loader is closed. Restart
    from state_dict()"). Now, as with threads, step 0 comes from the cache, step 1 raises a
    RemoteError carrying the store's error, and once the endpoint is back the following steps
    come, each once and in order, byte-identical to the thread loader's."""
    url, data, proxy = served
    ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=60_000)
    try:
        ds[np.arange(BATCH)]  # step 0 of a sequential loader, cached
        assert ds._remote is not None  # private: which records the cache holds
        assert ds._remote.fetcher.missing(np.arange(BATCH, 2 * BATCH, dtype=np.int64))
        proxy.stop()
        loader = DataLoader({"x": ds}, batch_size=BATCH, transform=scaled, mode="sequential",
                            prefetch=1, workers=1, worker_type=worker_type,
                            start_method=method)
        with loader:
            outcomes = [take(loader), take(loader)]
            assert [step for step, _ in outcomes] == [0, 1]
            first, failed = outcomes[0][1], outcomes[1][1]
            assert isinstance(first, dict)
            assert_batch(first, expected(data, 0))
            assert isinstance(failed, RemoteError)
            assert "127.0.0.1" in str(failed)  # the store's own error, with its address
            assert "Restart from state_dict" not in str(failed)
            assert not loader.closed and loader.step == 2
            proxy.start()
            # The steps sent while the server was down (at most prefetch) may fail too; then
            # every step comes, once and in order.
            while len(outcomes) < 10:
                outcomes.append(take(loader))
            steps = [step for step, _ in outcomes]
            assert steps == list(range(10))
            errors = [step for step, got in outcomes if isinstance(got, RemoteError)]
            assert errors[0] == 1 and errors == list(range(1, 1 + len(errors)))
            assert len(errors) <= 1 + loader.prefetch
            for step, got in outcomes:
                if isinstance(got, dict):
                    assert_batch(got, expected(data, step))
            # The checkpoint is exact: a new thread loader from it gives the next batch.
            state = loader.state_dict()
            assert state["step"] == 10
            with DataLoader({"x": ds}, batch_size=BATCH, transform=scaled,
                            mode="sequential", workers=1) as resumed:
                resumed.load_state_dict(state)
                assert_batch(next(resumed), expected(data, 10))
            step, got = take(loader)
            assert step == 10 and isinstance(got, dict)
            assert_batch(got, expected(data, 10))
        assert leftovers() == ([], [])
    finally:
        if not proxy.running:
            proxy.start()
        ds.close()


def test_fork_over_a_url_is_refused(served: tuple[str, np.ndarray, NetProxy],
                                    tmp_path: Path) -> None:
    """Worker processes forked from a consumer that reads a URL: their requests ran on the
    object-store client's runtime, copied without its threads, and crashed the consumer (a
    segfault in that runtime's thread, found by the test above with fork). Refused before any
    process starts; forkserver and spawn are the way."""
    from loaderx.mixture import MixtureLoader

    url, data, _ = served
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        with pytest.raises(ValueError, match="start_method='fork' cannot read s3://.*'spawn'"):
            DataLoader({"x": ds}, batch_size=BATCH, worker_type="process", start_method="fork")
        with pytest.raises(ValueError, match="start_method='fork' cannot read s3://"):
            MixtureLoader([{"x": ds}, {"x": ds}], [0.5, 0.5], batch_size=BATCH,
                          worker_type="process", start_method="fork")
        with DataLoader({"x": ds}, batch_size=BATCH, mode="sequential",
                        start_method="fork") as threads:  # threads do not fork
            assert_batch(next(threads), {"x": data[:BATCH]})
    assert leftovers() == ([], [])


@pytest.mark.parametrize(("worker_type", "method"), MODES, ids=MODE_IDS)
def test_a_loader_made_while_the_store_is_down_raises_from_next_then_goes_on(
    served: tuple[str, np.ndarray, NetProxy], tmp_path: Path, worker_type: str,
    method: str | None
) -> None:
    """Nothing cached and the endpoint cut: the process loader makes its first step itself (to
    learn the layout), and its RemoteError came out of the constructor; so did it out of
    load_state_dict, which left the loader closed. Now, as with threads, the loader is made,
    next() raises the RemoteError for step 0, and once the endpoint is back the steps come,
    once each and in order, byte-identical; load_state_dict with the endpoint cut does the
    same."""
    url, data, proxy = served
    ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=60_000)
    try:
        proxy.stop()
        with DataLoader({"x": ds}, batch_size=BATCH, transform=scaled, mode="sequential",
                        prefetch=1, workers=1, worker_type=worker_type,
                        start_method=method) as loader:
            start = 0
            while True:
                step, failed = take(loader)
                assert step == start and isinstance(failed, RemoteError)
                assert "127.0.0.1" in str(failed) and not loader.closed
                proxy.start()
                outcomes: list[tuple[int, dict[str, Any] | RemoteError]] = [(step, failed)]
                while len(outcomes) < 8:
                    outcomes.append(take(loader))
                assert [step for step, _ in outcomes] == list(range(start, start + 8))
                errors = [step for step, got in outcomes if isinstance(got, RemoteError)]
                assert errors == list(range(start, start + len(errors)))
                assert len(errors) <= 2 + loader.prefetch
                for step, got in outcomes:
                    if isinstance(got, dict):
                        assert_batch(got, expected(data, step))
                if start:
                    break
                # Again from a step none of whose records has been fetched, through
                # load_state_dict with the endpoint cut (the processes' restart makes the
                # step here, as the constructor did).
                start = 25
                proxy.stop()
                assert ds._remote is not None  # private: which records the cache holds
                rows = np.arange(start * BATCH, (start + 1) * BATCH, dtype=np.int64)
                assert ds._remote.fetcher.missing(rows)
                loader.load_state_dict(dict(loader.state_dict(), step=start))
                assert loader.step == start
        assert leftovers() == ([], [])
    finally:
        if not proxy.running:
            proxy.start()
        ds.close()
