"""ShardAppender: appends to a sharded dataset, rolling over to new shards as the tail fills.

All or nothing, on an error and under SIGKILL alike (see ShardAppender.append). The caller
(ShardedStore) holds the dataset's commit lock and has caught its shard set up with the manifest.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from contextlib import suppress

from loaderx._store.schema import write_schema
from loaderx._store.shard_set import ShardSet
from loaderx._os.folder_swap import fsync_folder
from loaderx._store.layout import DICT_FILE, TOP_LEVEL, manifest_path
from loaderx._store.manifest import Manifest, read_manifest, write_manifest
from loaderx._store.shard_commit import commit_shards_locked, settle_pending
from loaderx._store.staging import discard_staging, remove_unlisted, staging_folder
from loaderx._store.zrecord import Zrecord
from loaderx.errors import StoreFullError, StoreLockedError


# Writes records [begin, end) of the caller's batch into a store; returns the first's index.
RecordWriter = Callable[[Zrecord, int, int], int]


def _no_records() -> int:
    return 0


class ShardAppender:
    """Appends through a ShardSet, `shard_records` records per shard at most."""

    shards: ShardSet
    shard_records: int

    def __init__(self, shards: ShardSet, shard_records: int) -> None:
        self.shards = shards
        self.shard_records = shard_records

    def append(self, count: int, write: RecordWriter) -> int:
        """Writes records [0, count) after the last one, rolling over to new shards as the tail
        fills; returns the global index of the first.

        All or nothing, on an error and under SIGKILL alike. A batch that fits the tail is one
        atomic store append. A larger one is written first as new shards in the staging area,
        which no reader sees; then one manifest write lists them as pending and the tail's
        part as in flight (loaderx._store.shard_commit); then the tail takes its part in one atomic
        store append, which is the commit point; then a final manifest write settles it. A
        process killed anywhere leaves a state that every reader resolves the same way (the
        pending shards count exactly when the tail's part is in) and that the next writer
        settles.
        """
        shards = self.shards
        if count == 0:
            return shards.read(len, _no_records)
        if not shards.stores:
            self.roll_over()
        tail = shards.stores[-1]
        first = shards.read(len, _no_records)
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
            if head == 0 or shards.entries[-1].name == TOP_LEVEL:
                # The top-level store may have a single-store writer, which takes no
                # commit lock and would go on appending to it: never sealed under it.
                raise
            # Another process writes the tail (a store has one writer, from its first
            # append until it closes): the tail is sealed where it is and this batch goes
            # to new shards, the first of which becomes this process's tail.
            self._commit_new_shards(0, count, write, len(tail))
        return first

    def _append_spanning(self, tail: Zrecord, head: int, count: int, write: RecordWriter) -> None:
        """Records [0, head) into the tail and [head, count) into new shards, as one commit
        (see append); with head 0 the new shards are simply committed."""
        length = len(tail)
        if head == 0:
            self._commit_new_shards(0, count, write, length)
            return
        path = self.shards.path
        before = read_manifest(path)  # None: a single-store dataset rolling over
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
            settled = settle_pending(path, in_flight, length + head)
        except OSError:
            # The append is in and durable; only the final manifest write failed (a full
            # disk, say). Readers resolve the state on disk as "in", the next write settles it.
            self.shards.load_written(in_flight)
            return
        self.shards.load_written(settled)

    def _undo_in_flight(self, in_flight: Manifest, before: Manifest | None, length: int) -> None:
        """After the tail's part failed: puts back the manifest from before the append (or
        none, for a single-store dataset) and removes the pending shards."""
        path = self.shards.path
        if before is None:
            os.unlink(manifest_path(path))
            fsync_folder(path)
        else:
            write_manifest(path, before)
        remove_unlisted(path, in_flight.resolved(length))
        self.shards.note_manifest_written()

    def _commit_new_shards(
        self,
        begin: int,
        count: int,
        write: RecordWriter,
        tail_records: int,
        appending: int | None = None,
    ) -> Manifest:
        """Records [begin, count) as new shards after the tail, committed in one manifest
        write (listed as pending when `appending`, see commit_shards_locked). An error before
        the commit removes the staged shards and leaves the dataset as it was."""
        staged: list[str] = []
        try:
            for start in range(begin, count, self.shard_records):
                end = min(count, start + self.shard_records)
                staged.append(self._write_staged(write, start, end))
            manifest = commit_shards_locked(
                self.shards.path, staged, self.shards.schema, tail_records, appending
            )
        except BaseException:
            for folder in staged:  # renamed into the dataset only by a commit that succeeded
                discard_staging(folder)
            raise
        if appending is None:
            self.shards.load_written(manifest)
        return manifest

    def _write_staged(self, write: RecordWriter, begin: int, end: int) -> str:
        """A new shard holding records [begin, end), built in the staging area (not listed, so
        invisible until a commit moves it in); removed again if anything fails."""
        staged = self._new_shard_folder()
        try:
            with Zrecord(staged, codec=self.shards.schema.codec) as store:
                write(store, begin, end)
        except BaseException:
            discard_staging(staged)
            raise
        return staged

    def _new_shard_folder(self) -> str:
        """An empty shard in the staging area: the schema, the dictionary its predecessors
        share (a zstd_dict dataset's shards all use the one its first shard trained), a store."""
        shards = self.shards
        tail = shards.stores[-1] if shards.stores else None
        staged = staging_folder(shards.path)
        try:
            write_schema(staged, shards.schema)
            if tail is not None:
                dictionary = os.path.join(tail.path, DICT_FILE)
                if os.path.isfile(dictionary):
                    shutil.copyfile(dictionary, os.path.join(staged, DICT_FILE))
            Zrecord(staged, create=True, codec=shards.schema.codec).close()
        except BaseException:
            discard_staging(staged)
            raise
        return staged

    def roll_over(self) -> None:
        """Under the commit lock: seals the tail and commits a new, empty shard after it."""
        shards = self.shards
        tail = shards.stores[-1] if shards.stores else None
        staged = self._new_shard_folder()
        try:
            manifest = commit_shards_locked(
                shards.path, [staged], shards.schema, None if tail is None else len(tail)
            )
        except BaseException:
            discard_staging(staged)
            raise
        shards.load_written(manifest)
