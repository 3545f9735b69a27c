"""One dataset's objects in an object store, through obstore (Rust's object_store).

obstore does the protocol work: request signing, credentials from each cloud's standard
environment and config chain, retries with backoff on timeouts and 5xx answers, range reads and
conditional writes. This module only chooses its settings, names objects relative to the
dataset, and turns its exceptions into loaderx's (with the URL and the object in the message).

obstore is the optional extra `loaderx[remote]`: it is imported when a URL is opened, never
by `import loaderx`.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.urls import DatasetURL
from loaderx._remote.settings import count_setting, seconds_setting
from loaderx.errors import MissingExtraError, RemoteChangedError, RemoteError

_T = TypeVar("_T")

# How long obstore keeps retrying one request (timeouts, 5xx, refused connections) before the
# error reaches the caller, and how many retries at most. A server that stays down then makes
# a read raise instead of hanging; the loader's state_dict resumes once it is back.
RETRY_SECONDS_ENV: Final = "LOADERX_REMOTE_RETRY_SECONDS"
RETRIES_ENV: Final = "LOADERX_REMOTE_RETRIES"
RETRY_SECONDS_DEFAULT: Final = 60.0
RETRIES_DEFAULT: Final = 10
# One request's own deadline (a stalled connection counts as a timeout and is retried).
REQUEST_TIMEOUT_ENV: Final = "LOADERX_REMOTE_TIMEOUT_SECONDS"
REQUEST_TIMEOUT_DEFAULT: Final = 30.0

# The process whose obstore runtime (one per process, started by its first request) serves this
# one's requests: set when this process makes its first client. A forked child inherits it, and
# with it a copy of the parent's runtime whose threads the fork did not copy and whose event
# queue (epoll) it shares with the parent: a request made there hangs, and its events reach the
# parent's runtime, which then crashes (a segfault, found with torch's DataLoader, whose
# workers fork by default on Linux). So a forked child refuses to make any (_refuse_forked).
_runtime_pid = -1


@dataclass(frozen=True)
class RemoteObject:
    """One object of a dataset: its name relative to the dataset, size and version tag."""

    name: str
    size: int
    etag: str | None
    version: str | None
    modified: float = 0.0  # seconds since the epoch (0 when unknown)

    def unchanged(self) -> dict[str, str]:
        """obstore's put mode "only if the object is still this version": its ETag, and its
        version where the store reports one. GCS needs the version (the generation): without
        it object_store refuses a conditional update there ("Version required for conditional
        update") before sending anything."""
        if self.etag is None:
            raise RemoteError(f"{self.name} has no ETag to make a write conditional on")
        mode = {"e_tag": self.etag}
        if self.version is not None:
            mode["version"] = self.version
        return mode


def _retry_config() -> dict[str, Any]:
    seconds = seconds_setting(RETRY_SECONDS_ENV, RETRY_SECONDS_DEFAULT)
    retries = count_setting(RETRIES_ENV, RETRIES_DEFAULT, minimum=0)  # 0: no retries
    return {
        "max_retries": retries,
        "retry_timeout": datetime.timedelta(seconds=seconds),
        "backoff": {
            "init_backoff": datetime.timedelta(milliseconds=100),
            "max_backoff": datetime.timedelta(seconds=min(15.0, seconds)),
            "base": 2.0,
        },
    }


def _obstore() -> Any:
    try:
        import obstore
        import obstore.store
    except ImportError as exc:
        raise MissingExtraError(
            "reading or writing a dataset at a URL needs obstore: pip install 'loaderx[remote]'"
        ) from exc
    return obstore


def _http_allowed() -> bool:
    """The explicit setting that lets requests go over plain http (a test server on this
    machine): object_store's own AWS_ALLOW_HTTP, whatever the cloud."""
    return os.environ.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes")


def _refuse_plain_http(location: DatasetURL) -> None:
    """obstore refuses a plain-http S3 endpoint with "builder error"; say what to set."""
    if location.scheme not in ("s3", "s3a"):
        return
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint.lower().startswith("http://") and not _http_allowed():
        raise RemoteError(
            f"AWS_ENDPOINT_URL is plain http ({endpoint}) and plain http is off; set "
            "AWS_ALLOW_HTTP=true to allow it (meant for a test server on this machine)"
        )


class ObjectStore:
    """The objects under one dataset URL. Thread-safe; a forked child makes its own client
    (a client's connection pool and runtime do not survive fork)."""

    def __init__(self, location: DatasetURL) -> None:
        self.location = location
        self._obstore = _obstore()
        _refuse_plain_http(location)
        # The client is made at the first request; its settings are checked now, before any.
        _retry_config()
        seconds_setting(REQUEST_TIMEOUT_ENV, REQUEST_TIMEOUT_DEFAULT)
        self._lock = ForkSafeLock()  # no lock a Ctrl-C or a fork left held
        # The client that retries as _retry_config says (True) and, made only for a GCS
        # listing (_listed), one that never retries (False).
        self._clients: dict[bool, Any] = {}
        self._client_pid = -1

    def _store(self, retrying: bool = True) -> Any:
        global _runtime_pid
        with self._lock:
            if self._client_pid != os.getpid():
                self._clients = {}  # a forked child's copies do not work (_refuse_forked)
            if retrying not in self._clients:
                _refuse_forked(self.location.url)
                timeout = seconds_setting(REQUEST_TIMEOUT_ENV, REQUEST_TIMEOUT_DEFAULT)
                options: dict[str, Any] = {
                    "timeout": datetime.timedelta(seconds=timeout),
                    "connect_timeout": datetime.timedelta(seconds=min(timeout, 10.0)),
                }
                if _http_allowed():
                    # Explicit client options replace the ones obstore reads from the
                    # environment, so the standard setting is passed on here.
                    options["allow_http"] = True
                retry = _retry_config() if retrying else {"max_retries": 0}
                try:
                    self._clients[retrying] = self._obstore.store.from_url(
                        self.location.url, retry_config=retry, client_options=options
                    )
                except Exception as exc:
                    # Only the settings are checked here (no request is sent): a key pair
                    # missing half, an account not named. Say which variables to set.
                    raise RemoteError(
                        f"cannot set up the client for {self.location.url}: {_first_line(exc)}; "
                        f"{_SETUP_HINTS.get(self.location.scheme, _SETUP_HINT_OTHER)}"
                    ) from exc
                self._client_pid = _runtime_pid = os.getpid()
            return self._clients[retrying]

    def _call(self, name: str, what: str, call: Callable[[Any], _T]) -> _T:
        """call(client), with obstore's exceptions turned into loaderx's naming the object."""
        with self._errors(name, what):
            return call(self._store())

    @contextmanager
    def _errors(self, name: str, what: str) -> Iterator[None]:
        """Turns obstore's exceptions raised inside into loaderx's naming the object."""
        exceptions = self._obstore.exceptions
        url = self.location.child(name) if name else self.location.url
        try:
            yield
        except exceptions.PreconditionError as exc:
            if name and self._is_missing(name):
                # Some stores (Azure's emulator among them) answer a read of a deleted object
                # that names the version seen at open with 412, others with 404: both are
                # reported as the missing object they are.
                raise FileNotFoundError(
                    f"{what} {url}: no such object (deleted after the dataset was opened)"
                ) from exc
            raise RemoteChangedError(
                f"{url} changed while it was being read ({what}); reopen the dataset to read "
                "its new version"
            ) from exc
        except (exceptions.PermissionDeniedError, exceptions.UnauthenticatedError) as exc:
            raise _refused(what, url, exc) from exc
        except FileNotFoundError as exc:
            if what in ("writing", "uploading"):
                # A write creates the object: only its bucket or container can be missing.
                raise FileNotFoundError(f"{what} {url}: no such bucket or container") from exc
            raise FileNotFoundError(f"{what} {url}: no such object") from exc
        except exceptions.AlreadyExistsError as exc:
            raise FileExistsError(f"{what} {url}: the object already exists") from exc
        except exceptions.BaseError as exc:
            # object_store reports a refused listing as a generic error that keeps only the
            # answer's text (S3 and Azure alike): the status in it says what happened.
            if _REFUSED_STATUS.search(str(exc)):
                raise _refused(what, url, exc) from exc
            if _MISSING_STATUS.search(str(exc)):
                raise FileNotFoundError(
                    f"{what} {url}: no such bucket or container ({_answer(exc, _MISSING_STATUS)})"
                ) from exc
            if "builder error" in str(exc) and not _http_allowed():
                # The client refuses a plain-http endpoint without saying so (a GCS emulator's
                # gcs_base_url, say): the S3 case is caught before any request.
                raise RemoteError(
                    f"{what} {url} failed: {_first_line(exc)}; if the endpoint is plain http, "
                    "set AWS_ALLOW_HTTP=true to allow it (meant for a test server on this machine)"
                ) from exc
            raise RemoteError(f"{what} {url} failed: {_first_line(exc)}") from exc

    def _is_missing(self, name: str) -> bool:
        """Whether a HEAD of the object answers "no such object" (any other failure: False)."""
        try:
            self._obstore.head(self._store(), name)
        except FileNotFoundError:
            return True
        except Exception:
            return False
        return False

    def list(self) -> list[RemoteObject]:
        """Every object under the dataset's prefix (one LIST request a thousand objects)."""

        def listing(client: Any) -> list[RemoteObject]:
            found: list[RemoteObject] = []
            for page in self._obstore.list(client, None, chunk_size=1000):
                for meta in page:
                    found.append(_remote_object(meta))
            return found

        return self._listed(listing)

    def _listed(self, call: Callable[[Any], _T]) -> _T:
        """call(client) for a listing, the first request an open or a write sends. A missing
        bucket gets 404 from S3, Azure and GCS, which no client retries; but fake-gcs-server
        (the GCS emulator) answers 500 "no bucket named ...", which the client retried for its
        whole budget (LOADERX_REMOTE_RETRY_SECONDS) before it told. So on gs:// the listing
        is sent once without retries first: that answer is a missing bucket at once, and any
        other failure sends it again with them (one request more, only when it failed)."""
        if self.location.scheme != "gs":
            return self._call("", "listing", call)
        try:
            return call(self._store(retrying=False))
        except Exception as exc:
            reason = _NO_BUCKET.search(str(exc))
            if reason is None:
                return self._call("", "listing", call)
            raise FileNotFoundError(
                f"listing {self.location.url}: no such bucket or container (HTTP 500 Internal "
                f"Server Error, {reason.group(1)})"
            ) from exc

    def require_container(self) -> None:
        """FileNotFoundError naming the URL when its bucket or container does not exist. A
        HEAD's 404 has no body, so it reads the same for a missing object and a missing bucket;
        a listing's names which (one LIST request: only its first page is read)."""

        def first_page(client: Any) -> None:
            next(iter(self._obstore.list(client, None, chunk_size=1)), None)

        self._listed(first_page)

    def head(self, name: str) -> RemoteObject:
        return self._call(name, "reading", lambda client: _remote_object(
            self._obstore.head(client, name)))

    def get(self, name: str, etag: str | None) -> bytes:
        """The whole object; RemoteChangedError when its ETag is no longer etag."""
        options = {"if_match": etag} if etag else {}

        def whole(client: Any) -> bytes:
            return bytes(self._obstore.get(client, name, options=options).bytes())

        return self._call(name, "reading", whole)

    def get_range(self, name: str, start: int, end: int, etag: str | None) -> bytes:
        """Bytes [start, end) of the object, checked to be the version etag names and to be
        exactly end - start bytes long (a truncated answer is an error, never short data)."""
        options: dict[str, Any] = {"range": (start, end)}
        if etag:
            options["if_match"] = etag

        def ranged(client: Any) -> bytes:
            return bytes(self._obstore.get(client, name, options=options).bytes())

        data = self._call(name, "reading", ranged)
        if len(data) != end - start:
            raise RemoteError(
                f"reading {self.location.child(name)} bytes {start}..{end}: the server sent "
                f"{len(data)} bytes instead of {end - start} (a truncated answer)"
            )
        return data

    def stream_range(
        self, name: str, start: int, end: int, etag: str | None, piece_bytes: int
    ) -> Iterator[memoryview]:
        """Bytes [start, end) of the object as they arrive, in pieces of at least piece_bytes
        (the last may be shorter), with get_range's checks: the version etag names, and exactly
        end - start bytes in all (a truncated answer raises after the pieces that came)."""
        options: dict[str, Any] = {"range": (start, end)}
        if etag:
            options["if_match"] = etag
        received = 0
        with self._errors(name, "reading"):
            answer = self._obstore.get(self._store(), name, options=options)
            for piece in answer.stream(min_chunk_size=piece_bytes):
                view = memoryview(piece)
                received += len(view)
                if received > end - start:
                    break
                yield view
        if received != end - start:
            raise RemoteError(
                f"reading {self.location.child(name)} bytes {start}..{end}: the server sent "
                f"{received} bytes instead of {end - start} (a truncated answer)"
            )

    def put(self, name: str, data: bytes | memoryview, mode: Any = "overwrite") -> RemoteObject:
        """Writes the object in one request (mode: obstore's "overwrite", "create" or an
        {"e_tag": ...} precondition); returns its new version."""

        def write(client: Any) -> RemoteObject:
            result = self._obstore.put(client, name, data, mode=mode)
            return RemoteObject(name, len(data), result.get("e_tag"), result.get("version"))

        return self._call(name, "writing", write)

    def put_file(self, name: str, path: str) -> None:
        """Uploads a local file, in parts when large (obstore aborts a failed multipart upload)."""

        def upload(client: Any) -> None:
            with open(path, "rb") as source:
                self._obstore.put(client, name, source, chunk_size=8 << 20, max_concurrency=8)

        self._call(name, "uploading", upload)

    def delete(self, name: str) -> None:
        self._call(name, "deleting", lambda client: self._obstore.delete(client, name))

    def names(self) -> Iterator[str]:
        return (found.name for found in self.list())


# What each cloud's client reads from the environment (docs/remote.md, Set-up), for an error
# in its settings.
_AWS_HINT: Final = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (both, with "
                    "AWS_SESSION_TOKEN for temporary ones), and AWS_ENDPOINT_URL for an "
                    "S3-compatible server, or give the machine a role")
_AZURE_HINT: Final = ("set AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or "
                      "AZURE_STORAGE_SAS_TOKEN (or use a managed identity)")
_SETUP_HINTS: Final = {
    "s3": _AWS_HINT, "s3a": _AWS_HINT,
    "gs": "set GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS (a service account's "
          "key file)",
    "az": _AZURE_HINT, "azure": _AZURE_HINT, "abfs": _AZURE_HINT, "abfss": _AZURE_HINT,
}
_SETUP_HINT_OTHER: Final = "check the URL and the store's settings in the environment"


def _refuse_forked(url: str) -> None:
    """RemoteError in a process forked from one that had made requests (see _runtime_pid),
    before this one makes any. Records already in the cache are read without requests."""
    if _runtime_pid not in (-1, os.getpid()):
        raise RemoteError(
            f"cannot fetch from {url} in this process: it was forked from process "
            f"{_runtime_pid}, which had already used the object-store client, and that client "
            "does not survive fork (a request here would hang, and could crash the parent). "
            "Start worker processes with 'forkserver' or 'spawn' (torch: DataLoader(..., "
            "multiprocessing_context='forkserver'); multiprocessing.set_start_method), or fork "
            "before the dataset is opened"
        )


def _remote_object(meta: Any) -> RemoteObject:
    modified = meta.get("last_modified")
    return RemoteObject(str(meta["path"]), int(meta["size"]), meta.get("e_tag"),
                        meta.get("version"), modified.timestamp() if modified else 0.0)


# How object_store words an HTTP answer of 401 or 403 ("... non-2xx status code: 403 Forbidden")
# or 404 (a listing of a missing bucket), and the reason S3 and Azure give in its XML body
# (<Code>InvalidAccessKeyId</Code>).
_REFUSED_STATUS: Final = re.compile(r"status code: (401|403)\b[^:<]*")
_MISSING_STATUS: Final = re.compile(r"status code: 404\b[^:<]*")
_ERROR_CODE: Final = re.compile(r"<Code>(\w+)</Code>")
# fake-gcs-server's answer to a listing of a missing bucket (GCS's own is a 404).
_NO_BUCKET: Final = re.compile(r"status code: 500\b[^<]*<errorResponse><Error><Code>500</Code>"
                               r"<Message>(no bucket named [^<]+)</Message>")


def _answer(exc: BaseException, status_pattern: re.Pattern[str]) -> str:
    """The HTTP status and the store's reason in obstore's message ("HTTP 403 Forbidden,
    InvalidAccessKeyId"), else its first line."""
    text = str(exc)
    status = status_pattern.search(text)
    answer = f"HTTP {status.group(0).split(': ', 1)[1].strip()}" if status else _first_line(exc)
    code = _ERROR_CODE.search(text)
    return f"{answer}, {code.group(1)}" if code else answer


def _refused(what: str, url: str, exc: BaseException) -> PermissionError:
    """The error for a store that refused a request (401 or 403: at once, never retried)."""
    return PermissionError(
        f"{what} {url}: access refused by the store ({_answer(exc, _REFUSED_STATUS)}); check "
        "the credentials in the environment and that they may read (or write) this bucket or "
        "container"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["ObjectStore", "RemoteObject"]
