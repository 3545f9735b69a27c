"""Datasets written to a real S3 server: every converter's round trip, the manifest as the
commit point, concurrent appenders, and writers that fail or are killed. The round trips and the
concurrent appenders also run against Azurite (az://), through the `writable_root` fixture; not
against fake-gcs-server (gs://), which cannot take obstore's uploads (gcs_server.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loaderx._os.urls import parse
from loaderx._remote.object_store import ObjectStore
from loaderx.converter import from_iterator, from_numpy, recode
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import RemoteError, SchemaError, UnsupportedURLError

from .conftest import RemoteRoot
from .gcs_server import GCSServer
from .s3_server import S3Server
from .test_remote_read import images, missing_bucket_reason

ROOT = Path(__file__).resolve().parents[2]


def objects(server: S3Server, bucket: str) -> dict[str, str | None]:
    """Every object of the bucket with its ETag."""
    return server.objects(bucket)


@pytest.fixture
def upload_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "uploads"


def test_from_numpy_to_a_url_then_append(writable_root: RemoteRoot, upload_dir: Path) -> None:
    url = f"{writable_root.url}/images"
    first, more = images(300, 200, seed=1), images(120, 200, seed=2)
    assert from_numpy(url, first, codec="zstd") == len(first)
    with DenseDataset(url) as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(ds))), first)
    with pytest.raises(FileExistsError, match="append=True"):
        from_numpy(url, more)
    with pytest.raises(UnsupportedURLError, match="atomically"):
        from_numpy(url, more, overwrite=True)
    assert from_numpy(url, more, append=True, workers=2) == len(more)
    with DenseDataset(url) as ds:
        assert ds.sharded
        np.testing.assert_array_equal(ds.read(np.arange(len(ds))), np.concatenate([first, more]))
    assert not [name for name in writable_root.objects() if name.endswith("writer.lock")]
    assert not list(upload_dir.iterdir())  # the local builds are gone


def test_from_iterator_with_workers_and_recode_to_urls(
    writable_root: RemoteRoot, upload_dir: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    parts = [[rng.integers(0, 99, int(n), dtype=np.int32) for n in rng.integers(0, 50, 40)]
             for _ in range(3)]
    url = f"{writable_root.url}/tokens"
    assert from_iterator(url, parts, workers=2) == 120
    expected = [record for part in parts for record in part]
    with RaggedDataset(url) as ds:
        for got, want in zip(ds[np.arange(len(ds))], expected, strict=True):
            np.testing.assert_array_equal(got, want)
    data = images(90, 64)
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    assert recode(str(tmp_path / "local"), f"{writable_root.url}/recoded", codec="zstd") == 90
    with DenseDataset(f"{writable_root.url}/recoded") as ds:
        assert ds.codec == "zstd"
        np.testing.assert_array_equal(ds.read(np.arange(90)), data)
    with pytest.raises(UnsupportedURLError, match="recode's source"):
        recode(f"{writable_root.url}/recoded", str(tmp_path / "back"))


def test_from_arrow_writes_one_dataset_per_column(s3_env: S3Server, s3_bucket: str,
                                                  upload_dir: Path) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]

    from loaderx.converter import from_arrow

    table = pa.table({"x": np.arange(50, dtype=np.int64),
                      "t": pa.array([list(range(i % 7)) for i in range(50)], pa.list_(pa.int16()))})
    assert from_arrow(table, f"s3://{s3_bucket}/cols") == 50
    with DenseDataset(f"s3://{s3_bucket}/cols/x") as xs, RaggedDataset(f"s3://{s3_bucket}/cols/t") as ts:
        np.testing.assert_array_equal(xs.read(np.arange(50)), np.arange(50))
        assert [list(r) for r in ts[np.arange(50)]] == [list(range(i % 7)) for i in range(50)]


def test_from_arrow_refuses_a_bytes_column_for_a_url_before_anything_is_written(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path
) -> None:
    """A binary or string column becomes a bare Zrecord, which has no schema and which no
    reader opens from a URL: the upload failed on its missing schema.msgpack (a bare
    FileNotFoundError naming a temporary file) after the whole table was converted and the
    columns sorted before it were already published."""
    import pyarrow as pa

    from loaderx.converter import from_arrow

    table = pa.table({"a": np.arange(6, dtype=np.int64),
                      "caption": pa.array([f"row {i}" for i in range(6)]),
                      "jpeg": pa.array([bytes([i]) * i for i in range(6)]),
                      "z": np.arange(6, dtype=np.float32)})
    url = f"s3://{s3_bucket}/cols"
    with pytest.raises(UnsupportedURLError,
                       match=r"columns \['caption', 'jpeg'\] .*bare Zrecord.*columns="):
        from_arrow(table, url)
    assert objects(s3_env, s3_bucket) == {}
    assert not any(upload_dir.rglob("*.zr"))
    # The other columns go up when chosen, exactly.
    assert from_arrow(table, url, columns=["a", "z"]) == 6
    with DenseDataset(f"{url}/a") as a, DenseDataset(f"{url}/z") as z:
        np.testing.assert_array_equal(a[:], np.arange(6, dtype=np.int64))
        np.testing.assert_array_equal(z[:], np.arange(6, dtype=np.float32))


def test_the_cli_converts_parquet_to_a_url(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loaderx convert x.parquet s3://...` printed the URLs of the datasets it said it wrote,
    and wrote them into a local folder named "s3:" in the working directory: nothing reached
    the bucket."""
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # pyarrow ships no stubs for it

    from loaderx.cli import main

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    tokens = [list(range(i % 4)) for i in range(9)]
    pq.write_table(pa.table({"n": np.arange(9, dtype=np.int32) * 3,
                             "t": pa.array(tokens, pa.list_(pa.int64()))}), tmp_path / "x.parquet")
    url = f"s3://{s3_bucket}/pq"
    assert main(["convert", str(tmp_path / "x.parquet"), url, "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{url}/n: 9 records (zstd)",
                                                    f"{url}/t: 9 records (zstd)"]
    assert list(work.iterdir()) == []
    with DenseDataset(f"{url}/n") as n, RaggedDataset(f"{url}/t") as t:
        np.testing.assert_array_equal(n[:], np.arange(9, dtype=np.int32) * 3)
        assert [r.tolist() for r in t[np.arange(9)]] == tokens
    # A string column is refused there as from_arrow refuses it, before anything moves.
    pq.write_table(pa.table({"s": ["a", "b"]}), tmp_path / "s.parquet")
    before = objects(s3_env, s3_bucket)
    assert main(["convert", str(tmp_path / "s.parquet"), f"s3://{s3_bucket}/strings"]) == 1
    assert "bare Zrecord" in capsys.readouterr().err
    assert objects(s3_env, s3_bucket) == before and list(work.iterdir()) == []


@pytest.mark.parametrize("key", ["a/../c", "a/./c", "a//c", "/a"])
def test_a_url_with_dot_or_empty_segments_is_refused_before_anything_moves(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path, tmp_path: Path, key: str
) -> None:
    """The client resolves "." and ".." in a URL's path, so from_numpy("s3://b/a/../c") wrote
    the dataset to s3://b/c (and a reader of s3://b/a/../c kept it in another cache folder than
    one of s3://b/c); an empty segment ("a//c") failed at the first request as "cannot reach".
    Neither can name an object key as written, so both are refused."""
    url = f"s3://{s3_bucket}/{key}"
    with pytest.raises(UnsupportedURLError, match=r"empty, '\.' or '\.\.' segment"):
        from_numpy(url, images(10, 8))
    assert objects(s3_env, s3_bucket) == {}
    with pytest.raises(UnsupportedURLError, match=r"empty, '\.' or '\.\.' segment"):
        DenseDataset(url, cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    # A trailing slash names the same dataset, and keys with spaces, '%' or unicode are kept.
    for odd in ("c/", "my data/100%/données"):
        from_numpy(f"s3://{s3_bucket}/{odd}", images(10, 8))
        with DenseDataset(f"s3://{s3_bucket}/{odd}", cache_dir=tmp_path / "cache") as ds:
            np.testing.assert_array_equal(ds[:], images(10, 8))
    assert {name.split("/shard-")[0] for name in objects(s3_env, s3_bucket)} >= {
        "c", "my data/100%/données"}


def test_urls_a_writer_cannot_take_create_nothing(s3_env: S3Server, upload_dir: Path,
                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = images(10, 8)
    with pytest.raises(UnsupportedURLError, match="unknown scheme"):
        from_numpy("s3x://bucket/ds", data)
    with pytest.raises(UnsupportedURLError, match="read only"):
        from_numpy("https://example.invalid/ds", data)
    assert not any(tmp_path.iterdir()) or sorted(p.name for p in tmp_path.iterdir()) == ["uploads"]


def test_a_write_to_a_missing_bucket_is_refused_before_anything_is_built(
    remote_root: RemoteRoot, upload_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check for a dataset already there was a HEAD of the manifest, whose 404 without a
    body reads the same for a missing bucket: the whole dataset was built on local disk first,
    and only the writer lock's upload then failed, as "no such object". On gs:// too, where
    fake-gcs-server's 500 for the listing was retried for the whole retry budget (60 s) before
    a RemoteError quoted it (nothing here needs the uploads the emulator cannot take)."""
    scheme = remote_root.url.split("://")[0]
    bucket = f"loaderx-test-missing-{uuid.uuid4().hex[:12]}"
    url = f"{scheme}://{bucket}/ds"
    # A retried answer would take the whole retry budget: "at once" is well under it.
    monkeypatch.setenv("LOADERX_REMOTE_RETRY_SECONDS", "30")
    monkeypatch.setenv("LOADERX_REMOTE_RETRIES", "1000")
    started = time.monotonic()
    pulled: list[int] = []

    def records() -> Iterator[np.ndarray]:
        for size in range(5):
            pulled.append(size)
            yield np.arange(size, dtype=np.int32)

    with pytest.raises(FileNotFoundError, match=re.escape(
            f"listing {url}: no such bucket or container "
            f"({missing_bucket_reason(scheme, bucket)})")):
        from_iterator(url, records())
    assert pulled == []  # refused before the build
    assert not any(upload_dir.rglob("*"))
    with pytest.raises(FileNotFoundError, match=f"{url}: no such bucket or container"):
        from_numpy(url, images(10, 8), append=True)
    # A write that meets a bucket gone since the check names the bucket, not the object.
    with pytest.raises(FileNotFoundError, match="writing .*/ds/x: no such bucket or container"):
        ObjectStore(parse(url)).put("x", b"1")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("setting", ["LOADERX_REMOTE_LOCK_LEASE_SECONDS=0",
                                     "LOADERX_REMOTE_LOCK_LEASE_SECONDS=-5",
                                     "LOADERX_REMOTE_LOCK_LEASE_SECONDS=nan",
                                     "LOADERX_REMOTE_LOCK_WAIT_SECONDS=-1",
                                     "LOADERX_REMOTE_RETRIES=-1",
                                     "LOADERX_REMOTE_RETRIES=2.5",
                                     "LOADERX_REMOTE_RETRY_SECONDS=inf",
                                     "LOADERX_REMOTE_TIMEOUT_SECONDS=nan"])
def test_a_setting_out_of_range_is_refused_before_anything_is_written(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path, monkeypatch: pytest.MonkeyPatch,
    setting: str
) -> None:
    """A lease of 0 or less let every writer take over every held lock at once (two appenders
    then mixed their shards), and the lock's renewal would spin without pause; nan or inf
    seconds of retrying passed as valid, and 2.5 retries became 2."""
    name, value = setting.split("=")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        from_numpy(f"s3://{s3_bucket}/ds", images(10, 8), codec="raw")
    assert objects(s3_env, s3_bucket) == {}
    assert not any(upload_dir.rglob("*.zr"))


def test_a_refused_append_changes_nothing(writable_root: RemoteRoot, upload_dir: Path) -> None:
    url = f"{writable_root.url}/ds"
    from_numpy(url, images(40, 16))
    before = writable_root.objects()
    with pytest.raises(SchemaError):
        from_numpy(url, images(40, 17), append=True)
    assert writable_root.objects() == before


def writer_process(url: str, seed: int, rows: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    code = textwrap.dedent(f"""
        import numpy as np
        from loaderx.converter import from_numpy
        rng = np.random.default_rng({seed})
        data = rng.integers(0, 256, ({rows}, 300), dtype=np.uint8)
        data[:, 0] = {seed}
        print("start", flush=True)
        from_numpy({url!r}, data, codec="raw", append=True)
        print("done", flush=True)
        """)
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_concurrent_appenders_both_land(writable_root: RemoteRoot, upload_dir: Path) -> None:
    url = f"{writable_root.url}/ds"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writers = [writer_process(url, seed, 150, env) for seed in (1, 2, 3)]
    for writer in writers:
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err.decode()[-2000:]
    with DenseDataset(url) as ds:
        rows = ds.read(np.arange(len(ds)))
    assert len(rows) == 450
    for seed in (1, 2, 3):
        mine = rows[rows[:, 0] == seed]
        expected = np.random.default_rng(seed).integers(0, 256, (150, 300), dtype=np.uint8)
        expected[:, 0] = seed
        np.testing.assert_array_equal(mine, expected)  # each job's rows, whole and in order


def test_verify_reports_a_dead_writers_objects_and_the_next_writer_removes_them(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loaderx.cli import main

    url = f"s3://{s3_bucket}/ds"
    from_numpy(url, images(30, 16))
    s3_env.put(s3_bucket, "ds/shard-000001/0.zr", b"half an upload")
    assert main(["verify", url]) == 0
    out = capsys.readouterr().out
    assert "1 object in shard folders the manifest does not list" in out
    assert "shard-000001/0.zr" in out
    with DenseDataset(url) as ds:  # readers ignore it
        np.testing.assert_array_equal(ds.read(np.arange(30)), images(30, 16))
    from_numpy(url, images(4, 16, seed=8), append=True)
    assert objects(s3_env, s3_bucket)["ds/shard-000001/0.zr"] != s3_env_etag(b"half an upload")
    with DenseDataset(url) as ds:
        assert len(ds) == 34 and ds.remote_orphans() == []


def s3_env_etag(data: bytes) -> str:
    import hashlib

    return f'"{hashlib.md5(data).hexdigest()}"'


def test_a_conditional_write_names_the_generation_gcs_needs(gs_env: GCSServer,
                                                            gs_bucket: str) -> None:
    """GCS makes an update conditional on the object's generation (its version): object_store
    refuses an ETag alone there before sending anything. The manifest's and the writer lock's
    conditional writes carry both (RemoteObject.unchanged), so they reach the server; this
    emulator then refuses every upload from obstore (gcs_server.py), so nothing more is checked
    here."""
    gs_env.put(gs_bucket, "ds/shards.msgpack", b"v1")
    store = ObjectStore(parse(f"gs://{gs_bucket}/ds"))
    found = store.head("shards.msgpack")
    assert found.etag is not None and found.version is not None
    with pytest.raises(RemoteError, match="Version required for conditional update"):
        store.put("shards.msgpack", b"v2", mode={"e_tag": found.etag})
    assert found.unchanged() == {"e_tag": found.etag, "version": found.version}
    with pytest.raises(RemoteError, match="400 Bad Request.*invalid uploadType"):
        store.put("shards.msgpack", b"v2", mode=found.unchanged())


def test_a_dataset_opens_while_appends_commit_one_after_another(
    s3_env: S3Server, s3_bucket: str, upload_dir: Path, tmp_path: Path
) -> None:
    """An open lists the objects, then downloads the metadata, the manifest with the ETag the
    listing gave. An append committing in between made the open fail with RemoteChangedError
    ("reopen the dataset"), and with appends following each other about half the opens did.
    Every open now reads one version whole: a prefix of the appends, exactly."""
    url = f"s3://{s3_bucket}/ds"
    from_numpy(url, np.zeros((10, 20), np.uint8), codec="raw")
    code = textwrap.dedent(f"""
        import numpy as np
        from loaderx.converter import from_numpy
        for value in range(1, 16):
            from_numpy({url!r}, np.full((10, 20), value, np.uint8), codec="raw", append=True)
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    opens = 0
    with subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                          stderr=subprocess.PIPE) as appender:
        while appender.poll() is None or opens < 3:
            with DenseDataset(url, cache_dir=tmp_path / "reader") as ds:
                rows = ds.read(np.arange(len(ds)))
            assert len(rows) % 10 == 0 and len(rows) <= 160
            np.testing.assert_array_equal(rows[:, 0], np.arange(len(rows)) // 10)
            opens += 1
        _, err = appender.communicate()
        assert appender.returncode == 0, err.decode()[-2000:]


@pytest.mark.parametrize("setting, message", [
    ("LOADERX_REMOTE_REQUESTS=abc", "not a whole number"),
    ("LOADERX_REMOTE_REQUESTS=0", "at least 1"),
    ("LOADERX_REMOTE_RETRIES=ten", "not a whole number"),
])
def test_a_reader_setting_out_of_range_is_refused_at_open(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    setting: str, message: str
) -> None:
    """LOADERX_REMOTE_REQUESTS=abc was a bare int() error at the first read (naming no
    setting), and 0 quietly meant 1."""
    url = f"s3://{s3_bucket}/ds"
    from_numpy(url, images(10, 8), codec="raw")
    name, value = setting.split("=")
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name}={value!r} .*{message}"):
        DenseDataset(url, cache_dir=tmp_path / "cache")
    monkeypatch.delenv(name)
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        np.testing.assert_array_equal(ds[:], images(10, 8))


def test_a_bad_request_count_is_refused_before_any_request(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """remote.md: every setting is checked "before any request". LOADERX_REMOTE_REQUESTS was
    read only once the dataset had been listed and its metadata downloaded into the cache, so a
    bad value cost a round of requests (or, with the server down, a minute of retries ending in
    RemoteError instead of the ValueError naming the setting)."""
    url = f"s3://{s3_bucket}/ds"
    from_numpy(url, images(10, 8), codec="raw")
    monkeypatch.setenv("LOADERX_REMOTE_REQUESTS", "0")
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match="LOADERX_REMOTE_REQUESTS='0' must be at least 1"):
        DenseDataset(url, cache_dir=cache)
    assert [p for p in cache.rglob("*") if p.is_file()] == []
    # With the server unreachable the setting is still what is reported, at once.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("LOADERX_REMOTE_RETRIES", "0")
    with pytest.raises(ValueError, match="LOADERX_REMOTE_REQUESTS='0' must be at least 1"):
        DenseDataset(url, cache_dir=cache)
