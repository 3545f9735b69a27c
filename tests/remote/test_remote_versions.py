"""A new cached version reuses what an older one holds for unchanged objects, against moto's
S3 server (loaderx._remote.version_reuse): after an append a reopen downloads only the new
shards' bytes, an object rewritten in place is downloaded again, a version another handle still
reads gives nothing, and a process killed while building the new version leaves a cache that
reads every record exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx._remote.object_store import ObjectStore  # private: a spy on the real client's get
from loaderx._remote.replica import METADATA_NAMES  # private: which objects are metadata
from loaderx._store.layout import MANIFEST_FILE
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

from .s3_server import S3Server
from .test_remote_read import images

ROOT = Path(__file__).resolve().parents[2]


def read_all(url: str, cache: Path, want: np.ndarray) -> int:
    """Reads every record of the dataset through the cache, checks each byte, and returns the
    bytes the open downloaded for records."""
    with DenseDataset(url, cache_dir=cache) as ds:
        assert len(ds) == len(want)
        np.testing.assert_array_equal(ds[np.arange(len(ds), dtype=np.int64)], want)
        return ds._remote.fetcher.bytes_fetched  # type: ignore[union-attr]


def new_records_bytes(url: str, cache: Path, first: int, want: np.ndarray) -> int:
    """What a cold cache downloads to read records first.. only (the appended ones)."""
    with DenseDataset(url, cache_dir=cache) as ds:
        idx = np.arange(first, len(ds), dtype=np.int64)
        np.testing.assert_array_equal(ds[idx], want[first:])
        return ds._remote.fetcher.bytes_fetched  # type: ignore[union-attr]


def versions(cache: Path) -> list[str]:
    """The version folders of the cache's one dataset (finished or not)."""
    (base,) = [entry for entry in cache.iterdir() if entry.is_dir()]
    return sorted(entry.name for entry in base.iterdir() if entry.name.startswith("gen-"))


@pytest.fixture
def appended(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> tuple[str, np.ndarray, np.ndarray]:
    """A dataset written to the bucket and read whole through tmp_path/cache (a full download),
    then appended to: (url, first data, both)."""
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    url = f"s3://{s3_bucket}/images"
    first, more = images(400, 600, seed=1), images(90, 600, seed=2)
    from_numpy(url, first, codec="zstd")
    fetched = read_all(url, tmp_path / "cache", first)
    assert fetched > 0
    from_numpy(url, more, append=True)
    return url, first, np.concatenate([first, more])


def test_a_reopen_after_an_append_downloads_only_the_new_shard(
    appended: tuple[str, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    url, first, both = appended
    expected = new_records_bytes(url, tmp_path / "cold", len(first), both)
    assert expected > 0
    assert read_all(url, tmp_path / "cache", both) == expected
    assert len(versions(tmp_path / "cache")) == 1  # the older version gave its files and went
    assert read_all(url, tmp_path / "cache", both) == 0  # and the new one is warm


def test_a_reopen_after_an_append_downloads_only_the_changed_metadata(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unchanged shard's tables come from the older version too: the reopen downloads the
    metadata objects the append added or rewrote, and no other (the listing reads the manifest
    at every open)."""
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    url = f"s3://{s3_bucket}/images"
    first, more = images(400, 600, seed=1), images(90, 600, seed=2)
    from_numpy(url, first, codec="zstd")
    read_all(url, tmp_path / "cache", first)
    before = set(s3_env.objects(s3_bucket).items())
    from_numpy(url, more, append=True)
    metadata = {name: etag for name, etag in s3_env.objects(s3_bucket).items()
                if name.split("/")[-1] in METADATA_NAMES - {MANIFEST_FILE}}
    changed = sorted(name for name, etag in metadata.items() if (name, etag) not in before)
    assert changed and len(changed) < len(metadata)  # the new shard's, not the first one's
    fetched: list[str] = []
    get = ObjectStore.get

    def spy(store: ObjectStore, name: str, etag: str | None) -> bytes:
        if name != MANIFEST_FILE:
            fetched.append(name)
        return get(store, name, etag)

    monkeypatch.setattr(ObjectStore, "get", spy)
    both = np.concatenate([first, more])
    read_all(url, tmp_path / "cache", both)  # every byte checked
    assert sorted(f"images/{name}" for name in fetched) == changed
    fetched.clear()
    read_all(url, tmp_path / "cold", both)  # a cold cache downloads all of it
    assert sorted(f"images/{name}" for name in fetched) == sorted(metadata)


def test_a_smaller_cache_evicts_the_records_it_took_over(
    appended: tuple[str, np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    """The taken-over records count in the new version's bound: a cache of a third of the
    dataset evicts them (punching the linked files) and every read stays exact."""
    url, _, both = appended
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        full = ds.remote_usage()
        assert full is not None and full[1] > 0  # the records the older version held
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=full[1] // 3) as ds:
        for start in range(0, len(both), 40):
            idx = np.arange(start, min(start + 40, len(both)), dtype=np.int64)
            np.testing.assert_array_equal(ds[idx], both[idx])
        usage = ds.remote_usage()
        assert usage is not None and usage[1] <= full[1] // 3


def test_an_object_rewritten_in_place_is_downloaded_again(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """The same names and sizes with other bytes (another ETag): nothing is reused."""
    before, after = images(300, 500, seed=3), images(300, 500, seed=4)
    assert not np.array_equal(before, after)
    url = f"s3://{s3_bucket}/ds"
    for data, folder in ((before, "a"), (after, "b")):
        from_numpy(str(tmp_path / folder), data, codec="raw")
    s3_env.upload_tree(tmp_path / "a", s3_bucket, "ds")
    full = read_all(url, tmp_path / "cache", before)
    sizes = {path.name: path.stat().st_size for path in (tmp_path / "a").iterdir()}
    assert sizes == {path.name: path.stat().st_size for path in (tmp_path / "b").iterdir()}
    s3_env.upload_tree(tmp_path / "b", s3_bucket, "ds")
    assert read_all(url, tmp_path / "cache", after) == full
    assert read_all(url, tmp_path / "cache", after) == 0


def test_a_version_still_open_gives_nothing_and_stays_whole(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handle opened before the append keeps reading the older version while a new open
    builds the newer one: that one downloads every record (sharing the files would let the
    older version's eviction punch records it holds), and the older one is left whole."""
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    url = f"s3://{s3_bucket}/images"
    first, more = images(300, 600, seed=5), images(60, 600, seed=6)
    from_numpy(url, first, codec="zstd")
    cache = tmp_path / "cache"
    with DenseDataset(url, cache_dir=cache) as older:
        everything = np.arange(len(first), dtype=np.int64)
        np.testing.assert_array_equal(older[everything], first)
        fetcher = older._remote.fetcher  # type: ignore[union-attr]
        fetched = fetcher.bytes_fetched
        from_numpy(url, more, append=True)
        both = np.concatenate([first, more])
        full = new_records_bytes(url, tmp_path / "cold", 0, both)
        assert read_all(url, cache, both) == full  # every record fetched again
        assert len(versions(cache)) == 2
        np.testing.assert_array_equal(older[everything], first)
        assert fetcher.bytes_fetched == fetched  # still present in its own files
    assert read_all(url, cache, both) == 0


KILLED_BUILD = textwrap.dedent("""
    import os, signal, sys
    from loaderx.dataset import DenseDataset
    url, cache, where = sys.argv[1:]
    if where == "link":  # killed after the first chunk file was linked from the older version
        real = os.link
        def link(*args, **kwargs):
            real(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
        os.link = link
    else:  # killed as the new version is renamed into place (the older one retired)
        real = os.rename
        def rename(source, target, *rest):
            if ".building-" in str(source):
                os.kill(os.getpid(), signal.SIGKILL)
            real(source, target, *rest)
        os.rename = rename
    DenseDataset(url, cache_dir=cache)
    raise SystemExit("the build finished: the test killed nothing")
""")


@pytest.mark.parametrize("where", ["link", "rename"])
def test_a_build_killed_midway_leaves_a_cache_that_reads_exactly(
    appended: tuple[str, np.ndarray, np.ndarray], tmp_path: Path, where: str
) -> None:
    url, first, both = appended
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.run([sys.executable, "-c", KILLED_BUILD, url, str(cache), where],
                           env=env, cwd=ROOT, capture_output=True, check=False)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert any(".building-" in name for name in versions(cache))  # the half-built version
    fetched = read_all(url, cache, both)
    if where == "link":  # the older version was whole: it still gives its records
        assert fetched == new_records_bytes(url, tmp_path / "cold", len(first), both)
    else:  # it was retired before the rename: never trusted again, everything fetched anew
        assert fetched == new_records_bytes(url, tmp_path / "cold", 0, both)
    assert len(versions(cache)) == 1  # the half-built one and the retired one are gone
    assert read_all(url, cache, both) == 0
