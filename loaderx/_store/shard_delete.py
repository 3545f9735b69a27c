"""ShardDeleter: deletes across a sharded dataset's shards, journaled, and finishes a killed one.

Deletes keep the global index space dense: each shard deletes swap-last within itself (its
last records fill the holes) and every later shard's records shift down by the number deleted
before them. A journal (loaderx._store.delete_journal) records each shard's part first, then the
manifest the new counts, with the old ones as records_before; a process killed between two
shards leaves a delete that the next writable open finishes (finish_interrupted).
"""

from __future__ import annotations

import ctypes
import os
import time
from contextlib import nullcontext
from typing import Final

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx._native.calls import leave_all
from loaderx._store.delete_journal import (
    JOURNAL_FILE,
    ShardDelete,
    journal_path,
    read_journal,
    remove_journal,
    write_journal,
)
from loaderx._store.shard_set import ShardSet
from loaderx._store.layout import MANIFEST_FILE
from loaderx._store.manifest import Manifest, ShardEntry, read_manifest, write_manifest
from loaderx._store.shard_locks import commit_lock, deleting_lock
from loaderx._store.staging import remove_dead_temporaries
from loaderx._store.zrecord import Zrecord
from loaderx.errors import ManifestError, ReadOnlyStoreError, StoreLockedError

# A writable open finishing a half-done delete waits this long, this many times, for the
# handles of a killed process that the kernel has not closed yet (finish_at_open).
_FINISH_ATTEMPTS: Final = 40
_FINISH_WAIT: Final = 0.05

# Which records each shard deletes: (shard position, indices local to the shard).
_Plan = list[tuple[int, npt.NDArray[np.int64]]]


def delete_unsettled(folder: str, manifest: Manifest) -> bool:
    """Whether a delete left its journal, or the manifest mid-delete (a killed process)."""
    mid_delete = any(entry.records_before is not None for entry in manifest.shards)
    return mid_delete or os.path.exists(journal_path(folder))


def delete_each(stores: list[Zrecord], indices: list[npt.NDArray[np.int64]], name: str) -> None:
    """Deletes indices[k] from stores[k] in one native call (lx_stores_delete), refused as a
    whole, with nothing changed, when any of the stores is open elsewhere."""
    mark = object()
    try:
        handles = []
        for store in stores:
            handles.append(store._enter(mark))  # noqa: SLF001 - a call in flight on each store
        flat = np.ascontiguousarray(np.concatenate(indices), dtype=np.int64)
        splits = np.zeros(len(stores) + 1, dtype=np.uint64)
        splits[1:] = np.cumsum([len(local) for local in indices])
        array = (ctypes.c_void_p * len(handles))(*handles)
        code = _native.lib.lx_stores_delete(
            array, len(handles), flat.ctypes.data, splits.ctypes.data
        )
        _native.check(code, f"delete of {len(flat)} records from {len(stores)} shards of {name!r}")
    finally:
        leave_all(stores, mark)


class ShardDeleter:
    """Deletes through a ShardSet, and settles the deletes a killed process left."""

    shards: ShardSet

    def __init__(self, shards: ShardSet) -> None:
        self.shards = shards

    def catch_up(self, readers_locked: bool = False) -> None:
        """Under the commit lock, before a write: the shard set catches up with the manifest,
        then a delete that another process (or a failed settle of ours) left is finished before
        this handle writes anything over it; while it cannot be (other handles hold its
        shards), every write refuses here. readers_locked: the caller holds the readers lock
        exclusively already."""
        self.shards.catch_up()
        self.finish_interrupted(readers_locked)

    def delete(self, indices: npt.NDArray[np.int64]) -> None:
        """Under the commit lock, caught up: deletes the selected global records (see the
        module doc for where survivors go)."""
        shards = self.shards
        lengths = np.array([len(store) for store in shards.stores], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)))
        targets = np.unique(indices)
        if len(targets) and (targets[0] < 0 or targets[-1] >= starts[-1]):
            raise IndexError(f"index out of range for length {int(starts[-1])}")
        owner = np.searchsorted(starts, targets, side="right") - 1
        plan: _Plan = []
        for shard in np.unique(owner).tolist():
            plan.append((shard, targets[owner == shard] - starts[shard]))
        pending = Manifest(
            [ShardEntry(e.name, int(n)) for e, n in zip(shards.entries, lengths)],
            shards.generation + 1,
        )
        if not plan:
            return
        with deleting_lock(shards.path):  # opens wait rather than meet moving shards
            self._delete_planned(plan, pending, lengths)

    def _delete_planned(
        self, plan: _Plan, pending: Manifest, lengths: npt.NDArray[np.int64]
    ) -> None:
        """Under the commit and readers locks: journal, manifest, the native delete, settle."""
        shards = self.shards
        path = shards.path
        remove_dead_temporaries(path)  # a killed delete's journal can be large
        before = read_manifest(path)
        for shard, local in plan:
            entry = pending.shards[shard]
            entry.records_before = entry.records
            entry.records -= len(local)
        # The journal first: a process killed once the shards start moving leaves what the
        # next writable open needs to finish the delete (loaderx._store.delete_journal).
        write_journal(
            path,
            [ShardDelete(shards.entries[shard].name, int(lengths[shard]), local)
             for shard, local in plan],
        )
        try:
            write_manifest(path, pending)
        except BaseException:
            remove_journal(path)
            raise
        try:
            delete_each([shards.stores[shard] for shard, _ in plan],
                        [local for _, local in plan], path)
        finally:
            self._settle_delete(pending, before, lengths)

    def _settle_delete(
        self, pending: Manifest, before: Manifest | None, lengths: npt.NDArray[np.int64]
    ) -> None:
        """After a delete, done or not: a refused one (nothing moved: the native call takes
        every shard and writes every shard's redo log before any record moves, so a full disk
        refuses it too) puts the manifest back as it was; otherwise it states what each shard
        now holds (every shard deleted, also when a failure came after the records moved)."""
        shards = self.shards
        now = [len(store) for store in shards.stores]
        # The native call has returned: the journal, there for a process killed inside it, goes
        # first, so that a failure of the manifest write below can never let a later write
        # carry out (the rest of) a delete whose caller was told the outcome. A manifest left
        # mid-delete without a journal is settled to what the shards hold by the next write.
        remove_journal(shards.path)
        if before is not None and now == lengths.tolist():
            write_manifest(shards.path, before)  # refused: nothing moved
            shards.note_manifest_written()
            return
        self._write_counts(pending)

    def _manifest(self) -> Manifest:
        """A copy of this handle's manifest (its entries and generation)."""
        shards = self.shards
        return Manifest([entry.copy() for entry in shards.entries], shards.generation)

    def _write_counts(self, manifest: Manifest) -> None:
        """Writes `manifest` with every entry's count set to what its store now holds (no
        delete in progress) and makes it this handle's."""
        shards = self.shards
        for entry, store in zip(manifest.shards, shards.stores):
            entry.records = len(store)
            entry.records_before = None
        manifest.generation += 1
        # This handle's view first: should the write fail, it still reads what the shards
        # hold, and its stale signature makes its next write settle the manifest.
        shards.entries = [entry.copy() for entry in manifest.shards]
        shards.generation = manifest.generation
        shards.rebuild_view()
        write_manifest(shards.path, manifest)
        shards.note_manifest_written()

    def finish_at_open(self) -> None:
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
        path = self.shards.path
        for attempt in range(_FINISH_ATTEMPTS):
            with commit_lock(path), deleting_lock(path):
                try:
                    self.catch_up(readers_locked=True)
                    return
                except StoreLockedError:
                    if not self.shards.entries:
                        raise  # refused before the manifest was loaded: nothing to read yet
                    if not self._half_deleted():
                        return
                    if attempt == _FINISH_ATTEMPTS - 1:
                        raise
                    self.shards.release()
            time.sleep(_FINISH_WAIT)

    def _half_deleted(self) -> bool:
        """Whether some shards of a delete in the manifest applied it and others not."""
        done = {
            len(store) == entry.records
            for entry, store in zip(self.shards.entries, self.shards.stores)
            if entry.records_before is not None
        }
        return len(done) > 1

    def refuse_half_deleted(self) -> None:
        """A read-only handle cannot finish a killed delete: it refuses one that some shards
        applied and others did not (all or none reads as a consistent dataset)."""
        shards = self.shards
        for entry, store in zip(shards.entries, shards.stores):
            # A shard's own delete is atomic: it holds its count before or after, and telling
            # which needs both to be right (a damaged count passed a half-done delete as done).
            if entry.records_before is not None and len(store) not in (
                entry.records, entry.records_before
            ):
                raise ManifestError(
                    f"{shards.path!r}: shard {entry.name!r} holds {len(store)} records, neither "
                    f"the {entry.records_before} before the delete in progress in "
                    f"{MANIFEST_FILE} nor the {entry.records} after it"
                )
        if self._half_deleted():
            raise ReadOnlyStoreError(
                f"{shards.path!r}: a delete over several shards was interrupted by a crash and "
                "is half done; open the dataset writable once to finish it"
            )

    def finish_interrupted(self, readers_locked: bool = False) -> None:
        """Under the commit lock, just after opening: finishes a delete over several shards
        that a killed process left half done (loaderx._store.delete_journal), on every shard
        still at its count before, then settles the manifest. A stale journal is removed."""
        shards = self.shards
        parts = read_journal(shards.path)
        mid_delete = any(entry.records_before is not None for entry in shards.entries)
        if parts is None:
            if mid_delete:
                # No journal: a refused delete whose manifest could not be put back (its
                # journal goes first, so it never runs later), or one from a loaderx without
                # journals. The shards hold what they hold; the manifest says so.
                self._write_counts(self._manifest())
            return
        if not mid_delete:
            remove_journal(shards.path)  # died before the manifest write, or after settling it
            return
        self._check_journal(parts)
        todo = self._parts_to_finish(parts)
        if todo:
            # The readers lock, exclusively: the same process never takes it twice (two
            # descriptors of one process conflict like two processes).
            with nullcontext() if readers_locked else deleting_lock(shards.path):
                delete_each(
                    [store for store, _ in todo], [local for _, local in todo], shards.path
                )
        self._write_counts(self._manifest())
        remove_journal(shards.path)

    def _parts_to_finish(
        self, parts: list[ShardDelete]
    ) -> list[tuple[Zrecord, npt.NDArray[np.int64]]]:
        """The journal's parts that their shard has not applied yet, each with its store; a
        shard at neither its count before nor after is damaged (ManifestError)."""
        shards = self.shards
        by_name = dict(zip([entry.name for entry in shards.entries], shards.stores))
        todo: list[tuple[Zrecord, npt.NDArray[np.int64]]] = []
        for part in parts:
            store = by_name.get(part.name)
            length = -1 if store is None else len(store)
            if store is not None and length == part.records_before:
                todo.append((store, part.indices))
            elif length != part.records_after:
                raise ManifestError(
                    f"{shards.path!r}: shard {part.name!r} holds {length} records, neither the "
                    f"{part.records_before} before the interrupted delete in "
                    f"{JOURNAL_FILE} nor the {part.records_after} after it"
                )
        return todo

    def _check_journal(self, parts: list[ShardDelete]) -> None:
        """The journal and the manifest were written by one delete (the journal first): they
        name the same shards with the same counts before and after. A journal that disagrees
        is damaged, and carrying it out would delete records the delete never selected."""
        where = f"{journal_path(self.shards.path)}"
        planned = {e.name: e for e in self.shards.entries if e.records_before is not None}
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
