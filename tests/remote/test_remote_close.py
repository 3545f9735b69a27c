"""A closed remote dataset lets go of its cache folder at close(), against moto's S3 server:
no mapping (/proc/self/maps) and no descriptor (/proc/self/fd) of the folder stays in the
process after close() or the context manager's exit, with or without a loader and its
look-ahead still running, and a read after close raises as a closed local dataset does."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from background import Background

from loaderx._loading.look_ahead import LookAhead  # private: whether its thread ended
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset

from .proxied import NetProxy
from .s3_server import S3Server
from .test_remote_read import images, publish


def held_in(folder: Path) -> list[str]:
    """The mappings and open descriptors of this process under folder."""
    prefix = os.path.realpath(folder) + os.sep
    found = [line.split(None, 5)[-1].strip() for line in open("/proc/self/maps")
             if prefix in line]
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the descriptor listdir itself used
        if target.startswith(prefix):
            found.append(f"fd {fd}: {target}")
    return found


@pytest.fixture
def dense(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> tuple[str, np.ndarray]:
    data = images(400, 500)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    return publish(s3_env, s3_bucket, tmp_path / "local"), data


def test_close_releases_every_mapping_and_descriptor(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense
    cache = tmp_path / "cache"
    ds = DenseDataset(url, cache_dir=cache, cache_bytes=100 * 4096)  # evicts as it reads
    for start in range(0, len(data), 50):
        idx = np.arange(start, start + 50, dtype=np.int64)
        np.testing.assert_array_equal(ds[idx], data[idx])
    assert held_in(cache)  # the state files are mapped while it is open
    ds.close()
    assert held_in(cache) == []
    local = DenseDataset(str(tmp_path / "local"), readonly=True)
    local.close()
    for closed in (local, ds):
        with pytest.raises(ValueError, match="is closed"):
            closed[np.array([1, 2], dtype=np.int64)]
        with pytest.raises(ValueError, match="is closed"):
            closed.gather_into(np.array([1], dtype=np.int64), np.empty((1, 500), np.uint8))
    ds.close()  # a second close does nothing
    assert held_in(cache) == []


def test_every_call_on_a_closed_dataset_names_it_by_what_it_was_opened_with(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense
    remote = DenseDataset(url, cache_dir=tmp_path / "cache")
    local = DenseDataset(str(tmp_path / "local"), readonly=True)
    np.testing.assert_array_equal(remote[3], data[3])
    remote.close()
    local.close()
    for closed, name in ((remote, url), (local, str(tmp_path / "local"))):
        calls: dict[str, Callable[[], object]] = {
            "len": lambda: len(closed),
            "ds[i]": lambda: closed[1],
            "ds[idx]": lambda: closed[np.array([1, 2], dtype=np.int64)],
            "gather_into": lambda: closed.gather_into(np.array([1], dtype=np.int64),
                                                      np.empty((1, 500), np.uint8)),
        }
        for what, call in calls.items():
            with pytest.raises(ValueError) as raised:
                call()
            assert str(raised.value) == f"dataset {name!r} is closed", (what, raised.value)


def test_the_context_managers_release_the_cache_with_a_loader(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense
    cache = tmp_path / "cache"
    with DenseDataset(url, cache_dir=cache, cache_bytes=150 * 4096) as ds:
        with DataLoader({"x": ds}, batch_size=16, seed=3, mode="iid", workers=2) as loader:
            for step in range(8):
                np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
    assert held_in(cache) == []


def test_a_dataset_closed_under_a_running_look_ahead_is_released(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """The dataset closes while its loader's look-ahead may still be fetching (the loader is
    closed after it): the look-ahead finds the cache closed, and nothing touches the
    unmapped state files (a use after the unmap would be a SIGSEGV)."""
    url, data = dense
    cache = tmp_path / "cache"
    ds = DenseDataset(url, cache_dir=cache, cache_bytes=150 * 4096)
    loader = DataLoader({"x": ds}, batch_size=16, seed=4, mode="iid", workers=2)
    try:
        np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(0)])
        ahead = loader._look_ahead
        assert isinstance(ahead, LookAhead) and ahead.running
        ds.close()
        assert held_in(cache) == []
        # The look-ahead ends by itself (before, it polled the closed cache until the loader
        # closed). Its polls come every 50 ms: a generous wait, not a timing.
        deadline = time.monotonic() + 30
        while ahead.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ahead.running
    finally:
        loader.close()
    assert held_in(cache) == []


def test_an_interrupt_as_a_read_pins_its_records_leaves_no_pin(
    dense: tuple[str, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C as pin() returns, in a read that fetches (Fetcher.reading): the read's finally
    still unpins, so the records can be evicted again. Before, the token was lost with the
    interrupt and the pin stayed for the dataset's life."""
    url, data = dense
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=100 * 4096) as ds:
        fetcher = ds._remote.fetcher  # type: ignore[union-attr]
        pin = fetcher.pin

        def pin_then_interrupt(*arguments: Any) -> int:
            pin(*arguments)
            raise KeyboardInterrupt  # as the pin is made, before the caller has the token

        monkeypatch.setattr(fetcher, "pin", pin_then_interrupt)
        indices = np.arange(0, 400, 9, dtype=np.int64)
        with pytest.raises(KeyboardInterrupt):
            ds[indices]
        assert fetcher._pins == {}
        monkeypatch.undo()
        np.testing.assert_array_equal(ds[indices], data[indices])
        assert fetcher._pins == {}


def test_a_dataset_dropped_unclosed_lets_go_of_the_cache(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """A remote dataset collected without close() releases what it held in the cache folder:
    the version's in-use flock, the cache gate's descriptors, the chunk files it wrote
    fetched records into, and its published eviction hints (files and lock). Before, they
    stayed open until the process exited: the in-use lock kept the version from being
    reclaimed, the hints kept pinning records in other processes' evictions, and a process
    that opened and dropped datasets in a loop ran out of descriptors."""
    url, data = dense
    cache = tmp_path / "cache"
    ds = DenseDataset(url, cache_dir=cache, cache_bytes=100 * 4096)
    held = np.arange(0, 400, 11, dtype=np.int64)
    np.testing.assert_array_equal(ds[held], data[held])
    fetcher = ds._remote.fetcher  # type: ignore[union-attr]
    fetcher.pin(held)
    fetcher.set_future(held, held)  # published: the cache is smaller than the dataset
    assert len(list(cache.rglob("hints/*.npz"))) == 1
    assert any(path.endswith("in-use.lock") for path in held_in(cache))
    del ds, fetcher
    gc.collect()
    assert held_in(cache) == []
    assert list(cache.rglob("hints/*")) == []
    with DenseDataset(url, cache_dir=cache, cache_bytes=100 * 4096) as again:
        np.testing.assert_array_equal(again[held], data[held])
    assert held_in(cache) == []


def test_a_closed_ragged_dataset_is_released(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    rows = [np.full((n % 7 + 1, 3), n, dtype=np.int32) for n in range(120)]
    local = tmp_path / "local"
    with RaggedDataset(str(local), dtype=np.int32, item_shape=(3,)) as made:
        made.append(rows)
    url = publish(s3_env, s3_bucket, local)
    cache = tmp_path / "cache"
    with RaggedDataset(url, cache_dir=cache) as ds:
        for got, want in zip(ds[np.arange(len(rows), dtype=np.int64)], rows):
            np.testing.assert_array_equal(got, want)
    assert held_in(cache) == []
    with pytest.raises(ValueError, match="is closed"):
        ds[np.array([0], dtype=np.int64)]


def test_close_waits_for_a_read_inside_the_cache_gate(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """A read holds the cache gate while the native gather copies; a close from another thread
    closes the gate's descriptors only once it has left (closed under it, its release would
    unlock whatever file got the descriptor's number since)."""
    url, _ = dense
    cache = tmp_path / "cache"
    ds = DenseDataset(url, cache_dir=cache)
    fetcher = ds._remote.fetcher  # type: ignore[union-attr]
    inside, leave = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with fetcher._gate.shared():  # as reading() holds it around a gather
                inside.set()
                leave.wait()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    holder = threading.Thread(target=reader)
    holder.start()
    inside.wait()
    closer = threading.Thread(target=ds.close)
    closer.start()
    while not fetcher._maps.closed:  # the close got as far as the gate (no timing involved)
        closer.join(0.01)
    assert closer.is_alive()  # it waits for the reader
    leave.set()
    holder.join()
    closer.join()
    assert errors == [] and held_in(cache) == []


def test_close_while_ranges_wait_in_the_request_pool(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read waits for its ranges while all but the first are still queued in the request
    pool (one request at a time, each held a second by the proxy), and another thread closes
    the dataset: both return, the read with the closed error. concurrent.futures does not wake
    a thread waiting for a future that the pool's shutdown cancelled, so a close that cancelled
    the queued ranges left that read, and the close waiting for its claim, blocked for ever."""
    rng = np.random.default_rng(8)
    data = rng.integers(0, 256, (64, 40_000), dtype=np.uint8)
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    with NetProxy(s3_env.endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        monkeypatch.setenv("LOADERX_REMOTE_REQUESTS", "1")
        # Smaller than the dataset: each far-apart record is a range of its own.
        ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=1_000_000)
        proxy.set_latency(1.0)
        sent = proxy.stats().requests
        reader = Background(lambda: ds[np.arange(0, 64, 4, dtype=np.int64)])
        while proxy.stats().requests == sent:  # the first range is at the proxy
            time.sleep(0.01)
        assert Background(ds.close).result() is None
        read = reader.result()
    assert isinstance(read, ValueError) and str(read) == f"dataset {url!r} is closed", read
    assert held_in(tmp_path / "cache") == []


def test_close_while_a_read_is_still_planning_its_ranges(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read sends each range as soon as it is planned; another thread closes the dataset
    after the first was sent and before the next one is: the read raises the closed error (it
    raised the request pool's RuntimeError, 'cannot schedule new futures after shutdown')."""
    rng = np.random.default_rng(9)
    data = rng.integers(0, 256, (64, 40_000), dtype=np.uint8)
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    # Smaller than the dataset: each far-apart record is a range of its own.
    ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=1_000_000)
    fetcher = ds._remote.fetcher  # type: ignore[union-attr]
    planned = fetcher._planned
    sent_one, shut = threading.Event(), threading.Event()

    def planning(wanted: dict[int, np.ndarray]) -> Iterator[object]:
        pieces = iter(planned(wanted))
        yield next(pieces)
        pool = fetcher._pool
        assert pool is not None
        shutdown = pool.shutdown

        def shutting(*args: object, **kwargs: object) -> None:
            shutdown(*args, **kwargs)  # type: ignore[arg-type]
            shut.set()

        monkeypatch.setattr(pool, "shutdown", shutting)
        sent_one.set()
        shut.wait()  # the next range is planned once close() has shut the pool down
        yield from pieces

    monkeypatch.setattr(fetcher, "_planned", planning)
    reader = Background(lambda: ds[np.arange(0, 64, 4, dtype=np.int64)])
    sent_one.wait(60)
    assert Background(ds.close).result() is None
    read = reader.result()
    assert isinstance(read, ValueError) and str(read) == f"dataset {url!r} is closed", read
    assert held_in(tmp_path / "cache") == []


def test_a_claim_an_interrupt_kept_is_given_back_by_the_threads_next_read(
    dense: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """A fetch's claim on a store (its lock and its flock on `<n>.fetch.lock`) that a Ctrl-C
    kept: the same thread's next read fetches (and returns the exact records), and its close()
    releases the cache folder. Before, a Ctrl-C as the fetch's ExitStack took the claim left it
    in a suspended generator: the thread's next fetch re-entered the store's lock and then
    waited for ever for the flock its own kept descriptor held, and every other thread's fetch
    and close() waited for the lock (a Ctrl-C storm over a remote loader's reads hung so)."""
    url, data = dense
    cache = tmp_path / "cache"
    ds = DenseDataset(url, cache_dir=cache, cache_bytes=100 * 4096)
    fetcher = ds._remote.fetcher  # type: ignore[union-attr]
    indices = np.arange(0, 400, 7, dtype=np.int64)

    def interrupted_then_reading() -> tuple[np.ndarray, list[str]]:
        fetcher._claims.take([0])  # what a Ctrl-C leaves as the claim was taken: held
        got = ds[indices]
        ds.close()
        return got, held_in(cache)

    outcome = Background(interrupted_then_reading).result()
    assert not isinstance(outcome, BaseException), outcome
    got, released = outcome
    np.testing.assert_array_equal(got, data[indices])
    assert released == []
