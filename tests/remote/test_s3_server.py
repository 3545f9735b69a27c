"""The test kit itself: moto's server starts and stops cleanly, the fixtures reach it through
obstore's environment settings, and a restart brings back the kit's objects with equal ETags."""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from pathlib import Path

import obstore
import pytest
from obstore.exceptions import GenericError
from obstore.store import S3Store

from .kit_checks import accepts_connections, assert_leaves_nothing, process_exists
from .s3_server import S3Server, s3_store
from .server_process import HOST, ServerError, free_port


def test_start_and_stop_leave_no_process_and_no_listener() -> None:
    server = S3Server()
    assert_leaves_nothing(server, server.log_path)


def test_a_failing_test_body_still_stops_the_server() -> None:
    server = S3Server()
    with pytest.raises(ZeroDivisionError):
        with server:
            pid = server.pid
            1 / 0  # noqa: B018
    assert pid is not None and not process_exists(pid)


def test_restart_brings_back_the_kits_objects_with_equal_etags(tmp_path: Path) -> None:
    tree = tmp_path / "dataset"
    (tree / "shard-0").mkdir(parents=True)
    files = {"manifest.json": b'{"shards": 1}', "shard-0/data.zr": os.urandom(300_000),
             "shard-0/empty.bin": b""}
    for relative, data in files.items():
        (tree / relative).write_bytes(data)
    with S3Server() as server:
        server.create_bucket("kit-restart")
        keys = server.upload_tree(tree, "kit-restart", "corpus/images/")
        assert keys == sorted(f"corpus/images/{r}" for r in files)
        extra_etag = server.put("kit-restart", "loose.bin", b"loose bytes")
        store = s3_store(server.endpoint, "kit-restart")
        before = {m["path"]: m["e_tag"] for batch in obstore.list(store) for m in batch}
        assert before["loose.bin"] == extra_etag
        for relative, data in files.items():
            assert before[f"corpus/images/{relative}"] == f'"{hashlib.md5(data).hexdigest()}"'
        obstore.put(store, "not-through-the-kit", b"gone after a restart")
        port, pid = server.port, server.pid

        server.restart()

        assert server.port == port and server.pid != pid and server.running
        assert pid is not None and not process_exists(pid)
        after_store = s3_store(server.endpoint, "kit-restart")
        after = {m["path"]: m["e_tag"] for batch in obstore.list(after_store) for m in batch}
        assert after == before
        for relative, data in files.items():
            assert bytes(obstore.get(after_store, f"corpus/images/{relative}").bytes()) == data


def test_stop_then_start_also_brings_back_the_objects() -> None:
    with S3Server() as server:
        server.create_bucket("kit-stop-start")
        etag = server.put("kit-stop-start", "a", b"abc")
        server.stop()
        assert not accepts_connections(server.port)
        server.start()
        assert obstore.head(s3_store(server.endpoint, "kit-stop-start"), "a")["e_tag"] == etag


def test_a_changed_source_file_is_refused_on_restart(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"first")
    with S3Server() as server:
        server.create_bucket("kit-changed")
        server.upload_tree(tmp_path, "kit-changed", "p")
        (tmp_path / "f").write_bytes(b"other")
        with pytest.raises(ServerError, match="changed since the kit uploaded it"):
            server.restart()


def test_a_server_that_cannot_start_says_why_with_its_log() -> None:
    """A port already taken: moto exits, and the error carries its log."""
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        server = S3Server(port=taken.getsockname()[1])
        started = time.monotonic()
        with pytest.raises(ServerError, match="exited with status") as raised:
            server.start()
        assert time.monotonic() - started < 60
        assert "Address already in use" in str(raised.value) or "in use" in str(raised.value)
        assert not server.running
        server.close()


def test_uploads_need_a_bucket_made_through_the_kit(tmp_path: Path) -> None:
    server = S3Server(port=free_port())
    with pytest.raises(ServerError, match="not created through the kit"):
        server.put("nobody-made-this", "k", b"x")
    with pytest.raises(ServerError, match="is not a folder"):
        server.upload_tree(tmp_path / "missing", "b", "p")
    server.close()


def test_s3_env_lets_a_bare_s3store_reach_the_server(s3_env: S3Server, s3_bucket: str) -> None:
    """The standard variables alone (endpoint, keys, region, plain http allowed) are enough."""
    etag = s3_env.put(s3_bucket, "env/check.bin", b"reached through the environment")
    store = S3Store(s3_bucket)
    assert bytes(obstore.get(store, "env/check.bin").bytes()) == b"reached through the environment"
    assert obstore.head(store, "env/check.bin")["e_tag"] == etag


def test_without_allow_http_obstore_refuses_the_plain_http_endpoint(
        s3_env: S3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The explicit setting matters: the same environment without AWS_ALLOW_HTTP fails."""
    s3_env.put(s3_bucket, "k", b"v")
    monkeypatch.delenv("AWS_ALLOW_HTTP")
    store = S3Store(s3_bucket, retry_config={"max_retries": 0})
    # reqwest, under obstore, refuses to build a plain-http request unless allowed.
    with pytest.raises(GenericError, match="builder error"):
        obstore.get(store, "k").bytes()


def test_buckets_of_the_fixture_are_fresh_and_valid(s3_server: S3Server, s3_bucket: str) -> None:
    assert s3_bucket == s3_bucket.lower() and 3 <= len(s3_bucket) <= 63
    assert obstore.list(s3_store(s3_server.endpoint, s3_bucket)).collect() == []


def test_the_server_runs_as_a_child_of_this_python(s3_server: S3Server) -> None:
    pid = s3_server.pid
    assert pid is not None
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert command[:3] == [sys.executable.encode(), b"-m", b"moto.server"]
