"""The environment obstore reads, pointed at a test server for one test: the variables that would
send it elsewhere (a developer's profile, a session token, another endpoint) removed, the
server's address and credentials set; pytest's monkeypatch puts everything back after the test."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import pytest

from .azurite_server import ACCOUNT_KEY, ACCOUNT_NAME
from .gcs_server import service_account_key
from .s3_server import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY

# Variables that would point obstore elsewhere than the test server (a developer's profile, a
# session token) or change how it signs.
FOREIGN_AWS_VARIABLES: Final = (
    "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ENDPOINT",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "AWS_BUCKET", "AWS_BUCKET_NAME", "AWS_SKIP_SIGNATURE")
# The same for Azure: other credentials or endpoints than the emulator's.
FOREIGN_AZURE_VARIABLES: Final = (
    "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY", "AZURE_STORAGE_SAS_KEY", "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN", "AZURE_STORAGE_CLIENT_ID", "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_STORAGE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID",
    "AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT", "AZURE_CONTAINER_NAME",
    "AZURE_USE_FABRIC_ENDPOINT", "AZURE_SKIP_SIGNATURE")
# The same for Google Cloud Storage.
FOREIGN_GOOGLE_VARIABLES: Final = (
    "GOOGLE_SERVICE_ACCOUNT", "GOOGLE_SERVICE_ACCOUNT_PATH", "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_BUCKET", "GOOGLE_BUCKET_NAME", "GOOGLE_BASE_URL",
    "GOOGLE_BEARER_TOKEN", "GOOGLE_SKIP_SIGNATURE")


def point_aws_at(monkeypatch: pytest.MonkeyPatch, endpoint: str,
                 access_key_id: str = ACCESS_KEY_ID,
                 secret_access_key: str = SECRET_ACCESS_KEY) -> None:
    """The standard AWS variables pointed at the S3 server at `endpoint`, plain http allowed,
    with the kit's keys or others (keys a server never issued, to be refused)."""
    _point(monkeypatch, FOREIGN_AWS_VARIABLES, {
        "AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret_access_key, "AWS_REGION": REGION,
        "AWS_ALLOW_HTTP": "true"})


def point_azure_at(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Azure's standard variables pointed at the emulator at `endpoint`: emulator mode (which
    allows its plain http), its address, and its well-known account."""
    _point(monkeypatch, FOREIGN_AZURE_VARIABLES, {
        "AZURE_STORAGE_USE_EMULATOR": "true", "AZURITE_BLOB_STORAGE_URL": endpoint,
        "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT_NAME, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY})


def point_google_at(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Google's standard variables pointed at fake-gcs-server at `endpoint`: a service-account
    key naming its address with OAuth off, and plain http allowed (loaderx's AWS_ALLOW_HTTP is
    its switch for every cloud)."""
    _point(monkeypatch, FOREIGN_GOOGLE_VARIABLES, {
        "GOOGLE_SERVICE_ACCOUNT_KEY": service_account_key(endpoint), "AWS_ALLOW_HTTP": "true"})


def _point(monkeypatch: pytest.MonkeyPatch, foreign: tuple[str, ...],
           variables: Mapping[str, str]) -> None:
    for name in foreign:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
