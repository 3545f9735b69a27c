"""Writing a dataset built on local disk to an object store, the manifest last.

The remote layout is a sharded dataset: `schema.msgpack`, the manifest `shards.msgpack` and one
`shard-NNNNNN/` folder per store (its meta.zr, sums.zr, dict.zr and chunk files; lock files
stay behind). A local single store becomes shard-000000. Readers only read the shards the
manifest lists (loaderx._remote.replica), so the manifest is the commit point: a reader sees
the dataset before a write or after it, never a mix, and a writer killed before the manifest
leaves the remote dataset as it was, with unlisted objects that the next writer removes.

Writers exclude each other with a lock object (`shards.writer.lock`) made by a conditional
create (If-None-Match) and renewed while it is held; a lock not renewed for its lease is taken
over by a conditional update of the lock's version (If-Match), so two writers cannot both take
it. Under the lock the
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
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Final

import msgpack

from loaderx._os.event_flag import EventFlag
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.urls import READ_ONLY_SCHEMES, parse
from loaderx._remote.object_store import ObjectStore, RemoteObject
from loaderx._remote.settings import seconds_setting
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


def open_destination(url: str) -> ObjectStore:
    """The object store a write goes to; refuses a read-only scheme (https://), names the
    missing extra, and raises FileNotFoundError for a missing bucket or container, before any
    work is done."""
    location = parse(url)
    if location.scheme in READ_ONLY_SCHEMES:
        raise UnsupportedURLError(
            f"{url}: a dataset at an {location.scheme}:// URL is read only (a web server takes "
            "no uploads); write to s3://, gs:// or az://"
        )
    # The writer lock's settings, refused before anything is built or sent.
    seconds_setting(LEASE_ENV, LEASE_SECONDS_DEFAULT, zero_allowed=False)
    seconds_setting(WAIT_ENV, WAIT_SECONDS_DEFAULT, zero_allowed=True)
    store = ObjectStore(location)
    # A missing bucket (a typo) is refused now, not after the dataset was built on local disk
    # (the first write, the writer lock's, would be the first request to meet it).
    store.require_container()
    return store


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
    """The remote writer lock (module doc), held for a with block.

    While it is held a thread renews it (a conditional rewrite, every quarter of the lease), so
    that an upload longer than the lease keeps it: another writer takes over only a lock whose
    writer stopped renewing it (died). A writer that taking over would otherwise find mid-upload
    removes this one's unlisted objects and uploads its own under the same shard names, and a
    manifest then lists a mix of both. `held()` raises once the lock may have been lost: it is
    called before every object written and before the manifest."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._etag: str | None = None
        self._held: RemoteObject | None = None
        self._writer = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._lease = seconds_setting(LEASE_ENV, LEASE_SECONDS_DEFAULT, zero_allowed=False)
        self._renewed = 0.0  # time.monotonic() of the last write of the lock (before it was sent)
        self._lost: str | None = None
        self._guard = ForkSafeLock()  # one renewal at a time (the thread's or held()'s)
        self._stop = EventFlag()
        self._renewer: threading.Thread | None = None

    def _body(self) -> bytes:
        # Each write differs (renewed), so that each has a new ETag: a writer that read an old
        # one cannot take the lock over after a renewal (its If-Match fails).
        return json.dumps({"writer": self._writer,
                           "renewed": datetime.now(timezone.utc).isoformat()}).encode()

    def __enter__(self) -> _WriterLock:
        wait = seconds_setting(WAIT_ENV, WAIT_SECONDS_DEFAULT, zero_allowed=True)
        deadline = time.monotonic() + wait
        while True:
            sent = time.monotonic()
            try:
                self._took(self._store.put(WRITER_LOCK, self._body(), mode="create"), sent)
                break
            except FileExistsError:
                pass
            if self._take_over_stale(self._lease):
                break
            if time.monotonic() > deadline:
                raise StoreLockedError(
                    f"another writer holds {self._store.location.child(WRITER_LOCK)}; wait for "
                    f"it, or remove the lock if no writer runs (it expires after "
                    f"{self._lease:.0f} s)"
                )
            time.sleep(_POLL_SECONDS)
        self._renewer = threading.Thread(target=self._renew_until_stopped, daemon=True,
                                         name="loaderx-writer-lock")
        self._renewer.start()
        return self

    def _took(self, written: RemoteObject, sent: float) -> None:
        self._held, self._etag, self._renewed = written, written.etag, sent

    def _take_over_stale(self, lease: float) -> bool:
        try:
            held = self._store.head(WRITER_LOCK)
        except FileNotFoundError:
            return False  # released meanwhile: the next create takes it
        age = time.time() - held.modified
        if age < lease or held.etag is None:
            return False
        sent = time.monotonic()
        try:
            self._took(self._store.put(WRITER_LOCK, self._body(), mode=held.unchanged()), sent)
            return True
        except (RemoteChangedError, FileNotFoundError):
            return False  # another writer took it over first (or it renewed it)

    def _renew(self) -> None:
        """Rewrites the lock if it is still ours (If-Match); notes it lost otherwise."""
        with self._guard:
            if self._lost is not None or self._held is None:
                return
            sent = time.monotonic()
            try:
                written = self._store.put(WRITER_LOCK, self._body(), mode=self._held.unchanged())
            except (RemoteChangedError, FileNotFoundError):
                self._lost = (f"{self._store.location.child(WRITER_LOCK)} was taken over by "
                              "another writer (this one did not renew it within its lease)")
                return
            self._took(written, sent)

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self._lease / 4):
            try:
                self._renew()
            except Exception:
                pass  # a failed request (server down): held() checks the lease before writes

    def held(self) -> None:
        """Raises StoreLockedError unless the lock is surely still ours: renewed within half
        its lease (renewed now when it was not, e.g. the process was paused)."""
        if time.monotonic() - self._renewed > self._lease / 2:
            self._renew()
        if self._lost is None and time.monotonic() - self._renewed > self._lease / 2:
            self._lost = f"{self._store.location.child(WRITER_LOCK)} could not be renewed"
        if self._lost is not None:
            raise StoreLockedError(f"this writer lost its lock: {self._lost}; nothing was "
                                   "published, write again")

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self._lost is not None:
            return  # another writer's now
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
    with _WriterLock(store) as lock:
        refuse_existing(store, append, overwrite)
        manifest, found = _remote_manifest(store)
        if manifest is not None:
            remote_schema = parse_schema(store.get(SCHEMA_FILE, None), store.location.child(SCHEMA_FILE))
            require_same(store.location.url, remote_schema, schema)
        listed = [] if manifest is None else manifest.shards
        first = 0 if not listed else (shard_number(listed[-1].name) or 0) + 1
        _remove_unlisted(store, {entry.name for entry in listed}, lock)
        added: list[ShardEntry] = []
        for offset, local_store in enumerate(stores):
            name = shard_name(first + offset)
            _upload_store(store, local_store.folder, name, lock)
            added.append(ShardEntry(name, local_store.records))
        lock.held()
        if manifest is None:
            store.put(SCHEMA_FILE, _read(os.path.join(local, SCHEMA_FILE)))
        generation = 0 if manifest is None else manifest.generation + 1
        data = msgpack.packb(Manifest(listed + added, generation).to_dict(), use_bin_type=True)
        lock.held()
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


def _remove_unlisted(store: ObjectStore, listed: set[str], lock: _WriterLock) -> None:
    """Objects of shard folders the manifest does not list: a killed writer's. Only a writer
    holding the lock may remove them (no other writer is uploading)."""
    for item in store.list():
        folder = item.name.split("/", 1)[0] if "/" in item.name else None
        if folder is not None and shard_number(folder) is not None and folder not in listed:
            lock.held()
            store.delete(item.name)


def _upload_store(store: ObjectStore, folder: str, name: str, lock: _WriterLock) -> None:
    """One local store's files under `name/`: chunks first, the table last, so that even a
    reader that ignored the manifest would find no table pointing at missing chunks."""
    entries = sorted(os.listdir(folder))
    chunks = [entry for entry in entries if entry.endswith(".zr") and entry[:-3].isdigit()]
    for entry in chunks + [e for e in _STORE_FILES if e != "meta.zr"] + ["meta.zr"]:
        path = os.path.join(folder, entry)
        if os.path.isfile(path):
            lock.held()
            store.put_file(f"{name}/{entry}", path)


def _read(path: str) -> bytes:
    with open(path, "rb") as source:
        return source.read()


__all__ = ["WRITER_LOCK", "RemoteObject", "open_destination", "refuse_existing",
           "upload_dataset"]
