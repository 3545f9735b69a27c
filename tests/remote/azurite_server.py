"""A real Azure Blob Storage server for the tests: Azurite (Microsoft's emulator) as a child process.

Azurite's blob service runs on 127.0.0.1 with in-memory persistence, so a stopped server leaves
nothing behind. obstore reaches it as a user would reach Azure: through the standard variables
(`AZURE_STORAGE_USE_EMULATOR`, `AZURITE_BLOB_STORAGE_URL`, the account name and key). obstore
cannot create containers, so the kit does that one call itself, signed with the emulator's
well-known shared key (the only request the tests sign by hand; every dataset request goes
through obstore).

Azurite is an npm package; `python3 build.py test` installs the pinned version under .cache/
(see AZURITE_VERSION in build.py). LOADERX_AZURITE_BLOB names another `azurite-blob` to run.
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import hashlib
import hmac
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import obstore
from obstore.store import AzureStore

from .server_process import HOST, ServerError, ServerProcess, free_port, without_variables

if TYPE_CHECKING:
    from obstore.store import ClientConfig

ROOT: Final = Path(__file__).resolve().parents[2]
AZURITE_ENV: Final = "LOADERX_AZURITE_BLOB"
# Where build.py installs the pinned Azurite (a git-ignored folder of the checkout).
AZURITE_INSTALLED: Final = ROOT / ".cache" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's one built-in account: public, documented development credentials, not a secret.
ACCOUNT_NAME: Final = "devstoreaccount1"
ACCOUNT_KEY: Final = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/"
                      "K1SZFPTOtr/KBHBeksoGMGw==")
# The REST version the kit's container calls speak (Azurite also runs with its check skipped).
API_VERSION: Final = "2021-08-06"
# The version of the account SAS tokens the kit signs (its string-to-sign has no encryption
# scope line; 2020-12-06 and later add one).
SAS_VERSION: Final = "2019-12-12"
# In-memory blobs would otherwise be allowed half of the machine's memory.
MEMORY_LIMIT_MB: Final = 512


def azurite_program() -> str | None:
    """The `azurite-blob` to run: LOADERX_AZURITE_BLOB, else build.py's install, else None."""
    named = os.environ.get(AZURITE_ENV)
    if named:
        return named
    return str(AZURITE_INSTALLED) if AZURITE_INSTALLED.exists() else None


def azure_store(endpoint: str, container: str, account_key: str = ACCOUNT_KEY) -> AzureStore:
    """An obstore AzureStore for `container` on the emulator at `endpoint` (given as any
    endpoint, with the account in its path: emulator mode would read the address from the
    environment instead)."""
    client: ClientConfig = {"allow_http": True}
    return AzureStore(container, account_name=ACCOUNT_NAME, account_key=account_key,
                      endpoint=f"{endpoint}/{ACCOUNT_NAME}", client_options=client)


def account_sas(permissions: str) -> str:
    """An account SAS token (the query string, no "?") for the emulator's blob service that
    grants only `permissions` ("r" read, "l" list, "w" write, ...) for an hour: credentials
    that are valid but may not do everything. Signed with the account key, as Azure's
    "Create an account SAS" describes: an HMAC-SHA256 over the account name and the token's
    fields, one a line."""
    expiry = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
              ).strftime("%Y-%m-%dT%H:%M:%SZ")
    fields = {"sv": SAS_VERSION, "ss": "b", "srt": "sco", "sp": permissions, "se": expiry,
              "spr": "https,http"}
    # Account, permissions, services, resource types, start, expiry, IP, protocol, version.
    text = "\n".join([ACCOUNT_NAME, permissions, "b", "sco", "", expiry, "", "https,http",
                      SAS_VERSION, ""])
    mac = hmac.new(base64.b64decode(ACCOUNT_KEY), text.encode(), hashlib.sha256).digest()
    return urllib.parse.urlencode({**fields, "sig": base64.b64encode(mac).decode()})


class AzuriteServer(ServerProcess):
    """Azurite's blob service on 127.0.0.1 at a free port, started by `start()` and stopped by
    `stop()` (`close()` also removes its log and work folder); a context manager that closes it.
    Its endpoint is the blob service's address (the account is the URL's first path segment)."""

    label = "Azurite"

    def __init__(self, program: str) -> None:
        self.program = program
        self.work_dir = Path(tempfile.mkdtemp(prefix="loaderx-azurite-"))
        super().__init__(free_port(), self.work_dir / "azurite.log")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def create_container(self, container: str) -> None:
        self._container_request("PUT", container)

    def delete_container(self, container: str) -> None:
        """Deletes the container and every blob in it."""
        self._container_request("DELETE", container)

    def upload_tree(self, folder: Path | str, container: str, prefix: str) -> list[str]:
        """Uploads every file under `folder` to az://container/prefix/<relative path>; returns
        the keys in sorted order."""
        root = Path(folder)
        store = azure_store(self.endpoint, container)
        keys = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}".lstrip("/")
            obstore.put(store, key, path.read_bytes(), use_multipart=False)
            keys.append(key)
        return keys

    def objects(self, container: str) -> dict[str, str | None]:
        """Every blob of the container with its ETag."""
        store = azure_store(self.endpoint, container)
        return {meta["path"]: meta["e_tag"] for page in obstore.list(store) for meta in page}

    def _container_request(self, method: str, container: str) -> None:
        """One container call, signed with the account's shared key (Azure's "SharedKey"
        scheme: an HMAC-SHA256 over the verb, the standard headers, the x-ms-* headers and the
        resource; Azurite's URLs are path-style, so the resource names the account twice)."""
        content_type = "application/octet-stream" if method == "PUT" else ""
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": API_VERSION}
        signed_headers = "".join(f"{name}:{value}\n" for name, value in sorted(headers.items()))
        resource = f"/{ACCOUNT_NAME}/{ACCOUNT_NAME}/{container}\nrestype:container"
        # Verb, then 11 standard headers of which only Content-Type is set.
        text = "\n".join([method, "", "", "", "", content_type, "", "", "", "", "", ""])
        text += "\n" + signed_headers + resource
        mac = hmac.new(base64.b64decode(ACCOUNT_KEY), text.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {ACCOUNT_NAME}:{base64.b64encode(mac).decode()}"
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(
            f"{self.endpoint}/{ACCOUNT_NAME}/{container}?restype=container", method=method,
            headers=headers, data=b"" if method == "PUT" else None)
        try:
            with urllib.request.urlopen(request, timeout=30) as reply:
                reply.read()
        except urllib.error.HTTPError as exc:
            raise ServerError(f"{method} container {container!r} on Azurite: {exc.code} "
                              f"{exc.reason}") from None

    def _command(self) -> Sequence[str]:
        # In-memory persistence writes nothing; the work folder (the cwd) catches anything
        # Azurite writes anyway. Telemetry off: a test never reports to anyone.
        return [self.program, "--blobHost", HOST, "--blobPort", str(self.port),
                "--inMemoryPersistence", "--extentMemoryLimit", str(MEMORY_LIMIT_MB),
                "--disableTelemetry", "--skipApiVersionCheck", "--silent"]

    def _environment(self) -> Mapping[str, str]:
        return without_variables(("AZURE_", "AZURITE_"))

    def _work_dir(self) -> Path | None:
        return self.work_dir

    def _answers(self) -> bool:
        """Whether the blob service answers HTTP (an unsigned request: it refuses it, 403)."""
        try:
            with urllib.request.urlopen(f"{self.endpoint}/{ACCOUNT_NAME}?comp=list", timeout=1.0):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False
