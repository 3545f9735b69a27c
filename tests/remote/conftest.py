"""Fixtures of the remote tests: one moto server and one Azurite per session, a fresh bucket or
container per test, the environment obstore reads for each (so a bare `s3://bucket/...` or
`az://container/...` URL reaches the server), and `remote_root`, either of them by parameter."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .azurite_server import ACCOUNT_KEY, ACCOUNT_NAME, AZURITE_ENV, AzuriteServer, azurite_program
from .s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, S3Server

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


@dataclass(frozen=True)
class RemoteRoot:
    """An empty bucket or container on a running test server, the environment pointing at it:
    `url` is its root (`s3://bucket`, `az://container`); `upload_tree(folder, prefix)` puts a
    local folder's files under url/prefix; `objects()` is every object with its ETag."""

    url: str
    upload_tree: Callable[[Path, str], list[str]]
    objects: Callable[[], dict[str, str | None]]


@pytest.fixture(params=["s3", "az"])
def remote_root(request: pytest.FixtureRequest) -> RemoteRoot:
    """The same test against moto's S3 server and against Azurite."""
    if request.param == "s3":
        s3: S3Server = request.getfixturevalue("s3_env")
        bucket: str = request.getfixturevalue("s3_bucket")
        return RemoteRoot(f"s3://{bucket}",
                          lambda folder, prefix: s3.upload_tree(folder, bucket, prefix),
                          lambda: s3.objects(bucket))
    az: AzuriteServer = request.getfixturevalue("az_env")
    container: str = request.getfixturevalue("az_container")
    return RemoteRoot(f"az://{container}",
                      lambda folder, prefix: az.upload_tree(folder, container, prefix),
                      lambda: az.objects(container))
