"""The atomic commit that adds staged shards to a dataset, and the settling every writer does.

`commit_shards` moves complete staged shard folders in as the next shard names and rewrites
the manifest atomically (loaderx._store.manifest), under the commit lock
(loaderx._store.shard_locks), so independent jobs may append shards at the same time. A shard
folder that no manifest lists (a crash between the move and the manifest write) is invisible to
readers and removed by the next commit (loaderx._store.staging.remove_unlisted). A dataset with
no manifest yet (a single store, or a new dataset) gets one before any folder moves in, so
shard folders beside no manifest always mean a lost manifest, which is refused, never removed.

Before changing a manifest, a writer settles an append in flight that a killed writer left
(`settle_pending`, see loaderx._store.manifest) and seals the tail's count (`seal_tail`).

This module stays interpreted: it runs once per open, commit or rollover, never on a read path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from loaderx._os.folder_swap import fsync_folder
from loaderx._store.layout import (
    DELETE_JOURNAL_FILE,
    META_FILE,
    SHARD_COUNT_MAX,
    TOP_LEVEL,
    manifest_path,
    shard_folder,
    shard_name,
    shard_number,
)
from loaderx._store.manifest import (
    Manifest,
    ShardEntry,
    read_manifest,
    refuse_lost_manifest,
    write_manifest,
)
from loaderx._store.schema import SCHEMA_FILE, Schema, differences, read_schema, write_schema
from loaderx._store.shard_locks import commit_lock
from loaderx._store.staging import release_staging, remove_dead_staging, remove_unlisted
from loaderx._store.zrecord import Zrecord
from loaderx.errors import ManifestError, SchemaError, StoreLockedError


def refuse_unfinished_delete(folder: str, manifest: Manifest) -> None:
    """Under the commit lock, for a commit that has no handle on the shards: refuses while a
    killed delete over several shards waits to be finished (loaderx._store.delete_journal),
    which only a writable open of the dataset can do."""
    mid_delete = any(entry.records_before is not None for entry in manifest.shards)
    if mid_delete and os.path.exists(os.path.join(folder, DELETE_JOURNAL_FILE)):
        raise ManifestError(
            f"{folder!r}: a delete over several shards was interrupted by a crash; open the "
            "dataset writable once (DenseDataset(path) or RaggedDataset(path)) to finish it"
        )


def _store_length(folder: str) -> int:
    """The record count of the store at folder, from a handle opened for just that."""
    with Zrecord(folder, create=False) as store:
        return len(store)


def check_staged(folder: str, schema: Schema) -> int:
    """A staged shard's record count, after checking it is one complete single-store dataset."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"staged shard {folder!r} is not a folder")
    if os.path.exists(manifest_path(folder)):
        raise ManifestError(f"staged shard {folder!r} is itself sharded; stage single stores")
    if not os.path.isfile(os.path.join(folder, META_FILE)):
        raise ManifestError(f"staged shard {folder!r} has no {META_FILE}: it is not a store")
    try:
        found = read_schema(folder)
    except FileNotFoundError:
        raise SchemaError(f"staged shard {folder!r} has no {SCHEMA_FILE}") from None
    lines = differences(found, schema)
    if lines:
        raise SchemaError(f"staged shard {folder!r} has another schema: " + "; ".join(lines))
    return _store_length(folder)


def _prepare_dataset(folder: str, schema: Schema) -> bool:
    """Checks the dataset's own schema, or writes it when the folder is a new dataset (and then
    returns True, so that a failed commit can take it away again)."""
    try:
        found = read_schema(folder)
    except FileNotFoundError:
        if os.path.isfile(os.path.join(folder, META_FILE)):
            raise SchemaError(
                f"{folder!r} is a Zrecord store without {SCHEMA_FILE}; refusing to add shards"
            ) from None
        write_schema(folder, schema)
        return True
    lines = differences(found, schema)
    if lines:
        raise SchemaError(
            f"{folder!r} holds a dataset with another schema than the shards: " + "; ".join(lines)
        )
    return False


def current_manifest(folder: str, tail_records: int | None = None) -> Manifest:
    """The manifest to extend: the written one, or the implied one of a single-store or new
    dataset (the top-level store as shard 0, or no shards). The commit lock must be held.
    tail_records, when the caller has the tail store open, is its length (not reopened)."""
    found = read_manifest(folder)
    if found is not None:
        refuse_unfinished_delete(folder, found)
        return settle_pending(folder, found)
    if os.path.isfile(os.path.join(folder, META_FILE)):
        count = _store_length(folder) if tail_records is None else tail_records
        return Manifest([ShardEntry(TOP_LEVEL, count)])
    return Manifest([])


def settle_pending(
    folder: str, manifest: Manifest, appending_length: int | None = None
) -> Manifest:
    """Under the commit lock: writes `manifest` back with its append in flight resolved (module
    doc) and removes the pending shards it dropped; returns what it wrote. A manifest without
    one is returned unchanged. appending_length is the length of the store taking the tail's
    part, when the caller has it open (it is reopened otherwise)."""
    position = manifest.appending
    if position is None:
        return manifest
    if appending_length is None:
        appending_length = _store_length(shard_folder(folder, manifest.shards[position].name))
    settled = manifest.resolved(appending_length)
    settled.generation = manifest.generation + 1
    write_manifest(folder, settled)
    remove_unlisted(folder, settled)
    return settled


def next_shard_number(manifest: Manifest) -> int:
    numbers = [shard_number(entry.name) for entry in manifest.shards]
    return max((n for n in numbers if n is not None), default=-1) + 1


def seal_tail(folder: str, manifest: Manifest, tail_records: int | None = None) -> None:
    """Sets the tail entry's count to its store's length (appends may have run ahead)."""
    if manifest.shards:
        tail = manifest.shards[-1]
        if tail_records is None:
            tail_records = _store_length(shard_folder(folder, tail.name))
        tail.records = tail_records
        tail.records_before = None


def commit_shards_locked(
    folder: str,
    staged: list[str],
    schema: Schema,
    tail_records: int | None = None,
    appending: int | None = None,
) -> Manifest:
    """commit_shards for a caller that already holds the commit lock. A caller that has the
    dataset's tail store open passes its length as tail_records (it is then not reopened).

    appending: the tail's count once a part of the same append is in (> tail_records). The
    shards are then listed as pending and the returned manifest has an append in flight (module
    doc): the caller appends the tail's part, then settles it with settle_pending."""
    assert appending is None or (tail_records is not None and appending > tail_records)
    with sealing_single_store(folder, tail_records):
        return _commit_shards_locked(folder, staged, schema, tail_records, appending)


@contextmanager
def sealing_single_store(folder: str, tail_records: int | None) -> Iterator[None]:
    """A commit into a single-store dataset seals its store as shard '.'. That store's writer
    takes no commit lock, so the commit claims the store's writer lock for its whole length
    (StoreLockedError while a handle, in this or another process, writes it); a handle that
    opened it as a single store then refuses its first append (loaderx._data.dataset_base). A caller
    passing tail_records has the store open and claimed already."""
    if tail_records is not None or read_manifest(folder) is not None:
        yield
        return
    if not os.path.isfile(os.path.join(folder, META_FILE)):
        yield  # a new dataset: nothing to seal
        return
    # The commit that seals the store keeps the manifest in step with it: no shard check.
    with Zrecord(folder, create=False, _dataset_owned=True) as store:
        store.claim_writer()
        yield


def _refuse_shard_folders(folder: str, staged: list[str]) -> None:
    """A staged folder that is the dataset's own top-level store or one of its shard folders
    would be renamed away from the name its manifest lists (the dataset then no longer opens),
    or removed as a crash's leftover before the move."""
    home = os.path.realpath(folder)
    for path in staged:
        found = os.path.realpath(path)
        parent, name = os.path.split(found)
        if found == home or (parent == home and shard_number(name) is not None):
            raise ValueError(
                f"staged shard {path!r} is a shard folder of {folder!r} already; build new "
                "shards in staging_folder(path)"
            )


def _commit_shards_locked(
    folder: str,
    staged: list[str],
    schema: Schema,
    tail_records: int | None,
    appending: int | None,
) -> Manifest:
    for path in staged:
        check_staged(path, schema)
    _refuse_shard_folders(folder, staged)
    with claiming_staged(staged) as counts:
        return _commit_claimed(folder, staged, schema, tail_records, appending, counts)


@contextmanager
def claiming_staged(staged: list[str]) -> Iterator[list[int]]:
    """Claims each staged store's writer lock for the length of its commit and yields their
    record counts. A handle writing a staged store (in this or another process) refuses the
    commit with StoreLockedError: it could append between the count and the rename, or after
    the commit through a path that no longer shows the store is a shard; either way the
    manifest would list another count than the shard holds, and the dataset no longer open."""
    opened: list[Zrecord] = []
    try:
        for path in staged:
            # The commit keeps the manifest in step with the store: no shard check.
            opened.append(Zrecord(path, create=False, _dataset_owned=True))
            try:
                opened[-1].claim_writer()
            except StoreLockedError as error:
                raise StoreLockedError(
                    f"commit refused: staged shard {path!r} is open for writing in another "
                    f"handle (close it before the commit): {error}"
                ) from None
        yield [len(store) for store in opened]
    finally:
        for store in opened:
            store.close()


def _commit_claimed(
    folder: str,
    staged: list[str],
    schema: Schema,
    tail_records: int | None,
    appending: int | None,
    counts: list[int],
) -> Manifest:
    """_commit_shards_locked once the staged stores are checked and claimed."""
    had_manifest = os.path.lexists(manifest_path(folder))
    if not had_manifest:
        refuse_lost_manifest(folder)  # its shards are no crash's leftovers: keep them
    manifest = current_manifest(folder, tail_records)
    if len(manifest.shards) + len(staged) > SHARD_COUNT_MAX:
        raise ManifestError(
            f"{folder!r} has {len(manifest.shards)} shards; adding {len(staged)} would pass "
            f"the limit of {SHARD_COUNT_MAX}"
        )
    created = _prepare_dataset(folder, schema)
    moved: list[tuple[str, str]] = []
    try:
        remove_unlisted(folder, manifest)
        remove_dead_staging(folder)
        seal_tail(folder, manifest, tail_records)
        if not had_manifest:
            # Before the first shard folder moves in (manifest module doc, "A lost manifest"):
            # a kill from here on leaves shard folders only beside a manifest.
            write_manifest(folder, manifest)
        if appending is not None:
            manifest.shards[-1].records_after = appending
        first = next_shard_number(manifest)
        for offset, (path, count) in enumerate(zip(staged, counts)):
            name = shard_name(first + offset)
            target = os.path.join(folder, name)
            os.rename(path, target)
            moved.append((path, target))
            manifest.shards.append(ShardEntry(name, count, pending=appending is not None))
        fsync_folder(folder)
        manifest.generation += 1
        write_manifest(folder, manifest)
    except BaseException:
        for path, target in reversed(moved):
            os.rename(target, path)
        if not had_manifest:  # the folders are back out: the dataset's old layout again
            with suppress(FileNotFoundError):
                os.unlink(manifest_path(folder))
        if created:
            os.unlink(os.path.join(folder, SCHEMA_FILE))
        raise
    for path in staged:
        release_staging(path)
    return manifest


def commit_shards(
    folder: str | os.PathLike[str], staged_folders: list[str], schema: Schema
) -> Manifest:
    """Adds complete staged shards to the dataset at `folder` in one atomic manifest write.

    Each staged folder must be a complete single-store dataset with exactly `schema`; they
    become the next shards in the order given. Creates the dataset (schema and manifest) if it
    does not exist; a single-store dataset becomes sharded with its store as shard 0 ("."). The
    staged folders are best placed with staging_folder(folder): the move is then a rename. Runs
    under the commit lock, so independent jobs may commit at once. On any failure the dataset
    is left as it was (folders already moved are moved back) and the error is raised.
    """
    folder = os.fspath(folder)
    staged = [os.fspath(path) for path in staged_folders]
    if len(set(os.path.realpath(p) for p in staged)) != len(staged):
        raise ValueError("a staged shard folder is listed twice")
    os.makedirs(folder, exist_ok=True)
    with commit_lock(folder):
        return commit_shards_locked(folder, staged, schema)
