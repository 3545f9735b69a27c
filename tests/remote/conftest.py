"""Fixtures of the remote tests: one moto server per session, a fresh bucket per test, and the
environment obstore's S3Store reads (so `S3Store(bucket)` alone reaches the server)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from .s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, S3Server

# Variables that would point obstore elsewhere than the test server (a developer's profile, a
# session token) or change how it signs; the fixture removes them for the test.
FOREIGN_AWS_VARIABLES = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION",
                         "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE",
                         "AWS_ENDPOINT", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_BUCKET",
                         "AWS_BUCKET_NAME", "AWS_SKIP_SIGNATURE")


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
