"""A store that refuses access: opening or writing a dataset raises PermissionError at once,
naming the URL and saying the store refused, never retried for minutes. Real refusals from real
servers: moto's S3 server with its IAM checks on, Azurite given a wrong account key, and Azurite
given valid credentials (a SAS token) without the permission a request needs."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import RemoteError

from .azurite_server import AzuriteServer, account_sas
from .credential_env import point_aws_at
from .s3_server import S3Server
from .test_remote_read import images

# A refusal is never retried: far below obstore's retry budget (60 s by default), with room for
# a loaded machine (moto's first IAM check takes a few seconds there).
PROMPT_S: Final = 20.0
WRONG_KEY: Final = base64.b64encode(b"not the emulator's key, 64 bytes long......".ljust(64)).decode()


@pytest.fixture(scope="module")
def s3_iam_server() -> Iterator[S3Server]:
    """A second moto server with its IAM checks on from the first request (moto skips them
    for the first INITIAL_NO_AUTH_ACTION_COUNT requests): credentials it never issued are
    refused with 403, as AWS refuses them. Stopped at the module's end whatever happened."""
    with S3Server(env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as server:
        yield server


@pytest.fixture
def s3_refusing_env(s3_iam_server: S3Server, monkeypatch: pytest.MonkeyPatch,
                    tmp_path: Path) -> str:
    """The AWS variables pointed at the IAM-checking server with keys it does not know; the
    URL of a dataset there."""
    point_aws_at(monkeypatch, s3_iam_server.endpoint, "AKIANOTISSUEDBYMOTO0",
                 "not-a-secret-moto-issued")
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    return "s3://refused-bucket/ds"


@pytest.fixture
def az_written(az_env: AzuriteServer, az_container: str, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> tuple[str, np.ndarray]:
    """A dense dataset written to Azurite with the account's key, and read back with it: the
    URL and the dataset's records."""
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    url, data = f"az://{az_container}/ds", images(50, 32)
    from_numpy(url, data)
    with DenseDataset(url) as ds:  # readable with the right key
        np.testing.assert_array_equal(ds.read(np.arange(50)), data)
    return url, data


@pytest.fixture
def az_refusing_env(az_written: tuple[str, np.ndarray],
                    monkeypatch: pytest.MonkeyPatch) -> tuple[str, np.ndarray]:
    """az_written's dataset, the environment's key replaced by a wrong one."""
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", WRONG_KEY)
    return az_written


def refused(url: str) -> str:
    """What the message must say: the URL, then that the store refused access."""
    return f"{url}: access refused by the store \\(HTTP 403"


def opens_refused(url: str, reason: str, tmp_path: Path) -> None:
    """Every reader refuses the URL at open, promptly, with loaderx's message and the
    server's reason."""
    for reader in (DenseDataset, RaggedDataset):
        started = time.monotonic()
        with pytest.raises(PermissionError, match=refused(url)) as caught:
            reader(url, cache_dir=tmp_path / "cache")
        assert time.monotonic() - started < PROMPT_S
        assert reason in str(caught.value) and "check the credentials" in str(caught.value)


def test_s3_with_unknown_credentials_refuses_readers_and_writers(
        s3_refusing_env: str, tmp_path: Path) -> None:
    url = s3_refusing_env
    opens_refused(url, "InvalidAccessKeyId", tmp_path)
    started = time.monotonic()
    with pytest.raises(PermissionError, match=r"refused-bucket/ds.*access refused by the store"):
        from_numpy(url, images(10, 8))
    assert time.monotonic() - started < PROMPT_S


def test_azure_with_a_wrong_key_refuses_readers_and_writers(
        az_refusing_env: tuple[str, np.ndarray], tmp_path: Path) -> None:
    url, data = az_refusing_env
    opens_refused(url, "AuthorizationFailure", tmp_path)
    started = time.monotonic()
    with pytest.raises(PermissionError, match=r"/ds.*access refused by the store"):
        from_numpy(url, data[:5], append=True)
    assert time.monotonic() - started < PROMPT_S


def test_azure_credentials_without_a_permission_are_refused_at_the_request_that_needs_it(
        az_written: tuple[str, np.ndarray], az_env: AzuriteServer, az_container: str,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid credentials that may not do everything: the listing passes, and the first object
    read or write the token does not allow raises PermissionError naming that object (obstore
    reports these as its PermissionDeniedError, not as the listing's generic error)."""
    url, data = az_written
    before = az_env.objects(az_container)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    monkeypatch.setenv("AZURE_STORAGE_SAS_KEY", account_sas("rl"))  # read and list only
    with DenseDataset(url, cache_dir=tmp_path / "read-only") as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(data))), data)
    denied = (r": access refused by the store "
              r"\(HTTP 403 Forbidden, AuthorizationPermissionMismatch\)")
    started = time.monotonic()
    with pytest.raises(PermissionError, match=f"writing {url}/[^:]+{denied}"):
        from_numpy(url, data[:5], append=True)
    assert time.monotonic() - started < PROMPT_S
    assert az_env.objects(az_container) == before  # the refused append changed nothing
    assert not any((tmp_path / "uploads").glob("*"))  # and left no local build behind
    monkeypatch.setenv("AZURE_STORAGE_SAS_KEY", account_sas("l"))  # list only: no object reads
    for reader in (DenseDataset, RaggedDataset):
        started = time.monotonic()
        with pytest.raises(PermissionError, match=f"reading {url}/[^:]+{denied}"):
            reader(url, cache_dir=tmp_path / "list-only")
        assert time.monotonic() - started < PROMPT_S


@pytest.mark.parametrize("missing", ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"])
def test_half_a_key_pair_names_the_variables_to_set(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    missing: str
) -> None:
    """A key pair missing its secret (or its id) made the client's setup fail with "cannot
    reach <url>: Generic S3 error: Missing SecretAccessKey" and obstore's multi-line debug
    dump: nothing was unreachable, and no variable was named."""
    monkeypatch.setenv("LOADERX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LOADERX_UPLOAD_DIR", str(tmp_path / "uploads"))
    monkeypatch.delenv(missing)
    url = f"s3://{s3_bucket}/ds"
    for attempt in (lambda: DenseDataset(url), lambda: from_numpy(url, images(4, 8))):
        with pytest.raises(RemoteError) as refused:
            attempt()
        message = str(refused.value)
        assert message.startswith(f"cannot set up the client for {url}: ")
        assert "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in message
        assert "\n" not in message and "Debug source" not in message
    assert s3_env.objects(s3_bucket) == {}
