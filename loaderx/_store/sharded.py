"""ShardedStore: the shards of a sharded dataset, open together and used like one Zrecord.

DenseDataset and RaggedDataset hold either a Zrecord (a single-store dataset) or this. Reads go
through one native View over every shard. Appends fill the last shard and roll over to new
ones when it is full, all or nothing on an error and under SIGKILL (see _append). Maintenance
runs shard by shard. Every change to the manifest holds the dataset's commit lock (see
loaderx._store.shards), so other processes may commit shards meanwhile.

Deletes keep the global index space dense: each shard deletes swap-last within itself (its
last records fill the holes) and every later shard's records shift down by the number deleted
before them. A journal (loaderx._store.delete_journal) records each shard's part first, then the
manifest the new counts, with the old ones as records_before; a process killed between two
shards leaves a delete that the next writable open finishes (_finish_interrupted_delete).

Stays interpreted: it is ctypes glue (through View and Zrecord) and runs per call, not per
record.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from typing import Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._os import descriptors
from loaderx._store.delete_journal import (
    JOURNAL_FILE,
    ShardDelete,
    journal_path,
    read_journal,
    remove_journal,
    write_journal,
)
from loaderx.errors import (
    ManifestError,
    ReadOnlyStoreError,
    SchemaError,
    StoreFullError,
    StoreLockedError,
)
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._store.indexing import normalize_index
from loaderx._store.schema import SCHEMA_FILE, Schema, differences, read_schema, write_schema
from loaderx._os.folder_swap import fsync_folder
from loaderx._store.layout import (
    MANIFEST_FILE,
    META_FILE,
    SHARD_RECORDS_MAX,
    TOP_LEVEL,
    manifest_path,
    shard_folder,
)
from loaderx._store.manifest import Manifest, ShardEntry, read_manifest, write_manifest
from loaderx._store.shard_commit import commit_shards_locked, settle_pending
from loaderx._store.shard_locks import commit_lock, deleting_lock, reading_lock
from loaderx._store.staging import (
    discard_staging,
    remove_dead_temporaries,
    remove_unlisted,
    staging_folder,
)
from loaderx._store.verify import BadRecord, VerifyReport
from loaderx._store.view import View
from loaderx._store.zrecord import Zrecord

_DICT_FILE: Final = "dict.zr"

_Signature = tuple[int, int, int, bytes]
# The manifest's first bytes, its format, version and generation fields (see _signature).
_SIGNATURE_BYTES: Final = 64
# Opening retries while the dataset folder keeps being replaced under it (each replacement is
# a whole conversion, so two attempts nearly always suffice).
_OPEN_ATTEMPTS: Final = 8
# Seconds added to the wait before each further attempt while a replacement is in progress.
_SWAP_WAIT: Final = 0.005
# A writable open finishing a half-done delete waits this long, this many times, for the
# handles of a killed process that the kernel has not closed yet (_finish_at_open).
_FINISH_ATTEMPTS: Final = 40
_FINISH_WAIT: Final = 0.05


def check_shard_records(shard_records: object) -> int:
    """A shard capacity as an int in 1 .. SHARD_RECORDS_MAX."""
    if isinstance(shard_records, bool) or not isinstance(shard_records, (int, np.integer)):
        raise TypeError(f"shard_records must be an int, not {type(shard_records).__name__}")
    if not 1 <= shard_records <= SHARD_RECORDS_MAX:
        raise ValueError(
            f"shard_records must be in 1..{SHARD_RECORDS_MAX} (a store's limit), got {shard_records}"
        )
    return int(shard_records)


def _folder_identity(folder: str) -> tuple[int, int] | None:
    """Which folder the path names now: a conversion with overwrite=True swaps in another."""
    try:
        found = os.stat(folder)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


def _signature(folder: str) -> _Signature | None:
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


def _delete_unsettled(folder: str, manifest: Manifest) -> bool:
    """Whether a delete left its journal, or the manifest mid-delete (a killed process)."""
    mid_delete = any(entry.records_before is not None for entry in manifest.shards)
    return mid_delete or os.path.exists(journal_path(folder))


def _required_manifest(folder: str) -> Manifest:
    manifest = read_manifest(folder)
    if manifest is None:
        raise ManifestError(f"{folder!r} has no {MANIFEST_FILE}")
    return manifest


_T = TypeVar("_T")


def _refuse_any(indices: npt.NDArray[np.int64]) -> None:
    """What a gather from a dataset without shards does: nothing, or IndexError."""
    if len(indices):
        raise IndexError(f"index {int(indices[0])} is out of range for length 0")


class ShardedStore:
    """The shards listed by a dataset's manifest, in order, as one store."""

    path: str
    schema: Schema
    shard_records: int
    readonly: bool
    entries: list[ShardEntry]
    stores: list[Zrecord]
    # The view over every shard. A rollover or a delete replaces it and closes the old one
    # (after the calls in flight on it return): a read that picked the old one up just before
    # finds it closed and reads again through the new one (_replaced). Keeping replaced views
    # open instead cost memory in proportion to shards x rollovers, for the handle's lifetime.
    _view: View | None
    _generation: int
    _signature: _Signature | None
    # False while the manifest on disk still has an append in flight (loaderx._store.shards): this
    # handle resolved it for reading, and its next write settles it on disk first.
    _settled: bool
    # A parent thread may hold it (an append or a delete) at the moment of fork; a child gets
    # it back unlocked.
    _guard: ForkSafeLock
    _closed: bool
    # Which records gathers check against their checksum, for every shard (see Zrecord).
    verify_reads: bool | None

    def __init__(
        self,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> None:
        self.path = path
        self.verify_reads = verify
        self.schema = schema
        self.shard_records = check_shard_records(shard_records)
        self.readonly = readonly
        self.entries = []
        self.stores = []
        self._view = None
        self._generation = 0
        self._signature = None
        self._settled = True
        self._guard = ForkSafeLock()
        self._closed = False

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> ShardedStore:
        """Opens every shard the manifest lists, refusing (naming the shard) one that is
        missing, has another schema, or holds a count the manifest does not allow. With
        readonly, every shard opens read-only and every write is refused; verify is every
        shard's gather verification (see Zrecord)."""
        for attempt in range(_OPEN_ATTEMPTS - 1):
            identity = _folder_identity(path)
            manifest_version = _signature(path)
            try:
                sharded = cls._open_once(path, schema, shard_records, readonly, verify)
            except (ManifestError, SchemaError, OSError):
                now = _folder_identity(path)
                if now is not None and now == identity and _signature(path) == manifest_version:
                    raise
                # The whole folder was replaced while we read it, or we are between the two
                # renames of a replacement (the path names no folder for a moment), or another
                # process committed meanwhile (a delete whose shards moved after we read the
                # manifest: their counts then disagree with it): open again.
                time.sleep(_SWAP_WAIT * attempt)
                continue
            if _folder_identity(path) == identity:
                return sharded
            sharded.close()  # manifest and shards may come from two folders: open again
        if _folder_identity(path) is None:
            raise FileNotFoundError(f"no dataset at {path!r} (it is gone, or being replaced)")
        return cls._open_once(path, schema, shard_records, readonly, verify)

    @classmethod
    def _open_once(
        cls,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool,
        verify: bool | None = None,
    ) -> ShardedStore:
        sharded = cls(path, schema, shard_records, readonly, verify)
        try:
            with reading_lock(path):
                signature = _signature(path)
                manifest = _required_manifest(path)
                unsettled = not readonly and _delete_unsettled(path, manifest)
                if not unsettled:
                    try:
                        sharded._load(manifest, signature)
                        if readonly:
                            sharded._refuse_half_deleted()
                    except BaseException:
                        sharded.close()  # under the lock: its handles never block a finish
                        raise
            if unsettled:
                sharded._finish_at_open()
        except BaseException:
            sharded.close()
            raise
        return sharded

    @classmethod
    def adopt(cls, path: str, store: Zrecord, schema: Schema, shard_records: int) -> ShardedStore:
        """A single-store dataset about to roll over: its open store becomes shard 0 ('.').

        The store's writer lock is claimed first: another process writing it as a single store
        (it takes no commit lock) must never find it sealed under it. While that process holds
        it, this raises StoreLockedError and nothing changes."""
        store.claim_writer()
        sharded = cls(path, schema, shard_records, verify=store.verify_reads)
        sharded.entries = [ShardEntry(TOP_LEVEL, len(store))]
        sharded.stores = [store]
        sharded._rebuild_view()
        return sharded

    def _refuse_if_readonly(self, operation: str) -> None:
        self._check_open()
        if self.readonly:
            raise ReadOnlyStoreError(
                f"{operation} refused: sharded dataset {self.path!r} was opened with readonly=True"
            )

    def _open_shard(self, entry: ShardEntry) -> Zrecord:
        name = entry.name
        folder = shard_folder(self.path, name)
        where = f"{self.path!r}: shard {name!r}"
        if not os.path.isfile(os.path.join(folder, META_FILE)):
            raise ManifestError(
                f"{where} is listed in {MANIFEST_FILE} but missing from disk (no {folder}/{META_FILE})"
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
            try:
                found = read_schema(folder)
            except FileNotFoundError:
                raise SchemaError(f"{where} has no {SCHEMA_FILE}") from None
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

    def _load(self, manifest: Manifest, signature: _Signature | None) -> None:
        """Makes the manifest current: resolves an append in flight by the length of the store
        that takes its tail part (loaderx._store.shards), opens shards not open yet, checks every
        count."""
        open_by_name = dict(zip([e.name for e in self.entries], self.stores))
        stores: list[Zrecord] = []
        opened: list[Zrecord] = []

        def store_of(entry: ShardEntry) -> Zrecord:
            store = open_by_name.get(entry.name)
            if store is None:
                store = self._open_shard(entry)
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
        self._generation = manifest.generation
        self._signature = signature
        self._settled = settled
        self._rebuild_view()

    def _rebuild_view(self) -> None:
        old = self._view
        self._view = View(self.stores, self.path) if self.stores else None
        if old is not None:
            old.close()

    def _replaced(self, view: View) -> bool:
        """Whether a read that failed on `view` met it closed by _rebuild_view: it then reads
        again through the current view. Not when the dataset itself was closed."""
        return view.closed and self._view is not view and not self._closed

    def _sync_manifest(self, readers_locked: bool = False) -> None:
        """Under the commit lock: catches up with commits made by other handles or processes,
        and settles on disk an append in flight that a killed writer left (loaderx._store.shards).
        readers_locked: the caller holds the readers lock exclusively already."""
        signature = _signature(self.path)
        if signature is not None and (signature != self._signature or not self._settled):
            manifest = read_manifest(self.path)
            if manifest is not None:
                settled = settle_pending(self.path, manifest)
                self._load(settled, signature if settled is manifest else _signature(self.path))
        # A delete that another process (or a failed settle of ours) left is finished before
        # this handle writes anything over it; while it cannot be (other handles hold its
        # shards), every write refuses here.
        self._finish_interrupted_delete(readers_locked)

    # --- reading ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        """A closed dataset raises, as a closed single store does, rather than look empty."""
        if self._closed:
            raise ValueError(f"sharded dataset {self.path!r} is closed")

    def _read(self, read: Callable[[View], _T], without_shards: Callable[[], _T]) -> _T:
        """read(view) through the current view, made again through the new one when a rollover
        or delete replaced it meanwhile (_replaced); without_shards() when there is none."""
        while True:
            self._check_open()
            view = self._view
            if view is None:
                return without_shards()
            try:
                return read(view)
            except ValueError:
                if not self._replaced(view):
                    raise

    def __len__(self) -> int:
        return self._read(len, lambda: 0)

    @property
    def view(self) -> View | None:
        return self._view

    @property
    def has_dict(self) -> bool:
        return bool(self.stores) and self.stores[-1].has_dict

    def gather_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> None:
        self._read(
            lambda view: view.gather_into(indices, out, record_size),
            lambda: _refuse_any(indices),
        )

    def gather_fixed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> bool:
        """The dense fast path through the view (see View.gather_fixed); False, with nothing
        copied, sends the caller to its general path."""
        view = self._view
        if view is None:
            return False
        try:
            return view.gather_fixed(indices, out, record_size)
        except ValueError:
            if self._replaced(view):
                return False  # the general path reads through the current view
            raise

    def gather_ragged(
        self, indices: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        def without_shards() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
            _refuse_any(indices)
            return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64)

        return self._read(lambda view: view.gather_ragged(indices), without_shards)

    def record_lengths(self, index: object) -> npt.NDArray[np.uint64]:
        """The logical size of each selected record (any index form, as Zrecord takes)."""
        def without_shards() -> npt.NDArray[np.uint64]:
            normalize_index(index, 0)  # only an empty selection gets past it
            return np.empty(0, dtype=np.uint64)

        return self._read(
            lambda view: view.record_lengths(normalize_index(index, len(view))), without_shards
        )

    # --- appending -------------------------------------------------------------------------

    def append_fixed(self, data: npt.NDArray[Any], record_size: int) -> int:
        """Appends the records of a C-contiguous (B, ...) array, rolling over as shards fill."""
        self._refuse_if_readonly("append")

        def write(store: Zrecord, begin: int, end: int) -> int:
            return store.append_fixed(data[begin:end], record_size)

        return self._append(int(data.shape[0]), write)

    def append(self, records: Sequence[Any]) -> int:
        """Appends a list of bytes-like records, rolling over as shards fill."""
        self._refuse_if_readonly("append")

        def write(store: Zrecord, begin: int, end: int) -> int:
            return store.append(records[begin:end])

        return self._append(len(records), write)

    def _append(self, count: int, write: Callable[[Zrecord, int, int], int]) -> int:
        """Writes records [0, count) after the last one, rolling over to new shards as the tail
        fills; returns the global index of the first.

        All or nothing, on an error and under SIGKILL alike. A batch that fits the tail is one
        atomic store append. A larger one is written first as new shards in the staging area,
        which no reader sees; then one manifest write lists them as pending and the tail's
        part as in flight (loaderx._store.shards); then the tail takes its part in one atomic store
        append, which is the commit point; then a final manifest write settles it. A process
        killed anywhere leaves a state that every reader resolves the same way (the pending
        shards count exactly when the tail's part is in) and that the next writer settles.
        """
        with self._guard, commit_lock(self.path):
            self._sync_manifest()
            if count == 0:
                return len(self)
            if not self.stores:
                self._roll_over()
            tail = self.stores[-1]
            first = len(self)
            head = min(max(0, self.shard_records - len(tail)), count)
            try:
                if head == count:
                    write(tail, 0, count)
                else:
                    self._append_spanning(tail, head, count, write)
            except StoreFullError:
                if len(tail) == 0 or head == 0:
                    raise
                # Out of chunk space before the record limit (garbage left by deletes): the
                # tail stays as it is and the whole batch goes to new shards.
                self._commit_new_shards(0, count, write, len(tail))
            except StoreLockedError:
                if head == 0 or self.entries[-1].name == TOP_LEVEL:
                    # The top-level store may have a single-store writer, which takes no
                    # commit lock and would go on appending to it: never sealed under it.
                    raise
                # Another process writes the tail (a store has one writer, from its first
                # append until it closes): the tail is sealed where it is and this batch goes
                # to new shards, the first of which becomes this process's tail.
                self._commit_new_shards(0, count, write, len(tail))
            return first

    def _append_spanning(
        self, tail: Zrecord, head: int, count: int, write: Callable[[Zrecord, int, int], int]
    ) -> None:
        """Records [0, head) into the tail and [head, count) into new shards, as one commit
        (see _append); with head 0 the new shards are simply committed."""
        length = len(tail)
        if head == 0:
            self._commit_new_shards(0, count, write, length)
            return
        before = read_manifest(self.path)  # None: a single-store dataset rolling over
        in_flight = self._commit_new_shards(head, count, write, length, length + head)
        try:
            write(tail, 0, head)  # the commit point
        except BaseException:
            # Not in (a store append is all or nothing): the manifest goes back as it was and
            # the pending shards go. Should that fail too, the manifest on disk still reads as
            # "not in", and this handle's next write settles it (its signature is stale).
            with suppress(OSError):
                self._undo_in_flight(in_flight, before, len(tail))
            raise
        try:
            settled = settle_pending(self.path, in_flight, length + head)
        except OSError:
            # The append is in and durable; only the final manifest write failed (a full
            # disk, say). Readers resolve the state on disk as "in", the next write settles it.
            self._load(in_flight, _signature(self.path))
            return
        self._load(settled, _signature(self.path))

    def _undo_in_flight(self, in_flight: Manifest, before: Manifest | None, length: int) -> None:
        """After the tail's part failed: puts back the manifest from before the append (or
        none, for a single-store dataset) and removes the pending shards."""
        if before is None:
            os.unlink(manifest_path(self.path))
            fsync_folder(self.path)
        else:
            write_manifest(self.path, before)
        remove_unlisted(self.path, in_flight.resolved(length))
        self._signature = _signature(self.path)

    def _commit_new_shards(
        self,
        begin: int,
        count: int,
        write: Callable[[Zrecord, int, int], int],
        tail_records: int,
        appending: int | None = None,
    ) -> Manifest:
        """Records [begin, count) as new shards after the tail, committed in one manifest
        write (listed as pending when `appending`, see commit_shards_locked). An error before
        the commit removes the staged shards and leaves the dataset as it was."""
        staged: list[str] = []
        try:
            for start in range(begin, count, self.shard_records):
                staged.append(self._write_staged(write, start, min(count, start + self.shard_records)))
            manifest = commit_shards_locked(
                self.path, staged, self.schema, tail_records, appending
            )
        except BaseException:
            for folder in staged:  # renamed into the dataset only by a commit that succeeded
                discard_staging(folder)
            raise
        if appending is None:
            self._load(manifest, _signature(self.path))
        return manifest

    def _write_staged(self, write: Callable[[Zrecord, int, int], int], begin: int, end: int) -> str:
        """A new shard holding records [begin, end), built in the staging area (not listed, so
        invisible until a commit moves it in); removed again if anything fails."""
        staged = self._new_shard_folder()
        try:
            with Zrecord(staged, codec=self.schema.codec) as store:
                write(store, begin, end)
        except BaseException:
            discard_staging(staged)
            raise
        return staged

    def _new_shard_folder(self) -> str:
        """An empty shard in the staging area: the schema, the dictionary its predecessors
        share (a zstd_dict dataset's shards all use the one its first shard trained), a store."""
        tail = self.stores[-1] if self.stores else None
        staged = staging_folder(self.path)
        try:
            write_schema(staged, self.schema)
            if tail is not None:
                dictionary = os.path.join(tail.path, _DICT_FILE)
                if os.path.isfile(dictionary):
                    shutil.copyfile(dictionary, os.path.join(staged, _DICT_FILE))
            Zrecord(staged, create=True, codec=self.schema.codec).close()
        except BaseException:
            discard_staging(staged)
            raise
        return staged

    def _tail_start(self) -> int:
        """The global index of the tail shard's first record (the other shards are sealed)."""
        return sum(len(store) for store in self.stores[:-1])

    def _roll_over(self) -> None:
        """Under the commit lock: seals the tail and commits a new, empty shard after it."""
        tail = self.stores[-1] if self.stores else None
        staged = self._new_shard_folder()
        try:
            manifest = commit_shards_locked(
                self.path, [staged], self.schema, None if tail is None else len(tail)
            )
        except BaseException:
            discard_staging(staged)
            raise
        self._load(manifest, _signature(self.path))

    # --- maintenance -------------------------------------------------------------------------

    def delete(self, indices: npt.NDArray[np.int64]) -> None:
        """Deletes the selected global records (see the module doc for where survivors go)."""
        self._refuse_if_readonly("delete")
        with self._guard, commit_lock(self.path):
            self._sync_manifest()
            lengths = np.array([len(store) for store in self.stores], dtype=np.int64)
            starts = np.concatenate(([0], np.cumsum(lengths)))
            targets = np.unique(indices)
            if len(targets) and (targets[0] < 0 or targets[-1] >= starts[-1]):
                raise IndexError(f"index out of range for length {int(starts[-1])}")
            owner = np.searchsorted(starts, targets, side="right") - 1
            plan: list[tuple[int, npt.NDArray[np.int64]]] = []
            for shard in np.unique(owner).tolist():
                plan.append((shard, targets[owner == shard] - starts[shard]))
            pending = Manifest(
                [ShardEntry(e.name, int(n)) for e, n in zip(self.entries, lengths)],
                self._generation + 1,
            )
            if not plan:
                return
            with deleting_lock(self.path):  # opens wait rather than meet moving shards
                self._delete_planned(plan, pending, lengths)

    def _delete_planned(
        self,
        plan: list[tuple[int, npt.NDArray[np.int64]]],
        pending: Manifest,
        lengths: npt.NDArray[np.int64],
    ) -> None:
        """Under the commit and readers locks: journal, manifest, the native delete, settle."""
        remove_dead_temporaries(self.path)  # a killed delete's journal can be large
        before = read_manifest(self.path)
        for shard, local in plan:
            entry = pending.shards[shard]
            entry.records_before = entry.records
            entry.records -= len(local)
        # The journal first: a process killed once the shards start moving leaves what the
        # next writable open needs to finish the delete (loaderx._store.delete_journal).
        write_journal(
            self.path,
            [ShardDelete(self.entries[shard].name, int(lengths[shard]), local)
             for shard, local in plan],
        )
        try:
            write_manifest(self.path, pending)
        except BaseException:
            remove_journal(self.path)
            raise
        try:
            _delete_each([self.stores[shard] for shard, _ in plan],
                         [local for _, local in plan], self.path)
        finally:
            self._settle_delete(pending, before, lengths)

    def _settle_delete(
        self, pending: Manifest, before: Manifest | None, lengths: npt.NDArray[np.int64]
    ) -> None:
        """After a delete, done or not: a refused one (nothing moved: the native call takes
        every shard and writes every shard's redo log before any record moves, so a full disk
        refuses it too) puts the manifest back as it was; otherwise it states what each shard
        now holds (every shard deleted, also when a failure came after the records moved)."""
        now = [len(store) for store in self.stores]
        # The native call has returned: the journal, there for a process killed inside it, goes
        # first, so that a failure of the manifest write below can never let a later write
        # carry out (the rest of) a delete whose caller was told the outcome. A manifest left
        # mid-delete without a journal is settled to what the shards hold by the next write.
        remove_journal(self.path)
        if before is not None and now == lengths.tolist():
            write_manifest(self.path, before)  # refused: nothing moved
            self._signature = _signature(self.path)
            return
        self._write_counts(pending)

    def _manifest(self) -> Manifest:
        """A copy of this handle's manifest (its entries and generation)."""
        return Manifest([entry.copy() for entry in self.entries], self._generation)

    def _write_counts(self, manifest: Manifest) -> None:
        """Writes `manifest` with every entry's count set to what its store now holds (no
        delete in progress) and makes it this handle's."""
        for entry, store in zip(manifest.shards, self.stores):
            entry.records = len(store)
            entry.records_before = None
        manifest.generation += 1
        # This handle's view first: should the write fail, it still reads what the shards
        # hold, and its stale signature makes its next write settle the manifest.
        self.entries = [entry.copy() for entry in manifest.shards]
        self._generation = manifest.generation
        self._rebuild_view()
        write_manifest(self.path, manifest)
        self._signature = _signature(self.path)

    def _finish_at_open(self) -> None:
        """A delete that a killed process left, finished by a writable open: its shards are
        opened only under the commit lock and the readers lock held exclusively, so no other
        open (writable ones finishing the same delete, read-only ones refusing it) holds them
        meanwhile.

        Handles older than the kill keep it from running. Readers of a consistent state (every
        shard or none deleted) may go on, and every write tries again first (or refuses). A
        half-done one must be finished to be read: the shards are closed again and it waits a
        moment for the handles of a process that is still dying (a killed process drops its
        locks one by one), then raises.
        """
        for attempt in range(_FINISH_ATTEMPTS):
            with commit_lock(self.path), deleting_lock(self.path):
                try:
                    self._sync_manifest(readers_locked=True)
                    return
                except StoreLockedError:
                    if not self.entries:
                        raise  # refused before the manifest was loaded: nothing to read yet
                    if not self._half_deleted():
                        return
                    if attempt == _FINISH_ATTEMPTS - 1:
                        raise
                    self._release_shards()
            time.sleep(_FINISH_WAIT)

    def _release_shards(self) -> None:
        """Closes every shard and view and forgets the manifest (the next sync opens anew)."""
        view = self._view
        self._view = None
        if view is not None:
            view.close()
        for store in self.stores:
            store.close()
        self.entries = []
        self.stores = []
        self._signature = None

    def _half_deleted(self) -> bool:
        """Whether some shards of a delete in the manifest applied it and others not."""
        done = {
            len(store) == entry.records
            for entry, store in zip(self.entries, self.stores)
            if entry.records_before is not None
        }
        return len(done) > 1

    def _refuse_half_deleted(self) -> None:
        """A read-only handle cannot finish a killed delete: it refuses one that some shards
        applied and others did not (all or none reads as a consistent dataset)."""
        for entry, store in zip(self.entries, self.stores):
            # A shard's own delete is atomic: it holds its count before or after, and telling
            # which needs both to be right (a damaged count passed a half-done delete as done).
            if entry.records_before is not None and len(store) not in (
                entry.records, entry.records_before
            ):
                raise ManifestError(
                    f"{self.path!r}: shard {entry.name!r} holds {len(store)} records, neither "
                    f"the {entry.records_before} before the delete in progress in "
                    f"{MANIFEST_FILE} nor the {entry.records} after it"
                )
        if self._half_deleted():
            raise ReadOnlyStoreError(
                f"{self.path!r}: a delete over several shards was interrupted by a crash and "
                "is half done; open the dataset writable once to finish it"
            )

    def _finish_interrupted_delete(self, readers_locked: bool = False) -> None:
        """Under the commit lock, just after opening: finishes a delete over several shards
        that a killed process left half done (loaderx._store.delete_journal), on every shard still at
        its count before, then settles the manifest. A stale journal is removed."""
        parts = read_journal(self.path)
        mid_delete = any(entry.records_before is not None for entry in self.entries)
        if parts is None:
            if mid_delete:
                # No journal: a refused delete whose manifest could not be put back (its
                # journal goes first, so it never runs later), or one from a loaderx without
                # journals. The shards hold what they hold; the manifest says so.
                self._write_counts(self._manifest())
            return
        if not mid_delete:
            remove_journal(self.path)  # died before the manifest write, or after settling it
            return
        self._check_journal(parts)
        by_name = dict(zip([entry.name for entry in self.entries], self.stores))
        todo: list[tuple[Zrecord, npt.NDArray[np.int64]]] = []
        for part in parts:
            store = by_name.get(part.name)
            length = -1 if store is None else len(store)
            if store is not None and length == part.records_before:
                todo.append((store, part.indices))
            elif length != part.records_after:
                raise ManifestError(
                    f"{self.path!r}: shard {part.name!r} holds {length} records, neither the "
                    f"{part.records_before} before the interrupted delete in "
                    f"{JOURNAL_FILE} nor the {part.records_after} after it"
                )
        if todo:
            # The readers lock, exclusively: the same process never takes it twice (two
            # descriptors of one process conflict like two processes).
            with nullcontext() if readers_locked else deleting_lock(self.path):
                _delete_each(
                    [store for store, _ in todo], [local for _, local in todo], self.path
                )
        self._write_counts(self._manifest())
        remove_journal(self.path)

    def _check_journal(self, parts: list[ShardDelete]) -> None:
        """The journal and the manifest were written by one delete (the journal first): they
        name the same shards with the same counts before and after. A journal that disagrees
        is damaged, and carrying it out would delete records the delete never selected."""
        where = f"{journal_path(self.path)}"
        planned = {e.name: e for e in self.entries if e.records_before is not None}
        names = [part.name for part in parts]
        if len(set(names)) != len(names):
            raise ManifestError(f"{where} lists a shard twice: the journal is damaged")
        for part in parts:
            entry = planned.get(part.name)
            if entry is None:
                raise ManifestError(
                    f"{where} deletes from shard {part.name!r}, which {MANIFEST_FILE} does not "
                    "show mid-delete: the journal or the manifest is damaged"
                )
            if (entry.records_before, entry.records) != (part.records_before, part.records_after):
                raise ManifestError(
                    f"{where} takes shard {part.name!r} from {part.records_before} to "
                    f"{part.records_after} records, {MANIFEST_FILE} from "
                    f"{entry.records_before} to {entry.records}: one of them is damaged"
                )
        missing = sorted(set(planned) - set(names))
        if missing:
            raise ManifestError(
                f"{MANIFEST_FILE} shows shards {missing} mid-delete but {where} has no part for "
                "them: one of them is damaged"
            )

    def compact(self) -> None:
        """Compacts every shard in place (offline, as for a single store)."""
        self._refuse_if_readonly("compact")
        with self._guard:
            for store in self.stores:
                store.compact()

    def stats(self) -> dict[str, int]:
        """The shards' stats summed."""
        total = {"records": 0, "live_bytes": 0, "chunk_bytes": 0, "reclaimable": 0}
        for found in self.shard_stats():
            for key in total:
                total[key] += int(found[key])
        return total

    def shard_stats(self) -> list[dict[str, Any]]:
        """One dict per shard: its name plus its store's stats."""
        self._check_open()
        return [
            {"name": entry.name, **store.stats()}
            for entry, store in zip(self.entries, self.stores)
        ]

    def sync(self) -> None:
        self._refuse_if_readonly("sync")
        for store in self.stores:
            store.sync()

    def verify(self) -> VerifyReport:
        """Every shard's Zrecord.verify() as one report, in the dataset's index space."""
        self._check_open()
        with self._guard:
            reports = [store.verify() for store in self.stores]
        bad: list[BadRecord] = []
        before = 0
        for report in reports:
            bad.extend(BadRecord(before + b.index, b.reason) for b in report.bad)
            before += report.records
        return VerifyReport(
            self.path,
            before,
            all(report.has_checksums for report in reports),
            sum(report.checksummed for report in reports),
            bad,
            sum(report.bad_count for report in reports),
        )

    def train_dict(self, records: Sequence[Any], dict_size: int) -> None:
        """Trains the tail shard's dictionary (the one later rollovers copy)."""
        self._refuse_if_readonly("train_dict")
        with self._guard:
            if not self.stores:
                with commit_lock(self.path):
                    self._roll_over()
            self.stores[-1].train_dict(records, dict_size)

    def close(self) -> None:
        """Closes the views, then every shard's store."""
        self._closed = True
        self._release_shards()


def _delete_each(stores: list[Zrecord], indices: list[npt.NDArray[np.int64]], name: str) -> None:
    """Deletes indices[k] from stores[k] in one native call (lx_stores_delete), refused as a
    whole, with nothing changed, when any of the stores is open elsewhere."""
    entered: list[Zrecord] = []
    try:
        handles = []
        for store in stores:
            handles.append(store._enter())  # noqa: SLF001 - a call in flight on each store
            entered.append(store)
        flat = np.ascontiguousarray(np.concatenate(indices), dtype=np.int64)
        splits = np.zeros(len(stores) + 1, dtype=np.uint64)
        splits[1:] = np.cumsum([len(local) for local in indices])
        array = (ctypes.c_void_p * len(handles))(*handles)
        code = _native.lib.lx_stores_delete(
            array, len(handles), flat.ctypes.data, splits.ctypes.data
        )
        _native.check(code, f"delete of {len(flat)} records from {len(stores)} shards of {name!r}")
    finally:
        for store in entered:
            store._leave()  # noqa: SLF001
