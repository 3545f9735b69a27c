"""A local replica of a remote dataset: its metadata copied whole, its chunks as sparse files.

The replica is an ordinary dataset folder, so the store opens it read-only and gathers from it
with the same native code (and speed) as any local dataset: a warm cache is a local dataset.
Metadata (`schema.msgpack`, `shards.msgpack`, `meta.zr`, `sums.zr`, `dict.zr`) is small and
needed by every read, so it is downloaded whole when the replica is made and checked by the
store's own open. A chunk file is made at its remote size with no blocks: records are fetched
into it by loaderx._remote.fetcher, which alone decides (under its locks) when a record's bytes
are there; the rest of the file reads as zeros, and no reader is ever let near them.

Cache folder layout (one per dataset URL, shared by every process on the host):

    <cache_dir>/<hash of the URL>/
        url                  the URL, for people looking at the folder
        setup.lock           held while a replica is checked or made
        gen-<listing hash>/  one version of the remote dataset (another after it changed)
            data/            the replica: a dataset folder
            state/           which records are present (loaderx._remote.fetcher)
            objects.msgpack  every object's name, size and ETag as listed when it was made
            in-use.lock      held shared by every process that has this version open

A replica is built in a hidden temporary folder and renamed into place, so a process killed
while making one leaves nothing another process would trust. A new version takes over the
chunk files and record presence an older version nobody has open holds for unchanged objects
(version_reuse.py), and that version is removed; any other version nobody has open is removed
when a newer one is made.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from typing import Any, Final

from loaderx._os.lock_descriptors import close_descriptor, close_when_dropped, open_descriptor
from loaderx._os.urls import READ_ONLY_SCHEMES
from loaderx._remote.object_store import ObjectStore, RemoteObject
from loaderx._remote.objects_file import OBJECTS_FILE, objects_bytes, read_objects
from loaderx._remote.record_map import SUMS_FILE
from loaderx._remote.version_reuse import Donor, take_donor
from loaderx._store.layout import DELETE_JOURNAL_FILE, MANIFEST_FILE, META_FILE, TOP_LEVEL
from loaderx._store.manifest import parse_manifest
from loaderx._store.schema import SCHEMA_FILE
from loaderx.errors import CorruptStoreError, RemoteChangedError

# Files every read needs, downloaded whole (at any depth: a sharded dataset has one set per shard).
METADATA_NAMES: Final = frozenset(
    {SCHEMA_FILE, MANIFEST_FILE, META_FILE, SUMS_FILE, "dict.zr", "redo.zr", DELETE_JOURNAL_FILE}
)
_CHUNK_NAME: Final = re.compile(r"[0-9]+\.zr")
CACHE_DIR_ENV: Final = "LOADERX_CACHE_DIR"
_DATA: Final = "data"
_STATE: Final = "state"
_OBJECTS: Final = OBJECTS_FILE
_IN_USE: Final = "in-use.lock"
_GEN_PREFIX: Final = "gen-"
# How many times an open lists the dataset again when it changed while it was being opened.
_OPEN_ATTEMPTS: Final = 5
# meta.zr's header: magic, version, tail chunk (u16 at 6), tail offset, length (docs/format.md).
_META_HEADER: Final = 16


def default_cache_dir() -> str:
    """$LOADERX_CACHE_DIR, else the user's cache folder ($XDG_CACHE_HOME or ~/.cache)/loaderx."""
    chosen = os.environ.get(CACHE_DIR_ENV)
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "loaderx")


def _is_dataset_file(name: str) -> bool:
    parts = name.split("/")
    if any(part.startswith(".") or part == "" for part in parts):
        return False  # work in progress of a writer (staging, temporaries)
    return parts[-1] in METADATA_NAMES or _CHUNK_NAME.fullmatch(parts[-1]) is not None


def _in_shards(name: str, shards: set[str] | None) -> bool:
    """Whether `name` belongs to the dataset: top-level files, or a shard the manifest lists
    (other folders are orphans a killed writer left; `loaderx verify` reports them)."""
    if "/" not in name:
        return True
    return shards is not None and name.split("/", 1)[0] in shards


@dataclass(frozen=True)
class Listing:
    """The objects that make up one version of a remote dataset."""

    metadata: list[RemoteObject]
    chunks: list[RemoteObject]
    key: str
    # Objects in shard folders the manifest does not list: a killed writer's uploads, which
    # readers ignore and the next writer removes (loaderx._remote.upload).
    orphans: list[str]
    # The manifest's bytes as read for the listing (None without one): the replica keeps these
    # rather than reading it again, when a writer may have replaced it since.
    manifest: bytes | None = None


def _head(store: ObjectStore, name: str) -> RemoteObject | None:
    try:
        return store.head(name)
    except FileNotFoundError:
        return None


def _probe(store: ObjectStore) -> list[RemoteObject]:
    """The dataset's files found from its own metadata: a web server (https://) cannot be
    listed. The manifest names the shards; each store's meta.zr header names its last chunk."""
    found = [item for item in (_head(store, "schema.msgpack"), _head(store, MANIFEST_FILE))
             if item is not None]
    folders = [TOP_LEVEL]
    manifest = next((item for item in found if item.name == MANIFEST_FILE), None)
    if manifest is not None:
        parsed = parse_manifest(store.get(MANIFEST_FILE, manifest.etag),
                                store.location.child(MANIFEST_FILE))
        folders = parsed.names
    for folder in folders:
        prefix = "" if folder == TOP_LEVEL else f"{folder}/"
        meta = _head(store, f"{prefix}meta.zr")
        if meta is None:
            continue  # the caller reports a dataset without its store
        found.append(meta)
        beside = ("sums.zr", "dict.zr", "redo.zr") + (("schema.msgpack",) if prefix else ())
        found += [item for name in beside if (item := _head(store, prefix + name)) is not None]
        header = store.get_range(f"{prefix}meta.zr", 0, _META_HEADER, meta.etag)
        last_chunk = int.from_bytes(header[6:8], "little")
        for chunk in range(last_chunk + 1):
            item = _head(store, f"{prefix}{chunk}.zr")
            if item is not None:  # an empty tail chunk may not exist yet
                found.append(item)
    return found


def list_dataset(store: ObjectStore) -> Listing:
    """The dataset's objects (orphans and lock files left out) and a key naming this version."""
    listed = _probe(store) if store.location.scheme in READ_ONLY_SCHEMES else store.list()
    found = [found for found in listed if _is_dataset_file(found.name)]
    by_name = {found.name: found for found in found}
    top = {name for name in by_name if "/" not in name}
    if "schema.msgpack" not in top and "meta.zr" not in top:
        raise FileNotFoundError(
            f"no loaderx dataset at {store.location.url} (no schema.msgpack or meta.zr there)"
        )
    shards: set[str] | None = None
    data: bytes | None = None
    if MANIFEST_FILE in by_name:
        manifest = by_name[MANIFEST_FILE]
        data = store.get(MANIFEST_FILE, manifest.etag)
        parsed = parse_manifest(data, store.location.child(MANIFEST_FILE))
        shards = {name for name in parsed.names if name != TOP_LEVEL}
    kept = sorted((item for item in found if _in_shards(item.name, shards)), key=lambda o: o.name)
    orphans = sorted(item.name for item in found if not _in_shards(item.name, shards))
    digest = hashlib.sha256()
    for item in kept:
        digest.update(f"{item.name}\t{item.size}\t{item.etag}\t{item.version}\n".encode())
    metadata = [item for item in kept if item.name.split("/")[-1] in METADATA_NAMES]
    chunks = [item for item in kept if item.name.split("/")[-1] not in METADATA_NAMES]
    return Listing(metadata, chunks, digest.hexdigest()[:24], orphans, data)


class Replica:
    """One version of a remote dataset in the cache, held open (its in-use lock) until close."""

    def __init__(self, folder: str, listing: Listing, lock_fd: int) -> None:
        self.folder = folder
        self.data = os.path.join(folder, _DATA)
        self.state = os.path.join(folder, _STATE)
        self.key = listing.key  # the version: its listing's hash, the folder's name
        self.chunks: dict[str, RemoteObject] = {item.name: item for item in listing.chunks}
        # The dataset's size in the object store (what a full download moves).
        self.remote_bytes = sum(item.size for item in listing.metadata + listing.chunks)
        self.orphans = listing.orphans
        self._release = close_when_dropped(self, lock_fd)  # the in-use lock

    def close(self) -> None:
        self._release()


class _Flock:
    """An exclusive flock on a file for a with block."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> _Flock:
        self._fd = open_descriptor(self._path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            close_descriptor(self._fd)
            raise
        return self

    def __exit__(self, *_: Any) -> None:
        close_descriptor(self._fd)


def open_replica(store: ObjectStore, cache_dir: str, version: str | None = None) -> Replica:
    """The cached replica of the dataset's current version, made first if needed; or, given a
    version (Replica.key) that the cache holds finished and whole, that one, without a request
    (a worker process reopening the version its consumer has open). The caller compares
    Replica.key with the version it asked for: another means the cache no longer had it."""
    url = store.location.url
    base = os.path.join(cache_dir, hashlib.sha256(url.encode()).hexdigest()[:24])
    os.makedirs(base, exist_ok=True)
    with _Flock(os.path.join(base, "setup.lock")):
        _write(os.path.join(base, "url"), (url + "\n").encode())
        cached = None if version is None else _cached_version(base, version)
        listing, folder = cached if cached is not None else _listed_and_built(store, base)
        lock_fd = open_descriptor(os.path.join(folder, _IN_USE), os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_SH)
            _remove_unused_versions(base, keep=folder)
        except BaseException:
            close_descriptor(lock_fd)
            raise
    return Replica(folder, listing, lock_fd)


def _listed_and_built(store: ObjectStore, base: str) -> tuple[Listing, str]:
    """The dataset's current version listed, and its replica folder (built if new). A writer
    that commits between the listing and the manifest's download (with the listing's ETag)
    makes it RemoteChangedError: the dataset is then listed again, a few times, rather than
    failing an open that asked for no version in particular. (The build keeps the manifest
    read for the listing: read again after the other metadata, it failed most opens made
    while appends followed each other.)"""
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            listing = list_dataset(store)
            folder = os.path.join(base, _GEN_PREFIX + listing.key)
            if os.path.exists(os.path.join(folder, _OBJECTS)) and not _intact(folder, listing):
                _discard_damaged(folder, store.location.url)
            if not os.path.exists(os.path.join(folder, _OBJECTS)):
                _build(store, listing, folder)
            return listing, folder
        except RemoteChangedError:
            if attempt == _OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _cached_version(base: str, key: str) -> tuple[Listing, str] | None:
    """The listing a finished, whole replica of version key was made from (its objects file),
    and its folder; None when the cache has no such replica. Without a listing its orphans
    are not known: none are reported (a dataset opened by its URL reports them)."""
    folder = os.path.join(base, _GEN_PREFIX + key)
    items = read_objects(folder)
    if items is None:
        return None
    metadata = [item for item in items if item.name.split("/")[-1] in METADATA_NAMES]
    chunks = [item for item in items if item.name.split("/")[-1] not in METADATA_NAMES]
    listing = Listing(metadata, chunks, key, [])
    return (listing, folder) if _intact(folder, listing) else None


def _intact(folder: str, listing: Listing) -> bool:
    """Whether a finished replica still has its state folder and every file at the size the
    object had (a stat each). A file truncated or removed since (by hand, a disk tool) left a
    cache that failed every later open with CorruptStoreError or FileNotFoundError; such a
    replica is made again. (Bytes changed in place are not looked for: that costs a read.)"""
    if not os.path.isdir(os.path.join(folder, _STATE)):
        return False
    data = os.path.join(folder, _DATA)
    for item in listing.metadata + listing.chunks:
        try:
            if os.stat(os.path.join(data, *item.name.split("/"))).st_size != item.size:
                return False
        except FileNotFoundError:
            return False
    return True


def _discard_damaged(folder: str, url: str) -> None:
    """Removes a damaged replica (the caller holds setup.lock), unless a process has it open."""
    fd = open_descriptor(os.path.join(folder, _IN_USE), os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CorruptStoreError(
                f"the cache's copy of {url} at {folder} is damaged (a file is missing or has the "
                "wrong size) and another process has it open; close that process, and the next "
                "open makes the copy again"
            ) from None
        os.remove(os.path.join(folder, _OBJECTS))  # first: no process trusts what remains
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        close_descriptor(fd)


def _build(store: ObjectStore, listing: Listing, folder: str) -> None:
    """Downloads the metadata and lays out the chunks in a temporary folder, then renames it
    into place (the objects file, written last, marks a finished replica). An object that an
    older version nobody has open already holds unchanged is taken over from it: a metadata
    file as it is, a chunk with the presence of its records (version_reuse.py). The other
    metadata is downloaded, the other chunks start sparse."""
    building = f"{folder}.building-{uuid.uuid4().hex[:8]}"
    shutil.rmtree(folder, ignore_errors=True)  # an unfinished one (no objects file)
    data = os.path.join(building, _DATA)
    donor: Donor | None = None
    try:
        os.makedirs(os.path.join(building, _STATE))
        os.makedirs(data)
        donor = take_donor(os.path.dirname(folder), folder, listing.metadata + listing.chunks)
        for item in listing.metadata:
            known = listing.manifest if item.name == MANIFEST_FILE else None
            path = os.path.join(data, *item.name.split("/"))
            if known is None and donor is not None and donor.gives(item):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                if donor.link(item, path):
                    continue  # an unchanged shard's tables: not downloaded again
            _write(path, known if known is not None else store.get(item.name, item.etag))
        for item in listing.chunks:
            path = os.path.join(data, *item.name.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if donor is not None and donor.gives(item) and donor.link(item, path):
                continue
            with open(path, "wb") as chunk:
                chunk.truncate(item.size)  # sparse: no block until a record is fetched
        if donor is not None:
            for number, present in enumerate(donor.presence(data)):
                if present.any():
                    _write(os.path.join(building, _STATE, f"{number}.present"), present.tobytes())
        _write(os.path.join(building, _OBJECTS), objects_bytes(listing.metadata + listing.chunks))
        if donor is not None:
            donor.retire()  # it shares files with this version from now on: never trusted again
        os.rename(building, folder)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        if donor is not None:
            donor.release()
        raise
    if donor is not None:
        donor.remove()


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "wb") as target:
            target.write(data)
    except OSError as exc:
        # A full disk said only "No space left on device": name the cache file.
        raise OSError(exc.errno, f"{exc.strerror or exc} (writing into the cache)", path) from exc


def _remove_unused_versions(base: str, keep: str) -> None:
    """Removes other versions no process has open (their in-use lock is free), and builds a
    killed process left unfinished."""
    for name in os.listdir(base):
        path = os.path.join(base, name)
        if path == keep or not name.startswith(_GEN_PREFIX):
            continue
        if ".building-" in name:
            shutil.rmtree(path, ignore_errors=True)  # setup.lock is ours: nobody builds it
            continue
        lock = os.path.join(path, _IN_USE)
        try:
            fd = open_descriptor(lock, os.O_RDWR)
        except FileNotFoundError:
            shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            close_descriptor(fd)
            continue  # another process reads that version
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            close_descriptor(fd)


__all__ = ["CACHE_DIR_ENV", "Listing", "Replica", "default_cache_dir", "list_dataset",
           "open_replica"]
