"""Remote reads through tools/netproxy.py between loaderx and the real S3 server: injected
500s, truncated answers, and the endpoint dying mid-read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import RemoteError

from .credential_env import point_google_at
from .gcs_server import GCSServer
from .proxied import ROOT, NetProxy, proxied_images
from .s3_server import S3Server, s3_store
from .server_process import HOST, free_port
from .test_remote_write import objects, writer_process
from .test_remote_read import images



@pytest.fixture
def proxied(s3_env: S3Server, s3_bucket: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, np.ndarray, NetProxy]]:
    """A dataset on the server, reached through the fault-injecting proxy."""
    with proxied_images(s3_env, s3_bucket, tmp_path, monkeypatch,
                        retry_seconds=3, timeout_seconds=2) as found:
        yield found


def test_injected_500s_are_retried_and_reads_stay_exact(
    proxied: tuple[str, np.ndarray, NetProxy], tmp_path: Path
) -> None:
    url, data, proxy = proxied
    # A cache smaller than the dataset, so that every batch goes to the server.
    with DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=40_000) as ds:
        proxy.set_faults(fail_every=3)  # every third GET answers 500
        rng = np.random.default_rng(4)
        for _ in range(20):
            idx = rng.integers(0, len(data), 16)
            np.testing.assert_array_equal(ds[idx], data[idx])
        assert proxy.stats().failed > 0


def test_a_truncated_answer_is_never_short_data(
    proxied: tuple[str, np.ndarray, NetProxy], tmp_path: Path
) -> None:
    url, data, proxy = proxied
    with DenseDataset(url, cache_dir=tmp_path / "cache") as ds:
        proxy.set_faults(truncate_next=2)
        idx = np.arange(0, len(data), 7)
        try:
            got = ds[idx]
        except RemoteError:
            got = ds[idx]  # the truncated requests were not retried: a second read fetches
        np.testing.assert_array_equal(got, data[idx])
        assert proxy.faults().truncate_next == 0


@pytest.mark.parametrize("worker_type", ["thread", "process"])
def test_a_server_killed_mid_read_raises_then_the_loader_resumes(
    proxied: tuple[str, np.ndarray, NetProxy], tmp_path: Path, worker_type: str
) -> None:
    """The endpoint dies with requests in flight: next() raises RemoteError within the retry
    budget, never hangs, and the loader resumes from its state once the store is back. With
    worker processes the failed read happens in a worker: it was raised as WorkerError("the
    transform failed ...") though there was no transform; it is a RemoteError now (and still a
    WorkerError)."""
    url, data, proxy = proxied
    proxy.set_latency(0.05)  # requests in flight when the endpoint dies
    ds = DenseDataset(url, cache_dir=tmp_path / "cache", cache_bytes=64 << 10)
    loader = DataLoader({"x": ds}, batch_size=16, seed=6, mode="iid", prefetch=2, workers=1,
                        worker_type=worker_type)
    try:
        for step in range(3):  # a worker process has opened the dataset and read from it
            np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
        state = loader.state_dict()
        threading.Timer(0.02, proxy.stop).start()
        started = time.monotonic()
        with pytest.raises(RemoteError) as raised:
            for _ in range(1000):
                next(loader)
        assert time.monotonic() - started < 60  # the retry budget, never a hang
        assert "transform" not in str(raised.value).split("\n", 1)[0]
        proxy.start()
        loader.load_state_dict(state)
        for step in range(3, 8):
            np.testing.assert_array_equal(next(loader)["x"], data[loader.indices(step)])
    finally:
        if not proxy.running:
            proxy.start()
        loader.close()
        ds.close()


def test_a_killed_writer_leaves_the_dataset_as_it_was(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    url = f"s3://{s3_bucket}/ds"
    base = images(60, 300, seed=9)
    from_numpy(url, base, codec="raw")
    # Every request of the writers takes 40 ms, so that the kills land in their uploads.
    proxy = NetProxy(s3_env.endpoint, latency_s=0.04).start()
    # A killed writer's lock expires at once for the next one (there is one writer at a time).
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL=proxy.url,
               LOADERX_REMOTE_LOCK_LEASE_SECONDS="0.2")
    rng = np.random.default_rng(0)
    kills = 0
    for _ in range(6):
        with writer_process(url, 7, 3000, env) as writer:  # leaving it closes the pipes
            assert writer.stdout is not None
            assert writer.stdout.readline() == b"start\n"
            time.sleep(float(rng.uniform(0.05, 0.5)))  # building, uploading or committing
            kills += writer.poll() is None
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        with DenseDataset(url) as ds:
            assert len(ds) in (60, 3060)
            np.testing.assert_array_equal(ds.read(np.arange(60)), base)
            if len(ds) == 3060:  # the kill came after the commit: the rows are whole
                assert (ds.read(np.arange(60, 3060))[:, 0] == 7).all()
                break
    proxy.stop()
    assert kills >= 3  # most kills landed before the writer finished
    # The next writer takes over the dead one's lock once its lease is over, and removes what
    # it uploaded without a manifest entry.
    monkeypatch.setenv("LOADERX_REMOTE_LOCK_LEASE_SECONDS", "0.5")
    time.sleep(0.6)
    with DenseDataset(url) as ds:
        before = len(ds)
    from_numpy(url, images(5, 300, seed=3), codec="raw", append=True)
    with DenseDataset(url) as ds:
        assert len(ds) == before + 5
        np.testing.assert_array_equal(ds.read(np.arange(60)), base)
    import msgpack

    names = objects(s3_env, s3_bucket)
    folders = {name.split("/")[1] for name in names if name.count("/") >= 2}
    manifest = msgpack.unpackb(s3_env_get(s3_env, s3_bucket, "ds/shards.msgpack"))
    assert folders <= {entry["name"] for entry in manifest["shards"]}


def s3_env_get(server: S3Server, bucket: str, key: str) -> bytes:
    import obstore

    return bytes(obstore.get(s3_store(server.endpoint, bucket), key).bytes())


def test_a_first_writer_killed_before_its_manifest_leaves_the_url_free_for_a_new_dataset(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer uploads schema.msgpack just before the manifest. Killed between the two, it
    left a schema that the next writer took for a dataset (FileExistsError without append),
    though readers found none: the URL must be as if the killed writer had never run."""
    import obstore

    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    url = f"s3://{s3_bucket}/ds"
    direct = s3_store(s3_env.endpoint, s3_bucket)
    # The proxy holds every request after the schema's PUT: the kill lands before the
    # manifest's PUT reaches the server, however slow the machine.
    with NetProxy(s3_env.endpoint) as proxy:
        proxy.hold_after("/ds/schema.msgpack")  # the dataset's, not its shard's
        code = textwrap.dedent(f"""
            import numpy as np
            from loaderx.converter import from_numpy
            from_numpy({url!r}, np.full((40, 30), 7, np.uint8), codec="raw")
            """)
        env = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL=proxy.url)
        with subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT) as writer:
            try:
                deadline = time.monotonic() + 120
                while writer.poll() is None and time.monotonic() < deadline:
                    try:
                        obstore.head(direct, "ds/schema.msgpack")
                        break
                    except FileNotFoundError:
                        time.sleep(0.005)
            finally:
                writer.send_signal(signal.SIGKILL)
                writer.wait()
                proxy.release()
    names = set(objects(s3_env, s3_bucket))
    assert "ds/schema.msgpack" in names and "ds/shards.msgpack" not in names, names
    with pytest.raises(FileNotFoundError):
        DenseDataset(url)  # readers see no dataset
    monkeypatch.setenv("LOADERX_REMOTE_LOCK_LEASE_SECONDS", "0.1")  # the dead writer's lock
    data = np.arange(50 * 30, dtype=np.uint8).reshape(50, 30)
    from_numpy(url, data, codec="raw")
    with DenseDataset(url) as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(ds))), data)
    folders = {name.split("/")[1] for name in objects(s3_env, s3_bucket) if name.count("/") >= 2}
    assert folders == {"shard-000000"}


def _appender(url: str, value: int, rows: int, env: dict[str, str]) -> subprocess.Popen[str]:
    """A process appending `rows` rows of `value` to url, ten rows a shard (many objects)."""
    code = textwrap.dedent(f"""
        import numpy as np
        from loaderx.converter import from_numpy
        from_numpy({url!r}, np.full(({rows}, 50), {value}, np.uint8), codec="raw", append=True,
                   shard_records=10)
        """)
    return subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_object(server: S3Server, bucket: str, name: str) -> None:
    deadline = time.monotonic() + 120
    while not any(key.startswith(name) for key in objects(server, bucket)):
        assert time.monotonic() < deadline, f"{name} never appeared"
        time.sleep(0.01)


@pytest.mark.parametrize("paused", [False, True], ids=["slow", "paused"])
def test_an_upload_longer_than_the_lock_lease_is_never_mixed_with_another_writers(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    paused: bool
) -> None:
    """The writer lock expires after its lease so that a dead writer blocks nobody for long.
    It was never renewed, so a live writer uploading for longer than the lease lost it: the
    next appender took it over, removed the first one's objects and uploaded its own shards
    under the same names, and the manifest then listed a mix (records failing their
    checksums). Renewed, it stays with a slow writer (both appends land); a writer paused past
    its lease loses it and raises, publishing nothing, and the other's append is whole."""
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    url = f"s3://{s3_bucket}/ds"
    from_numpy(url, np.zeros((10, 50), np.uint8), codec="raw")
    # A lease of seconds (S3 dates the lock to the second) and a first writer whose 50 or so
    # requests take 0.2 s each: its upload outlasts the lease.
    env = dict(os.environ, PYTHONPATH=str(ROOT), LOADERX_REMOTE_LOCK_LEASE_SECONDS="4")
    with NetProxy(s3_env.endpoint, latency_s=0.2) as proxy:
        slow = _appender(url, 1, 120, dict(env, AWS_ENDPOINT_URL=proxy.url))
        try:
            _wait_for_object(s3_env, s3_bucket, "ds/shard-000001/")
            if paused:
                slow.send_signal(signal.SIGSTOP)
            other = _appender(url, 2, 30, env)
            _, other_err = other.communicate(timeout=300)
            assert other.returncode == 0, other_err[-2000:]
            if paused:
                slow.send_signal(signal.SIGCONT)
            _, slow_err = slow.communicate(timeout=300)
        finally:
            slow.kill()
            slow.wait()
    with DenseDataset(url) as ds:
        rows = ds.read(np.arange(len(ds)))
    values = dict(zip(*np.unique(rows[:, 0], return_counts=True)))
    assert (rows == rows[:, :1]).all()  # every row whole, from one writer
    if paused:
        assert slow.returncode == 1 and "StoreLockedError" in slow_err, slow_err[-2000:]
        assert values == {0: 10, 2: 30}
    else:
        assert slow.returncode == 0, slow_err[-2000:]
        assert values == {0: 10, 1: 120, 2: 30}



class GCSBehindProxy(GCSServer):
    """A fake-gcs-server of its own that takes path-style requests sent to `public_host` (the
    proxy in front of it: the proxy passes the Host header on as the client wrote it)."""

    def __init__(self, program: str, public_host: str) -> None:
        super().__init__(program)
        self.public_host = public_host

    def _command(self) -> Sequence[str]:
        command = list(super()._command())
        command[command.index("-public-host") + 1] = self.public_host
        return command


def test_a_gcs_listing_that_fails_otherwise_is_still_retried(
    gcs_server: GCSServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gs:// listing is sent once without retries, so that fake-gcs-server's 500 for a
    missing bucket is told at once (object_store.py, _listed); any other 500 must still be
    retried: here the first two GETs (the listing, then its second sending) fail, and the open
    succeeds and reads exactly."""
    data = images(50, 40)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    proxy_port = free_port()
    with GCSBehindProxy(gcs_server.program, f"{HOST}:{proxy_port}") as server, \
            NetProxy(server.endpoint, port=proxy_port) as proxy:
        server.create_bucket("behind-proxy")
        server.upload_tree(tmp_path / "local", "behind-proxy", "ds")
        point_google_at(monkeypatch, proxy.url)
        proxy.set_faults(fail_next=2)
        with DenseDataset("gs://behind-proxy/ds", cache_dir=tmp_path / "cache") as ds:
            np.testing.assert_array_equal(ds[np.arange(50)], data)
        assert proxy.stats().failed == 2
