"""Fixtures of the remote tests: one moto server and one Azurite per session, a fresh bucket or
container per test, the environment obstore reads for each (so a bare `s3://bucket/...` or
`az://container/...` URL reaches the server), and `remote_root`, either of them by parameter."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .azurite_server import AZURITE_ENV, AzuriteServer, azurite_program
from .credential_env import point_aws_at, point_azure_at
from .s3_server import S3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server for the whole session, stopped at its end whatever happened."""
    with S3Server() as server:
        yield server


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
    with AzuriteServer(program) as server:
        yield server


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
    point_azure_at(monkeypatch, azurite_server.endpoint)
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
