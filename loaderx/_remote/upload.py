"""Writing a dataset built on local disk to an object store, the manifest last.

The remote layout is a sharded dataset: `schema.msgpack`, the manifest `shards.msgpack` and one
`shard-NNNNNN/` folder per store (its meta.zr, sums.zr, dict.zr and chunk files; lock files
stay behind). A local single store becomes shard-000000. Readers only read the shards the
manifest lists (loaderx._remote.replica), so the manifest is the commit point: a reader sees
the dataset before a write or after it, never a mix, and a writer killed before the manifest
leaves the remote dataset as it was, with unlisted objects that the next writer removes.

Writers exclude each other with a lock object (`shards.writer.lock`) made by a conditional
create (If-None-Match); a lock older than its lease is taken over by a conditional update of
the lock's version (If-Match), so two writers cannot both take it. Under the lock the
manifest is read with its ETag and written back only if it is unchanged (If-Match), or created
only if absent: concurrent `append=True` jobs queue on the lock and each adds its shards after
the others'.

Replacing an existing remote dataset (overwrite=True) is refused: the manifest numbers shards
from shard-000000, so new shards would have to take the names of live ones, and a reader or a
killed writer could then see a mix (docs/decisions.md).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

import msgpack

from loaderx._os.urls import READ_ONLY_SCHEMES, parse
from loaderx._remote.object_store import ObjectStore, RemoteObject
from loaderx._store.layout import MANIFEST_FILE, TOP_LEVEL, shard_folder, shard_name, shard_number
from loaderx._store.manifest import Manifest, ShardEntry, parse_manifest, read_manifest
from loaderx._store.schema import SCHEMA_FILE, parse_schema, read_schema, require_same
from loaderx.errors import RemoteChangedError, StoreLockedError, UnsupportedURLError

WRITER_LOCK: Final = "shards.writer.lock"
LEASE_ENV: Final = "LOADERX_REMOTE_LOCK_LEASE_SECONDS"
LEASE_SECONDS_DEFAULT: Final = 900.0
WAIT_ENV: Final = "LOADERX_REMOTE_LOCK_WAIT_SECONDS"
WAIT_SECONDS_DEFAULT: Final = 600.0
_POLL_SECONDS: Final = 0.25
# A store's files that travel: everything but its lock files and hidden work in progress.
_STORE_FILES: Final = ("schema.msgpack", "meta.zr", "sums.zr", "dict.zr")


def _seconds(name: str, default: float) -> float:
    text = os.environ.get(name)
    try:
        return float(text) if text else default
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a number of seconds") from None


def open_destination(url: str) -> ObjectStore:
    """The object store a write goes to; refuses a read-only scheme (https://) and names the
    missing extra, before any work is done."""
    location = parse(url)
    if location.scheme in READ_ONLY_SCHEMES:
        raise UnsupportedURLError(
            f"{url}: a dataset at an {location.scheme}:// URL is read only (a web server takes "
            "no uploads); write to s3://, gs:// or az://"
        )
    return ObjectStore(location)


def refuse_existing(store: ObjectStore, append: bool, overwrite: bool) -> None:
    """FileExistsError (or the overwrite refusal) for a dataset already at the URL, checked
    before the dataset is built locally; checked again under the lock."""
    if append:
        return
    if _dataset_there(store):
        if overwrite:
            raise UnsupportedURLError(
                f"{store.location.url} holds a dataset and overwrite=True cannot replace a remote "
                "dataset atomically; write to a new URL (and point readers there), or remove "
                "the old objects first"
            )
        raise FileExistsError(
            f"{store.location.url} already holds a loaderx dataset; pass append=True to add "
            "records to it"
        )


def _dataset_there(store: ObjectStore) -> bool:
    """Whether readers see a dataset: its manifest, or the meta.zr of a single store uploaded
    as a folder. A schema.msgpack alone is not one: a writer uploads it just before the
    manifest, so a writer killed or failing between the two leaves it, and the URL must then
    take a new dataset as if that writer had never run (its upload overwrites the schema)."""
    for name in (MANIFEST_FILE, "meta.zr"):
        try:
            store.head(name)
            return True
        except FileNotFoundError:
            continue
    return False


@dataclass(frozen=True)
class _LocalStore:
    name: str  # as the local manifest names it ("." for a single store)
    folder: str
    records: int


def _store_length(folder: str) -> int:
    """A local store's record count, from its meta.zr header (docs/format.md)."""
    with open(os.path.join(folder, "meta.zr"), "rb") as meta:
        return int.from_bytes(meta.read(16)[12:16], "little")


def _local_stores(folder: str) -> list[_LocalStore]:
    manifest = read_manifest(folder)
    names = [TOP_LEVEL] if manifest is None else manifest.names
    return [_LocalStore(name, shard_folder(folder, name), _store_length(shard_folder(folder, name)))
            for name in names]


class _WriterLock:
    """The remote writer lock (module doc), held for a with block."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._etag: str | None = None
        self._body = json.dumps({
            "writer": f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
            "since": datetime.now(timezone.utc).isoformat(),
        }).encode()

    def __enter__(self) -> _WriterLock:
        lease = _seconds(LEASE_ENV, LEASE_SECONDS_DEFAULT)
        deadline = time.monotonic() + _seconds(WAIT_ENV, WAIT_SECONDS_DEFAULT)
        while True:
            try:
                self._etag = self._store.put(WRITER_LOCK, self._body, mode="create").etag
                return self
            except FileExistsError:
                pass
            if self._take_over_stale(lease):
                return self
            if time.monotonic() > deadline:
                raise StoreLockedError(
                    f"another writer holds {self._store.location.child(WRITER_LOCK)}; wait for "
                    f"it, or remove the lock if no writer runs (it expires after {lease:.0f} s)"
                )
            time.sleep(_POLL_SECONDS)

    def _take_over_stale(self, lease: float) -> bool:
        try:
            held = self._store.head(WRITER_LOCK)
        except FileNotFoundError:
            return False  # released meanwhile: the next create takes it
        age = time.time() - held.modified
        if age < lease or held.etag is None:
            return False
        try:
            self._etag = self._store.put(WRITER_LOCK, self._body, mode=held.unchanged()).etag
            return True
        except (RemoteChangedError, FileNotFoundError):
            return False  # another writer took it over first

    def __exit__(self, *_: object) -> None:
        try:
            held = self._store.head(WRITER_LOCK)
        except FileNotFoundError:
            return
        if held.etag == self._etag:  # still ours (nobody took it over as stale)
            self._store.delete(WRITER_LOCK)


def upload_dataset(local: str, store: ObjectStore, append: bool, overwrite: bool) -> None:
    """Publishes the dataset built at `local` under the store's URL (module doc)."""
    stores = _local_stores(local)
    schema = read_schema(local)
    with _WriterLock(store):
        refuse_existing(store, append, overwrite)
        manifest, found = _remote_manifest(store)
        if manifest is not None:
            remote_schema = parse_schema(store.get(SCHEMA_FILE, None), store.location.child(SCHEMA_FILE))
            require_same(store.location.url, remote_schema, schema)
        listed = [] if manifest is None else manifest.shards
        first = 0 if not listed else (shard_number(listed[-1].name) or 0) + 1
        _remove_unlisted(store, {entry.name for entry in listed})
        added: list[ShardEntry] = []
        for offset, local_store in enumerate(stores):
            name = shard_name(first + offset)
            _upload_store(store, local_store.folder, name)
            added.append(ShardEntry(name, local_store.records))
        if manifest is None:
            store.put(SCHEMA_FILE, _read(os.path.join(local, SCHEMA_FILE)))
        generation = 0 if manifest is None else manifest.generation + 1
        data = msgpack.packb(Manifest(listed + added, generation).to_dict(), use_bin_type=True)
        store.put(MANIFEST_FILE, data, mode="create" if found is None else found.unchanged())


def _remote_manifest(store: ObjectStore) -> tuple[Manifest | None, RemoteObject | None]:
    """The remote manifest and the version of it that was read (None when there is none yet);
    a single store uploaded as a folder (no manifest, a top-level meta.zr) becomes shard "." of
    a manifest written over it."""
    try:
        found = store.head(MANIFEST_FILE)
    except FileNotFoundError:
        found = None
    if found is not None:
        data = store.get(MANIFEST_FILE, found.etag)
        return parse_manifest(data, store.location.child(MANIFEST_FILE)), found
    try:
        meta = store.head("meta.zr")
    except FileNotFoundError:
        return None, None
    length = int.from_bytes(store.get_range("meta.zr", 12, 16, meta.etag), "little")
    return Manifest([ShardEntry(TOP_LEVEL, length)]), None


def _remove_unlisted(store: ObjectStore, listed: set[str]) -> None:
    """Objects of shard folders the manifest does not list: a killed writer's. Only a writer
    holding the lock may remove them (no other writer is uploading)."""
    for item in store.list():
        folder = item.name.split("/", 1)[0] if "/" in item.name else None
        if folder is not None and shard_number(folder) is not None and folder not in listed:
            store.delete(item.name)


def _upload_store(store: ObjectStore, folder: str, name: str) -> None:
    """One local store's files under `name/`: chunks first, the table last, so that even a
    reader that ignored the manifest would find no table pointing at missing chunks."""
    entries = sorted(os.listdir(folder))
    chunks = [entry for entry in entries if entry.endswith(".zr") and entry[:-3].isdigit()]
    for entry in chunks + [e for e in _STORE_FILES if e != "meta.zr"] + ["meta.zr"]:
        path = os.path.join(folder, entry)
        if os.path.isfile(path):
            store.put_file(f"{name}/{entry}", path)


def _read(path: str) -> bytes:
    with open(path, "rb") as source:
        return source.read()


__all__ = ["WRITER_LOCK", "RemoteObject", "open_destination", "refuse_existing",
           "upload_dataset"]
