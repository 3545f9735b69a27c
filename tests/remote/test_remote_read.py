"""Datasets read from a real S3-protocol server (moto's, started by the fixtures): exact round
trips for every read, sharded datasets, a cache smaller than the dataset, the loader, several
processes sharing one cache, and what a damaged, changed or unreachable store does. The round
trips and the missing object also run against Azurite (az://) and fake-gcs-server (gs://),
through the `remote_root` fixture."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import boto3  # type: ignore[import-untyped]  # boto3 ships no type hints
import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import RemoteChangedError, RemoteError, UnsupportedURLError

from .conftest import RemoteRoot
from .gcs_server import GCSServer
from .s3_server import S3Server

ROOT = Path(__file__).resolve().parents[2]


def images(count: int = 600, width: int = 700, seed: int = 5) -> np.ndarray:
    """Half compressible, half random rows, so zstd stores some records compressed, some raw."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (count, width), dtype=np.uint8)
    data[: count // 2, : width // 2] = 3
    return data


def publish(server: S3Server, bucket: str, folder: Path, prefix: str = "ds") -> str:
    """Uploads a local dataset folder and returns its URL."""
    server.upload_tree(folder, bucket, prefix)
    return f"s3://{bucket}/{prefix}"


@pytest.fixture
def dense_url(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> tuple[str, np.ndarray]:
    data = images()
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    return publish(s3_env, s3_bucket, tmp_path / "local"), data


@pytest.fixture
def any_dense_url(remote_root: RemoteRoot, tmp_path: Path) -> tuple[str, np.ndarray]:
    """dense_url's dataset in moto's S3 server, then in Azurite."""
    data = images()
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    remote_root.upload_tree(tmp_path / "local", "ds")
    return f"{remote_root.url}/ds", data


def test_every_dense_read_matches_the_array(any_dense_url: tuple[str, np.ndarray],
                                            tmp_path: Path) -> None:
    url, data = any_dense_url
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        assert ds.path == url and ds.remote and len(ds) == len(data)
        assert ds.dtype == data.dtype and ds.item_shape == data.shape[1:]
        idx = np.array([5, 599, 17, 5, 300], dtype=np.int64)
        np.testing.assert_array_equal(ds[idx], data[idx])
        np.testing.assert_array_equal(ds[42], data[42])
        np.testing.assert_array_equal(ds[-1], data[-1])
        np.testing.assert_array_equal(ds[100:180:3], data[100:180:3])
        mask = np.zeros(len(data), dtype=bool)
        mask[[1, 77, 598]] = True
        np.testing.assert_array_equal(ds[mask], data[mask])
        out = np.empty((len(idx), data.shape[1]), dtype=np.uint8)
        ds.gather_into(idx, out)
        np.testing.assert_array_equal(out, data[idx])
        np.testing.assert_array_equal(ds.read(np.arange(len(data))), data)
        with pytest.raises(IndexError):
            ds[np.array([0, len(data)], dtype=np.int64)]
        # A dataset pickles as its URL and cache (spawned workers reopen it).
        again = pickle.loads(pickle.dumps(ds))
        try:
            np.testing.assert_array_equal(again[idx], data[idx])
        finally:
            again.close()


def test_ragged_and_sharded_datasets(remote_root: RemoteRoot, tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    tokens = [rng.integers(0, 50_000, int(n), dtype=np.int32) for n in rng.integers(0, 300, 500)]
    tokens[3] = np.empty(0, dtype=np.int32)
    local = RaggedDataset(str(tmp_path / "tokens"), dtype=np.int32, codec="zstd", shard_records=120)
    local.append(tokens)
    assert local.sharded
    local.close()
    remote_root.upload_tree(tmp_path / "tokens", "tokens")
    url = f"{remote_root.url}/tokens"
    with RaggedDataset(url, cache_dir=tmp_path / "cache") as ds:
        assert ds.sharded and len(ds) == len(tokens)
        order = rng.permutation(len(tokens))[:200]
        for got, index in zip(ds[order], order.tolist()):
            np.testing.assert_array_equal(got, tokens[index])
        assert ds[3].shape == (0,)
        np.testing.assert_array_equal(ds.lengths(np.arange(10)), [len(t) for t in tokens[:10]])
        # A loader's packed gather (the compiled short path, inside the remote read's pins).
        picked = np.array([499, 3, 0, 250, 121], dtype=np.int64)
        wanted = np.concatenate([tokens[i] for i in picked.tolist()])
        out = np.full(wanted.nbytes + 4, 0xAB, dtype=np.uint8)
        offsets = np.zeros(len(picked) + 1, dtype=np.uint64)
        rows = np.zeros(len(picked) + 1, dtype=np.int32)
        assert ds.gather_packed(picked, out, offsets, rows)
        assert out[: wanted.nbytes].tobytes() == wanted.tobytes() and out[-4:].tolist() == [0xAB] * 4
        assert rows.tolist() == np.cumsum([0] + [len(tokens[i]) for i in picked.tolist()]).tolist()


def test_a_cache_smaller_than_the_dataset_stays_within_its_bound(
    any_dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = any_dense_url
    bound = 96 << 10
    cache = tmp_path / "cache"
    rng = np.random.default_rng(2)
    with DenseDataset(url, cache_dir=cache, cache_bytes=bound) as ds:
        for _ in range(60):
            idx = rng.integers(0, len(data), 8)
            np.testing.assert_array_equal(ds[idx], data[idx])
            usage = ds.remote_usage()
            assert usage is not None
            # A batch's records are pinned while it is read, so the bound may be passed by one
            # batch at most (8 records of at most 2 blocks each here).
            assert usage[1] <= bound + 8 * 2 * 4096
        final = ds.remote_usage()
        assert final is not None
        allocated = sum(p.stat().st_blocks * 512 for p in cache.rglob("*.zr") if p.name[0].isdigit())
        assert allocated <= final[1] + 4096 * 2  # what the files hold on disk follows the count


def test_readers_sharing_a_cache_or_reopening_a_full_one_keep_its_bound(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    """Each reader counted only its own fetches (from 0 at open) against the bound, so two
    readers of one cache folder (two processes, or two opens in one), or one reopening a cache
    an earlier run filled, let it grow to the sum of their bounds (1.8x, measured with two
    processes) before either evicted. The count is now shared in the cache folder."""
    url, data = dense_url
    bound = 96 << 10
    cache = tmp_path / "cache"
    rng = np.random.default_rng(7)

    def read_some(ds: DenseDataset) -> None:
        for _ in range(12):
            idx = rng.integers(0, len(data), 8)
            np.testing.assert_array_equal(ds[idx], data[idx])
            usage = ds.remote_usage()  # the whole cache's, whoever fetched
            assert usage is not None
            assert usage[1] <= bound + 8 * 2 * 4096  # a pinned batch (see the test above)

    with DenseDataset(url, cache_dir=cache, cache_bytes=bound) as first:
        read_some(first)
        with DenseDataset(url, cache_dir=cache, cache_bytes=bound) as second:
            for _ in range(3):
                read_some(second)
                read_some(first)
    with DenseDataset(url, cache_dir=cache, cache_bytes=bound) as again:
        read_some(again)


def test_the_loader_reads_what_it_reads_locally(any_dense_url: tuple[str, np.ndarray],
                                                tmp_path: Path) -> None:
    url, data = any_dense_url
    remote = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=200 << 10)
    with DataLoader({"x": remote}, batch_size=16, seed=4, mode="iid") as loader:
        for step, batch in zip(range(40), loader):
            np.testing.assert_array_equal(batch["x"], data[loader.indices(step)])
        state = loader.state_dict()
    with DataLoader({"x": remote}, batch_size=16, seed=4, mode="iid") as loader:
        loader.load_state_dict(state)
        batch = next(loader)
        np.testing.assert_array_equal(batch["x"], data[loader.indices(40)])
    remote.close()


def _run_child(code: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_processes_sharing_a_cache_download_each_record_once(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense_url
    np.save(tmp_path / "data.npy", data)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = textwrap.dedent(f"""
        import numpy as np
        from loaderx.dataset import DenseDataset
        data = np.load({str(tmp_path / "data.npy")!r})
        ds = DenseDataset({url!r}, cache_dir={str(tmp_path / "cache")!r})
        rng = np.random.default_rng(1)
        for _ in range(30):
            idx = rng.integers(0, len(ds), 40)
            assert (ds[idx] == data[idx]).all()
        print("FETCHED", ds._remote.fetcher.records_fetched)
        """)
    children = [subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    fetched = 0
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err.decode()[-3000:]
        fetched += int(out.rsplit(b"FETCHED", 1)[1])
    distinct = len(np.unique(np.random.default_rng(1).integers(0, len(data), (30, 40))))
    # Three processes read the same records at once: each record was downloaded by one of them
    # only (with a cache that holds the dataset, the records between them come along too).
    assert distinct <= fetched <= len(data)


def test_hosts_with_their_own_caches_split_each_batch(
    dense_url: tuple[str, np.ndarray], tmp_path: Path
) -> None:
    url, data = dense_url
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for rank in range(2):
        _run_child(f"""
            import numpy as np
            from loaderx.dataset import DenseDataset
            from loaderx.dataloader import DataLoader
            ds = DenseDataset({url!r}, cache_dir={str(tmp_path / f"cache{rank}")!r})
            with DataLoader({{"x": ds}}, batch_size=8, seed=11, shard=({rank}, 2)) as loader:
                batches = [next(loader)["x"] for _ in range(5)]
            np.save({str(tmp_path / f"rank{rank}.npy")!r}, np.stack(batches))
            """, env)
    ranks = [np.load(tmp_path / f"rank{rank}.npy") for rank in range(2)]
    local = DenseDataset(str(tmp_path / "local"), readonly=True)
    with DataLoader({"x": local}, batch_size=16, seed=11) as whole:
        for step in range(5):
            joint = whole.indices(step)
            got = np.concatenate([ranks[0][step], ranks[1][step]])
            # The two hosts read disjoint halves whose union is the single-process batch.
            assert sorted(map(bytes, got)) == sorted(map(bytes, data[joint]))
    for rank in range(2):
        with DataLoader({"x": local}, batch_size=8, seed=11, shard=(rank, 2)) as alone:
            for step in range(5):
                np.testing.assert_array_equal(ranks[rank][step], next(alone)["x"])
    local.close()


def test_a_record_that_fails_its_checksum_is_never_returned(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = images()
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    chunk = tmp_path / "local" / "0.zr"
    raw = bytearray(chunk.read_bytes())
    raw[700 * 10 + 3] ^= 0xFF  # record 10 now differs from its checksum
    chunk.write_bytes(bytes(raw))
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        np.testing.assert_array_equal(ds[np.array([9, 11])], data[[9, 11]])
        with pytest.raises(RemoteError, match="does not match its checksum"):
            ds[np.array([2, 10])]
        report = ds.verify()
        assert [bad.index for bad in report.bad] == [10] and not report.ok


def test_an_object_changed_after_open_is_an_error_never_a_mix(
    dense_url: tuple[str, np.ndarray], s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    url, data = dense_url
    # A cache smaller than the dataset: a read fetches its own records and no others.
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=100_000) as ds:
        np.testing.assert_array_equal(ds[np.array([1])], data[[1]])
        chunk = (tmp_path / "local" / "0.zr").read_bytes()
        s3_env.put(s3_bucket, "ds/0.zr", chunk[:-1] + bytes([chunk[-1] ^ 1]))
        with pytest.raises(RemoteChangedError, match="0.zr"):
            ds[np.array([len(data) - 1])]
    # Reopened, it is the new version: the table still says the old sums, so the changed
    # record is refused, and the others read as they are.
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        np.testing.assert_array_equal(ds[np.array([0, 1])], data[[0, 1]])


def test_a_server_that_stays_down_raises_and_reads_resume_when_it_is_back(
    dense_url: tuple[str, np.ndarray], s3_env: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, data = dense_url
    monkeypatch.setenv("LOADERX_REMOTE_RETRY_SECONDS", "1.5")
    monkeypatch.setenv("LOADERX_REMOTE_TIMEOUT_SECONDS", "2")
    ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=100_000)
    loader = DataLoader({"x": ds}, batch_size=8, seed=1, mode="iid", prefetch=1, workers=1)
    try:
        first = next(loader)["x"]
        np.testing.assert_array_equal(first, data[loader.indices(0)])
        state = loader.state_dict()
        s3_env.stop()
        with pytest.raises(RemoteError):
            for _ in range(200):  # the steps already cached may still come
                next(loader)
        s3_env.restart()
        loader.load_state_dict(state)
        for step in range(1, 6):
            np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
    finally:
        if not s3_env.running:
            s3_env.start()
        loader.close()
        ds.close()


def test_urls_a_reader_cannot_take_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedURLError, match="unknown scheme"):
        DenseDataset("s3x://bucket/ds")
    with pytest.raises(TypeError, match="cache_dir"):
        DenseDataset(str(tmp_path), cache_dir=tmp_path)
    assert not (Path.cwd() / "s3x:").exists()


def test_a_mixture_of_remote_and_local_sources(dense_url: tuple[str, np.ndarray], tmp_path: Path) -> None:
    from loaderx.mixture import MixtureLoader

    url, data = dense_url
    other = images(300, seed=8)
    from_numpy(str(tmp_path / "other"), other, codec="raw")
    remote = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=150 << 10)
    local = DenseDataset(str(tmp_path / "other"), readonly=True)
    by_source = [data, other]
    with MixtureLoader([{"x": remote}, {"x": local}], [0.7, 0.3], batch_size=12, seed=3,
                       source_key="source") as loader:
        for step, batch in zip(range(30), loader):
            chosen, indices = loader.sampler.batch(step)
            expected = np.stack([by_source[s][i] for s, i in zip(chosen.tolist(), indices.tolist())])
            np.testing.assert_array_equal(batch["x"], expected)
    remote.close()
    local.close()


def test_a_dataset_served_over_http_reads_without_listing(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """A web server cannot be listed: the files are found from the manifest and each store's
    table. moto serves public-read objects to plain GETs, as a static web server would."""
    rng = np.random.default_rng(3)
    tokens = [rng.integers(0, 9, int(n), dtype=np.int16) for n in rng.integers(0, 40, 90)]
    local = RaggedDataset(str(tmp_path / "web"), dtype=np.int16, codec="zstd", shard_records=40)
    local.append(tokens)
    local.close()
    keys = s3_env.upload_tree(tmp_path / "web", s3_bucket, "web")
    client = boto3.client("s3", endpoint_url=s3_env.endpoint, region_name="us-east-1")
    for key in keys:
        client.put_object_acl(Bucket=s3_bucket, Key=key, ACL="public-read")
    url = f"{s3_env.endpoint}/{s3_bucket}/web"
    with RaggedDataset(url, cache_dir=tmp_path / "cache") as ds:
        assert ds.sharded and len(ds) == len(tokens)
        for got, want in zip(ds[np.arange(len(tokens))], tokens):
            np.testing.assert_array_equal(got, want)


def test_a_missing_object_raises_at_once_naming_it(
    any_dense_url: tuple[str, np.ndarray], remote_root: RemoteRoot, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = any_dense_url
    # Azurite answers a read that names the version seen at open (If-Match) of a deleted blob
    # with 412, S3 and GCS with 404: each is reported as the missing object it is.
    message = f"{url}/0.zr: no such object"
    # A retried answer would take the whole retry budget: "at once" is well under it.
    monkeypatch.setenv("LOADERX_REMOTE_RETRY_SECONDS", "30")
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        remote_root.delete("ds/0.zr")
        started = time.monotonic()
        with pytest.raises(FileNotFoundError, match=message):
            ds[np.array([1, 2])]
        assert time.monotonic() - started < 10
    with pytest.raises(FileNotFoundError, match="no loaderx dataset"):
        DenseDataset(f"{remote_root.url}/elsewhere", cache_dir=tmp_path / "cache")


def test_a_plain_http_gcs_endpoint_names_the_setting_that_allows_it(
    gs_env: GCSServer, gs_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    with pytest.raises(RemoteError, match=f"listing gs://{gs_bucket}/ds failed: .*builder error; "
                                          "if the endpoint is plain http, set AWS_ALLOW_HTTP=true"):
        DenseDataset(f"gs://{gs_bucket}/ds", cache_dir=tmp_path / "cache")


def missing_bucket_reason(scheme: str, bucket: str) -> str:
    """The answer a missing bucket or container gets from each test server, as the refusal
    quotes it: fake-gcs-server answers a listing with 500 "no bucket named ..." where GCS
    answers 404 NoSuchBucket (docs/remote.md)."""
    return {"s3": "HTTP 404 Not Found, NoSuchBucket", "az": "HTTP 404 Not Found, ContainerNotFound",
            "gs": f"HTTP 500 Internal Server Error, no bucket named {bucket}"}[scheme]


def test_a_missing_bucket_or_container_raises_at_once_naming_it(
    remote_root: RemoteRoot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On gs:// too: fake-gcs-server's 500 was retried for the whole retry budget (60 s) before
    the open raised a RemoteError quoting it."""
    scheme = remote_root.url.split("://")[0]
    bucket = f"loaderx-test-missing-{uuid.uuid4().hex[:12]}"
    url = f"{scheme}://{bucket}/ds"
    # A retried answer would take the whole retry budget: "at once" is well under it.
    monkeypatch.setenv("LOADERX_REMOTE_RETRY_SECONDS", "30")
    monkeypatch.setenv("LOADERX_REMOTE_RETRIES", "1000")
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"listing {url}: no such bucket or container "
            f"({missing_bucket_reason(scheme, bucket)})")):
        DenseDataset(url, cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 10


def test_without_obstore_a_url_names_the_extra(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "obstore":
                    raise ImportError("obstore is not installed")
        sys.meta_path.insert(0, Refuse())
        from loaderx.dataset import DenseDataset
        from loaderx.errors import MissingExtraError
        try:
            DenseDataset("s3://bucket/ds")
        except MissingExtraError as exc:
            print("refused:", exc)
        """)
    out = _run_child(code, dict(os.environ, PYTHONPATH=str(ROOT),
                                LOADERX_CACHE_DIR=str(tmp_path / "cache")))
    assert "pip install 'loaderx[remote]'" in out


def test_the_cli_reads_a_url(dense_url: tuple[str, np.ndarray], s3_env: S3Server,
                             s3_bucket: str, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from loaderx.cli import main

    url, data = dense_url
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["info", url]) == 0
    out = capsys.readouterr().out
    assert f"{len(data):,}" in out and "remote size" in out
    assert main(["head", "-n", "2", url]) == 0
    assert "(2 of 600 records)" in capsys.readouterr().out
    assert main(["verify", url]) == 0
    assert capsys.readouterr().out.strip().endswith("OK")
    # A record changed in the object store (same size, so only its checksum tells).
    chunk = bytearray((tmp_path / "local" / "0.zr").read_bytes())
    s3_env.put(s3_bucket, "ds/0.zr", bytes(chunk[:100]) + bytes([chunk[100] ^ 1]) + bytes(chunk[101:]))
    assert main(["verify", url]) == 1
    assert "1 bad record" in capsys.readouterr().out
    # compact refuses a URL before opening it: nothing more lands in the cache.
    cached = sorted(str(p) for p in (tmp_path / "cache").rglob("*"))
    assert main(["compact", url]) == 1
    assert "compact works on local folders and cannot take the URL" in capsys.readouterr().err
    assert sorted(str(p) for p in (tmp_path / "cache").rglob("*")) == cached
    assert main(["compact", "s3://elsewhere/never-opened"]) == 1
    assert "write it to a new URL" in capsys.readouterr().err
