"""The fake-gcs-server kit itself: the emulator starts and stops cleanly on 127.0.0.1, buckets
come and go with their objects, the fixtures' environment lets a bare gs:// URL reach it through
obstore; and the two things the pinned emulator cannot do, which decide what the gs:// tests
leave out (docs/remote.md). Those two tests fail when a new release can do them: then the write
tests and the changed-object test can run against gs:// too."""

from __future__ import annotations

from typing import TYPE_CHECKING

import obstore
import pytest
from obstore.store import from_url

from .gcs_server import GCSServer, fake_gcs_program, gcs_store
from .server_process import ServerError
from .kit_checks import assert_leaves_nothing

if TYPE_CHECKING:
    from obstore import GetOptions


def test_start_and_stop_leave_no_process_no_listener_and_no_folder(gcs_server: GCSServer) -> None:
    program = fake_gcs_program()
    assert program is not None  # the session's server runs, so the kit found the binary
    server = GCSServer(program)
    assert_leaves_nothing(server, server.work_dir)


def test_a_server_that_cannot_start_is_stopped_and_named() -> None:
    server = GCSServer("/bin/false")
    with pytest.raises(ServerError, match="fake-gcs-server exited with status .* before answering"):
        with server:
            pass
    assert not server.running and not server.work_dir.exists()


def test_buckets_are_made_and_removed_with_their_objects(gcs_server: GCSServer) -> None:
    gcs_server.create_bucket("loaderx-kit-check")
    try:
        etag = gcs_server.put("loaderx-kit-check", "a/b", b"object")
        store = gcs_store(gcs_server.endpoint, "loaderx-kit-check")
        assert bytes(obstore.get(store, "a/b").bytes()) == b"object"
        assert obstore.head(store, "a/b")["e_tag"] == etag
        assert list(gcs_server.objects("loaderx-kit-check")) == ["a/b"]
        with pytest.raises(ServerError, match="409"):
            gcs_server.create_bucket("loaderx-kit-check")
    finally:
        gcs_server.delete_bucket("loaderx-kit-check")
    with pytest.raises(ServerError, match="404"):
        gcs_server.delete_bucket("loaderx-kit-check")


def test_gs_env_lets_a_bare_gs_url_reach_the_emulator(gs_env: GCSServer, gs_bucket: str) -> None:
    gs_env.put(gs_bucket, "prefix/x.bin", b"bytes")
    store = from_url(f"gs://{gs_bucket}/prefix", client_options={"allow_http": True})
    assert bytes(obstore.get(store, "x.bin").bytes()) == b"bytes"
    assert bytes(obstore.get(store, "x.bin", options={"range": (1, 4)}).bytes()) == b"yte"
    assert [meta["path"] for page in obstore.list(store) for meta in page] == ["x.bin"]


def test_the_emulator_cannot_take_an_upload_from_obstore(gs_env: GCSServer, gs_bucket: str) -> None:
    """object_store uploads with the XML API's PUT (and its multipart POST ?uploads), which
    fake-gcs-server does not serve: it answers 400 "invalid uploadType" (its issue 331)."""
    store = gcs_store(gs_env.endpoint, gs_bucket)
    for mode in ("overwrite", "create"):
        with pytest.raises(obstore.exceptions.GenericError, match="400.*invalid uploadType"):
            obstore.put(store, "x.bin", b"bytes", mode=mode)
    assert gs_env.objects(gs_bucket) == {}


def test_the_emulator_ignores_if_match_on_a_read(gs_env: GCSServer, gs_bucket: str) -> None:
    """GCS refuses a read whose If-Match names another version (412); fake-gcs-server serves it,
    so a reader cannot see there that an object changed under it."""
    gs_env.put(gs_bucket, "x.bin", b"bytes")
    store = gcs_store(gs_env.endpoint, gs_bucket)
    stale: GetOptions = {"if_match": '"not-its-etag"'}
    assert bytes(obstore.get(store, "x.bin", options=stale).bytes()) == b"bytes"
