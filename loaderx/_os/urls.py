"""Telling a dataset URL from a local path, and what each scheme may do.

A path with a scheme (`s3://bucket/prefix`) names a dataset in an object store. `file://` URLs
are local paths in another spelling and are turned into plain paths here, so every layer below
keeps seeing folders. Any other scheme is refused by name: a typo must not become a local
folder called `s3:` (what open() would otherwise make of it).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Final

from loaderx.errors import UnsupportedURLError

# The object-store schemes obstore serves, with the cloud each belongs to. abfs(s) and az are
# the same Azure store; http(s) is read-only (a web server takes no uploads).
OBJECT_SCHEMES: Final = {
    "s3": "Amazon S3 or an S3-compatible server",
    "s3a": "Amazon S3 or an S3-compatible server",
    "gs": "Google Cloud Storage",
    "az": "Azure Blob Storage",
    "azure": "Azure Blob Storage",
    "abfs": "Azure Blob Storage",
    "abfss": "Azure Blob Storage",
    "https": "an HTTP server (read only)",
    "http": "an HTTP server (read only)",
}
READ_ONLY_SCHEMES: Final = frozenset({"http", "https"})

# A scheme as RFC 3986 spells it, followed by "://". One letter is a Windows drive ("C:/"),
# never a scheme.
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")
# A first path segment that is a scheme and its colon with the "//" gone: "s3:/bucket/ds" is
# what str(Path("s3://bucket/ds")) gives, since pathlib collapses the double slash.
_LOST_SLASHES: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):(?!//)")


@dataclass(frozen=True)
class DatasetURL:
    """A dataset in an object store: the URL as given (without a trailing slash), its scheme,
    and the store's root (`s3://bucket`) and the dataset's key prefix inside it."""

    url: str
    scheme: str
    root: str
    prefix: str

    def key(self, name: str) -> str:
        """The object key of `name` (a path relative to the dataset, with "/" separators)."""
        return f"{self.prefix}/{name}" if self.prefix else name

    def child(self, name: str) -> str:
        """The URL of `name` inside the dataset, for messages."""
        return f"{self.url}/{name}"


def scheme_of(path: str) -> str | None:
    """The lower-case scheme of a URL-looking path, or None for a plain path."""
    found = _SCHEME.match(path)
    return found.group(1).lower() if found else None


def is_url(path: object) -> bool:
    """Whether path (str, bytes or PathLike) is an object-store URL (file:// is not: it is a
    local path). A plain path never pays more than this one regular expression."""
    if not isinstance(path, str):
        return False
    scheme = scheme_of(path)
    return scheme is not None and scheme != "file"


def refuse_lost_slashes(path: str) -> str:
    """path unchanged, unless its first segment is an object store's scheme and a colon not
    followed by "//" ("s3:/bucket/ds", "gs:bucket/ds"): UnsupportedURLError then, since taken
    as a local path it would make a folder named "s3:" in the working directory, the typo this
    module exists to refuse."""
    found = _LOST_SLASHES.match(path)
    if found is None or found.group(1).lower() not in OBJECT_SCHEMES:
        return path
    scheme = found.group(1).lower()
    rest = path[found.end():].lstrip("/")
    raise UnsupportedURLError(
        f"{path!r} looks like the URL {scheme}://{rest} with '//' lost (pathlib's Path "
        f"collapses it: pass the URL as a str); a local folder named {found.group(0)!r} "
        "is not made"
    )


def local_path(path: str) -> str:
    """A file:// URL as a plain path; any other path unchanged. Refuses a file:// URL naming
    another host, which would be a network path this machine cannot open."""
    if scheme_of(path) != "file":
        return path
    parts = urllib.parse.urlsplit(path)
    if parts.netloc not in ("", "localhost"):
        raise UnsupportedURLError(
            f"{path!r} names host {parts.netloc!r}; a file:// URL must name this machine "
            "(file:///path or file://localhost/path)"
        )
    return urllib.parse.unquote(parts.path) or os.sep


def parse(url: str) -> DatasetURL:
    """url split into the store's root and the dataset's prefix; UnsupportedURLError for an
    unknown scheme or a URL that names no bucket or host."""
    scheme = scheme_of(url)
    if scheme is None or scheme not in OBJECT_SCHEMES:
        known = ", ".join(f"{name}://" for name in sorted(OBJECT_SCHEMES))
        raise UnsupportedURLError(
            f"{url!r}: unknown scheme {scheme!r}; loaderx reads datasets from {known} and "
            "file:// (or a plain path)"
        )
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    if not parts.netloc:
        raise UnsupportedURLError(f"{url!r} names no bucket or host")
    if parts.query or parts.fragment:
        raise UnsupportedURLError(
            f"{url!r} has a query or fragment; give the dataset's URL alone (credentials and "
            "endpoints come from the environment, see docs/remote.md)"
        )
    # Segments the client cannot take as written: it resolves "." and ".." (s3://b/a/../c
    # would read and write s3://b/c), and refuses an empty one ("a//c") only at its first
    # request. The one slash after the host and trailing slashes are not segments.
    segments = parts.path[1:].split("/") if parts.path else []
    if any(urllib.parse.unquote(segment) in ("", ".", "..") for segment in segments):
        raise UnsupportedURLError(
            f"{url!r} has an empty, '.' or '..' segment in its path; name the dataset's prefix "
            "as its object keys spell it (s3://bucket/a/b, no '//', './' or '../')"
        )
    prefix = urllib.parse.unquote(parts.path).strip("/")
    # The store's root is the bucket (or the server); the dataset lies under the URL's path.
    return DatasetURL(url.rstrip("/"), scheme, f"{scheme}://{parts.netloc}", prefix)


def refuse_url(path: object, operation: str, instead: str = "") -> None:
    """Raises UnsupportedURLError when `operation` was handed an object-store URL it cannot take
    (before anything is created: open() would make a local folder named "s3:")."""
    if is_url(path):
        assert isinstance(path, str)
        hint = f"; {instead}" if instead else ""
        raise UnsupportedURLError(
            f"{operation} works on local folders and cannot take the URL {path!r}{hint}"
        )


__all__ = [
    "OBJECT_SCHEMES",
    "READ_ONLY_SCHEMES",
    "DatasetURL",
    "is_url",
    "local_path",
    "parse",
    "refuse_lost_slashes",
    "refuse_url",
    "scheme_of",
]
