"""A real S3-protocol server for the tests: moto's standalone server as a child process.

The tests of the remote reader talk to it over HTTP on 127.0.0.1 through the same client a user
has (obstore); nothing is mocked. moto keeps every bucket and object in the memory of its
process, so a stopped server forgets them. To let a test kill the endpoint mid-epoch and bring it
back with the dataset still there, the kit remembers every bucket it created and every object it
uploaded, and `start()` (so `restart()` too) puts them back: the same bytes under the same keys.
Every upload is a single PUT (never multipart), so an object's ETag is the MD5 of its bytes and
comes back equal after a restart; a reader that pins ETags at open keeps working across it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

import obstore
from obstore.store import S3Store

from .server_process import HOST, ServerError, ServerProcess, free_port, without_variables

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig

# Fixed test credentials: moto accepts any, obstore needs some to sign with.
ACCESS_KEY_ID: Final = "loaderx-test"
SECRET_ACCESS_KEY: Final = "loaderx-test-secret"
REGION: Final = "us-east-1"


def s3_store(endpoint: str, bucket: str, *, max_retries: int | None = None,
             timeout_s: float = 30.0) -> S3Store:
    """An obstore S3Store for `bucket` at `endpoint` (the server or a proxy in front of it), with
    the kit's credentials; `max_retries=0` turns obstore's retries off."""
    from datetime import timedelta

    client: ClientConfig = {"allow_http": True, "timeout": timedelta(seconds=timeout_s),
                            "connect_timeout": timedelta(seconds=5)}
    retry: RetryConfig | None = None
    if max_retries is not None:
        retry = {"max_retries": max_retries, "retry_timeout": timedelta(seconds=timeout_s),
                 "backoff": {"init_backoff": timedelta(milliseconds=10),
                             "max_backoff": timedelta(milliseconds=200), "base": 2}}
    return S3Store(bucket, endpoint=endpoint, access_key_id=ACCESS_KEY_ID,
                   secret_access_key=SECRET_ACCESS_KEY, region=REGION,
                   client_options=client, retry_config=retry)


@dataclass(frozen=True)
class Upload:
    """One object the kit put on the server: where its bytes come from and their MD5 (= ETag)."""

    source: Path | bytes
    md5: str

    def read(self) -> bytes:
        if isinstance(self.source, bytes):
            return self.source  # immutable: the very bytes uploaded
        data = self.source.read_bytes()
        if hashlib.md5(data).hexdigest() != self.md5:
            raise ServerError(f"{self.source} changed since the kit uploaded it: a restart would "
                              "serve other bytes under the same key")
        return data


class S3Server(ServerProcess):
    """moto's server on 127.0.0.1:`port` (a free one when None) with `env` added to its
    environment, started by `start()` and stopped by `stop()` (`close()` also removes its log);
    a context manager that closes it.
    The kit's buckets and uploads survive `stop()` + `start()` and `restart()`."""

    label = "moto's server"

    def __init__(self, port: int | None = None, env: dict[str, str] | None = None) -> None:
        descriptor, log_name = tempfile.mkstemp(prefix="loaderx-moto-", suffix=".log")
        os.close(descriptor)
        super().__init__(port if port is not None else free_port(), Path(log_name))
        self._port_fixed = port is not None
        self._env = dict(env or {})  # for moto, e.g. INITIAL_NO_AUTH_ACTION_COUNT
        self._buckets: dict[str, dict[str, Upload]] = {}

    def start(self) -> None:
        """Starts the server, waits until it answers, then puts back what the kit uploaded."""
        self._start(other_port_allowed=not self._port_fixed)
        self._replay()

    def restart(self) -> None:
        """Stops and starts the server on the same port; the kit's buckets and objects return
        with the same bytes and ETags (anything else written to the server is gone)."""
        self.stop()
        self._start(other_port_allowed=False)
        self._replay()

    def close(self) -> None:
        """Stops the server and removes its log file."""
        self.stop()
        self.log_path.unlink(missing_ok=True)

    def create_bucket(self, bucket: str) -> None:
        """Creates `bucket` (a valid S3 name) on the server and remembers it for restarts."""
        if bucket in self._buckets:
            raise ServerError(f"the kit already created bucket {bucket!r}")
        self._create_bucket_on_server(bucket)
        self._buckets[bucket] = {}

    def put(self, bucket: str, key: str, data: bytes) -> str:
        """Uploads `data` as s3://bucket/key in one PUT; returns its ETag (quoted, as S3 says it)."""
        return self._upload(bucket, key, data, Upload(bytes(data), hashlib.md5(data).hexdigest()))

    def upload_tree(self, folder: Path | str, bucket: str, prefix: str) -> list[str]:
        """Uploads every file under `folder` to s3://bucket/prefix/<relative path>; returns the
        keys in sorted order. The files are read again (and checked) on a restart."""
        root = Path(folder)
        if not root.is_dir():
            raise ServerError(f"{root} is not a folder")
        base = prefix.strip("/")
        keys = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            relative = path.relative_to(root).as_posix()
            key = f"{base}/{relative}" if base else relative
            data = path.read_bytes()
            self._upload(bucket, key, data, Upload(path.resolve(), hashlib.md5(data).hexdigest()))
            keys.append(key)
        return keys

    def objects(self, bucket: str) -> dict[str, str | None]:
        """Every object of the bucket with its ETag."""
        store = s3_store(self.endpoint, bucket)
        return {meta["path"]: meta["e_tag"] for page in obstore.list(store) for meta in page}

    def forget_bucket(self, bucket: str) -> None:
        """Deletes the bucket's objects and the bucket (if the server runs) and stops replaying
        them on restarts."""
        uploads = self._buckets.pop(bucket, {})
        if self.running:
            store = s3_store(self.endpoint, bucket)
            keys = [meta["path"] for batch in obstore.list(store) for meta in batch]
            if keys:
                obstore.delete(store, keys)
            self._boto_client().delete_bucket(Bucket=bucket)
        uploads.clear()

    def _upload(self, bucket: str, key: str, data: bytes, upload: Upload) -> str:
        if bucket not in self._buckets:
            raise ServerError(f"bucket {bucket!r} was not created through the kit")
        result = obstore.put(s3_store(self.endpoint, bucket), key, data, use_multipart=False)
        etag = result["e_tag"] or ""
        if etag.strip('"') != upload.md5:
            raise ServerError(f"s3://{bucket}/{key}: the server answered ETag {etag}, "
                              f"expected the MD5 {upload.md5}")
        self._buckets[bucket][key] = upload
        return etag

    def _replay(self) -> None:
        for bucket, uploads in self._buckets.items():
            self._create_bucket_on_server(bucket)
            store = s3_store(self.endpoint, bucket)
            for key, upload in uploads.items():
                obstore.put(store, key, upload.read(), use_multipart=False)

    def _command(self) -> Sequence[str]:
        return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(self.port)]

    def _environment(self) -> Mapping[str, str]:
        return without_variables(("AWS_",)) | self._env

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/moto-api/data.json", timeout=1.0) as reply:
                return int(reply.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def _create_bucket_on_server(self, bucket: str) -> None:
        self._boto_client().create_bucket(Bucket=bucket)

    def _boto_client(self) -> BotoClient:
        import boto3  # type: ignore[import-untyped]  # boto3 ships no type hints

        client: BotoClient = boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY, region_name=REGION)
        return client


class BotoClient(Protocol):
    """The two calls of boto3's S3 client the kit makes (obstore cannot create buckets)."""

    def create_bucket(self, *, Bucket: str) -> object: ...  # noqa: N803  (boto3's names)

    def delete_bucket(self, *, Bucket: str) -> object: ...  # noqa: N803

