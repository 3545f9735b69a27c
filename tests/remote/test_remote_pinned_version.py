"""A dataset opened from a URL pickles with the version it has open, and unpickles (in a worker
process, say) at that version, from the cache and without a request, or raises
RemoteChangedError when the cache no longer has it (remote_source.opening_version). Before,
the receiver listed the dataset again: after an append or a rewrite its batches mixed two
versions, and with the object store out of reach it could not open even a warm cache."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.errors import RemoteChangedError, RemoteError

from .s3_server import S3Server
from .test_remote_read import images


@pytest.fixture
def url(s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    return f"s3://{s3_bucket}/images"


def test_an_unpickled_dataset_reads_its_senders_version_after_an_append(
    url: str, tmp_path: Path
) -> None:
    first, more = images(120, 64, seed=1), images(30, 64, seed=2)
    both = np.concatenate([first, more])
    from_numpy(url, first, codec="zstd")
    cache = tmp_path / "cache"
    everything = np.arange(len(first), dtype=np.int64)
    with DenseDataset(url, cache_dir=cache) as sender:
        sent = pickle.dumps(sender)
        from_numpy(url, more, append=True)  # a new version under the URL
        with pickle.loads(sent) as received:
            assert sender._remote is not None
            assert received._remote.version == sender._remote.version  # the version sent
            assert len(received) == len(first)
            np.testing.assert_array_equal(received[everything[::-1]], first[::-1])
        with DenseDataset(url, cache_dir=cache) as newer:  # a new open reads the new version
            np.testing.assert_array_equal(newer[np.arange(len(both))], both)
    with DenseDataset(url, cache_dir=cache) as newer:  # removes the old version, now unused
        assert len(newer) == len(both)
    with pytest.raises(RemoteChangedError, match="changed since the process that sent"):
        pickle.loads(sent)


def test_an_unpickled_dataset_opens_a_warm_cache_without_the_object_store(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = images(3000, 1000, seed=3)  # 1,000-byte records, raw: 3 MB
    from_numpy(url, data)
    warm = np.arange(20, dtype=np.int64)
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=1 << 40) as sender:
        np.testing.assert_array_equal(sender[warm], data[:20])
        sent = pickle.dumps(sender)
        # Nothing listens there: any request the receiver made would fail at once.
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        monkeypatch.setenv("LOADERX_REMOTE_RETRIES", "0")
        with pickle.loads(sent) as received:
            np.testing.assert_array_equal(received[warm[::-1]], data[:20][::-1])
            fetched = received._remote.fetcher.bytes_fetched  # what it downloaded
            cold = np.arange(2980, 3000, dtype=np.int64)  # over 1 MiB further on
            present = received._remote.fetcher.missing(cold)  # the test's premise
            assert present, "the last records must not be cached yet"
            with pytest.raises(RemoteError):
                received[cold]
            assert fetched == 0
