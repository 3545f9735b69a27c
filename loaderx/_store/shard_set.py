"""ShardSet: a sharded dataset's open shards, the view over them, and catching up with its manifest.

The appender (loaderx._store.shard_append) and the deleter (loaderx._store.shard_delete) change
the dataset through it; ShardedStore (loaderx._store.sharded_store) reads through its view.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Final, TypeVar

from loaderx._native.library import ViewStaleError
from loaderx._os import descriptors
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.paths import is_file
from loaderx._store.schema import SCHEMA_FILE, Schema, differences, has_schema, read_schema
from loaderx._store.layout import MANIFEST_FILE, META_FILE, TOP_LEVEL, manifest_path, shard_folder
from loaderx._store.manifest import Manifest, ShardEntry, read_manifest
from loaderx._store.shard_commit import settle_pending
from loaderx._store.view import View
from loaderx._store.zrecord import Zrecord
from loaderx.errors import ManifestError, SchemaError

ManifestSignature = tuple[int, int, int, bytes]
# The manifest's first bytes, its format, version and generation fields (see manifest_signature).
_SIGNATURE_BYTES: Final = 64

_T = TypeVar("_T")


def manifest_signature(folder: str) -> ManifestSignature | None:
    """What identifies the manifest's current version cheaply: its inode, size and mtime, and
    its first bytes, which hold its generation (written before the shard list, and one higher
    on every write). The stat alone is not enough: a replaced manifest's freed inode is often
    the next one's, its size the same, and its mtime equal within the kernel's coarse clock."""
    try:
        fd = descriptors.os_open(manifest_path(folder), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        found = os.fstat(fd)
        # A fresh descriptor reads from the start. A folder in the manifest's place reads as
        # nothing here; read_manifest refuses it, naming it.
        head = os.read(fd, _SIGNATURE_BYTES) if stat.S_ISREG(found.st_mode) else b""
    finally:
        os.close(fd)
    return (found.st_ino, found.st_mtime_ns, found.st_size, head)


def required_manifest(folder: str) -> Manifest:
    """The dataset's manifest; ManifestError when it has none."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ManifestError(f"{folder!r} has no {MANIFEST_FILE}")
    return manifest


class ShardSet:
    """The shards listed by a dataset's manifest, in order, open, with one view over them."""

    path: str
    schema: Schema
    readonly: bool
    # Which records gathers check against their checksum, for every shard (see Zrecord).
    verify_reads: bool | None
    entries: list[ShardEntry]
    stores: list[Zrecord]
    # The view over every shard. A rollover or a delete replaces it and closes the old one
    # (after the calls in flight on it return): a read that picked the old one up just before
    # finds it closed and reads again through the new one (replaced). Keeping replaced views
    # open instead cost memory in proportion to shards x rollovers, for the handle's lifetime.
    view: View | None
    generation: int
    signature: ManifestSignature | None
    # False while the manifest on disk still has an append in flight (loaderx._store.shard_commit):
    # this handle resolved it for reading, and its next write settles it on disk first.
    settled: bool
    closed: bool
    # The name a closed dataset's calls give (ShardedStore.name_as_dataset), else the path.
    shown: str

    def __init__(self, path: str, schema: Schema, readonly: bool, verify: bool | None) -> None:
        self.path = path
        self.schema = schema
        self.readonly = readonly
        self.verify_reads = verify
        self.entries = []
        self.stores = []
        self.view = None
        self.generation = 0
        self.signature = None
        self.settled = True
        self.closed = False
        self.shown = ""
        # Guards replacing the view: a reader that met a stale one and the writer that changed
        # the shards may both make the new one.
        self._view_lock = ForkSafeLock()

    def check_open(self) -> None:
        """A closed dataset raises, as a closed single store does, rather than look empty."""
        if self.closed:
            raise ValueError(f"dataset {self.shown or self.path!r} is closed")

    def read(self, read: Callable[[View], _T], without_shards: Callable[[], _T]) -> _T:
        """read(view) through the current view, made again through the new one when a rollover
        or delete replaced it meanwhile (replaced); without_shards() when there is none."""
        while True:
            self.check_open()
            view = self.view
            if view is None:
                return without_shards()
            try:
                return read(view)
            except ViewStaleError:
                # A delete through this handle changed a shard under the view (it routes with
                # the lengths it was made with): a view of the stores as they are now.
                self.rebuild_view(stale=view)
            except ValueError:
                if not self.replaced(view):
                    raise

    def replaced(self, view: View) -> bool:
        """Whether a read that failed on `view` met it closed by rebuild_view: it then reads
        again through the current view. Not when the dataset itself was closed."""
        return view.closed and self.view is not view and not self.closed

    def adopt(self, store: Zrecord) -> None:
        """A single store, about to roll over, as the only shard: '.' (the top level)."""
        self.entries = [ShardEntry(TOP_LEVEL, len(store))]
        self.stores = [store]
        self.rebuild_view()

    def open_shard(self, entry: ShardEntry) -> Zrecord:
        name = entry.name
        folder = shard_folder(self.path, name)
        where = f"{self.path!r}: shard {name!r}"
        # is_file raises PermissionError naming a shard folder the user may not search, which
        # os.path.isfile would report as missing.
        if not is_file(os.path.join(folder, META_FILE)):
            raise ManifestError(
                f"{where} is listed in {MANIFEST_FILE} but missing from disk "
                f"(no {folder}/{META_FILE})"
            )
        if name != TOP_LEVEL and not self.readonly and os.path.islink(folder):
            # Shard folders are made by renames inside the dataset, never as links: a writable
            # handle would append, delete and compact through one into a folder elsewhere
            # (perhaps another dataset's shard, whose own manifest then disagrees).
            raise ManifestError(
                f"{where} is a symbolic link to {os.readlink(folder)!r}, not a shard folder of "
                "the dataset; refusing to write through it (readonly=True reads it)"
            )
        if name != TOP_LEVEL:
            # has_schema: a folder in place of the shard's schema is damage, said as such.
            if not has_schema(folder):
                raise SchemaError(f"{where} has no {SCHEMA_FILE}")
            found = read_schema(folder)
            lines = differences(found, self.schema)
            if lines:
                raise SchemaError(
                    f"{where} has another schema than the dataset: " + "; ".join(lines)
                )
        return Zrecord(
            folder,
            create=False,
            codec=self.schema.codec,
            readonly=self.readonly,
            verify=self.verify_reads,
            _dataset_owned=True,  # this dataset keeps its manifest in step with the shard
        )

    def load(self, manifest: Manifest, signature: ManifestSignature | None) -> None:
        """Makes the manifest current: resolves an append in flight by the length of the store
        that takes its tail part (loaderx._store.shard_commit), opens shards not open yet, checks every
        count."""
        open_by_name = dict(zip([e.name for e in self.entries], self.stores))
        stores: list[Zrecord] = []
        opened: list[Zrecord] = []

        def store_of(entry: ShardEntry) -> Zrecord:
            store = open_by_name.get(entry.name)
            if store is None:
                store = self.open_shard(entry)
                opened.append(store)
                open_by_name[entry.name] = store
            return store

        settled = manifest.appending is None
        try:
            appending = manifest.appending
            if appending is not None:
                manifest = manifest.resolved(len(store_of(manifest.shards[appending])))
            for position, entry in enumerate(manifest.shards):
                store = store_of(entry)
                stores.append(store)
                length = len(store)
                if not entry.accepts(length, position == len(manifest.shards) - 1):
                    raise ManifestError(
                        f"{self.path!r}: shard {entry.name!r} holds {length} records but "
                        f"{MANIFEST_FILE} records {entry.records}: the counts disagree (was the "
                        "shard replaced or truncated?)"
                    )
        except BaseException:
            for store in opened:
                store.close()
            raise
        self.entries = [entry.copy() for entry in manifest.shards]
        self.stores = stores
        self.generation = manifest.generation
        self.signature = signature
        self.settled = settled
        self.rebuild_view()

    def load_written(self, manifest: Manifest) -> None:
        """load() of a manifest this handle has just written."""
        self.load(manifest, manifest_signature(self.path))

    def rebuild_view(self, stale: View | None = None) -> None:
        """A view of the stores as they are now; with `stale`, only while that one is still
        the current view (another thread may have replaced it first)."""
        with self._view_lock:
            old = self.view
            if stale is not None and old is not stale:
                return
            self.view = View(self.stores, self.path) if self.stores else None
        if old is not None:
            old.close()

    def note_manifest_written(self) -> None:
        """Takes the manifest on disk, just written by this handle, as the one it knows."""
        self.signature = manifest_signature(self.path)

    def catch_up(self) -> None:
        """Under the commit lock: loads commits made by other handles or processes, and settles
        on disk an append in flight that a killed writer left (loaderx._store.shard_commit)."""
        signature = manifest_signature(self.path)
        if signature is not None and (signature != self.signature or not self.settled):
            manifest = read_manifest(self.path)
            if manifest is not None:
                settled = settle_pending(self.path, manifest)
                self.load(
                    settled, signature if settled is manifest else manifest_signature(self.path)
                )

    def release(self) -> None:
        """Closes every shard and view and forgets the manifest (the next catch_up opens anew)."""
        view = self.view
        self.view = None
        if view is not None:
            view.close()
        for store in self.stores:
            store.close()
        self.entries = []
        self.stores = []
        self.signature = None

    def close(self) -> None:
        """Closes the view, then every shard's store; later reads raise ValueError."""
        self.closed = True
        self.release()
