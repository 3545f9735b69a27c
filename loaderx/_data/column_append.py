"""Appending to several datasets at once (the columns of one table), landing in all or none.

Used by loaderx.ray's write_dataset(append=True): every column is its own dataset with its own
manifest, and the rows added must appear in all of them or in none, also when the writer is
killed at any moment.

Each column is its own dataset with its own manifest (shards.msgpack), so no single manifest
write can add rows to all of them. The append therefore gives the columns one shared switch:
a journal folder path/.loaderx-append-<id> holding, per column i, the manifest before
(old/<i>) and after (new/<i>) the append, and a symlink `current` naming "old" or "new".

  1. Under every column's commit lock (taken in path order, so two appends never deadlock):
     check the schemas, plan each new manifest (tail sealed, the staged shards as the next
     shard names), and build the journal in the staging folder, fsynced, then rename it into
     path. Nothing visible has changed; every byte the append needs is allocated by now.
  2. Replace each column's shards.msgpack by a symlink to ../.loaderx-append-<id>/current/<i>
     (it still reads the old manifest, so readers see the same dataset as before), then move
     the staged shards into the column folders (unlisted, so invisible). In this order a
     column that had no manifest has one before any shard folder moves in
     (loaderx._store.manifest, "A lost manifest").
  3. The commit point: one rename turns `current` from "old" to "new"; every column shows
     its new manifest at the same instant.
  4. Detach: rename new/<i> over each column's symlink (same bytes, a regular file again),
     then remove the journal.

An exception before step 3 removes the moved shards, then puts each column's old manifest
back (rename old/<i> over the symlink, no new bytes needed, so it works on a full disk). A
killed driver leaves either state consistent for readers (all columns old, or all new); the
next write_dataset(append=True) into path, or recover_appends(path), finishes the job as the
journal's `current` says: forward from step 3 on, back before it. Until then the column
folders depend on the journal: do not delete .loaderx-append-* folders by hand. A column
that another writer changed meanwhile (its manifest is no longer our symlink) is left alone.
Needs symlinks (POSIX; see the README).
"""

from __future__ import annotations

import os
import shutil
import uuid
import warnings
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any, Final

import msgpack

from loaderx.errors import ManifestError, SchemaError
from loaderx._os.paths import PathArg, fs_path
from loaderx._store.schema import Schema, differences, read_schema, schema_path, write_schema
from loaderx._os.folder_swap import fsync_folder
from loaderx._store.layout import META_FILE, SHARD_COUNT_MAX, TOP_LEVEL, manifest_path, shard_name
from loaderx._store.manifest import (
    Manifest,
    ShardEntry,
    parse_manifest,
    read_manifest,
    refuse_lost_manifest,
)
from loaderx._store.shard_commit import (
    check_staged,
    current_manifest,
    next_shard_number,
    refuse_unfinished_delete,
    seal_tail,
    sealing_single_store,
    settle_pending,
)
from loaderx._store.shard_locks import commit_lock
from loaderx._store.staging import remove_unlisted

_JOURNAL_PREFIX: Final = ".loaderx-append-"
_FINISHED_PREFIX: Final = ".loaderx-appended-"  # a finished journal, being removed
_JOURNAL_RECORD: Final = "record.msgpack"
_JOURNAL_FORMAT: Final = "loaderx-ray-append"


class _ColumnPlan:
    """One column of an append: where it is, its manifests before and after, the moves."""

    def __init__(self, relative: str, folder: str, schema: Schema, created: bool,
                 old_bytes: bytes | None, old: Manifest, new: Manifest,
                 moves: list[tuple[str, str]]) -> None:
        self.relative = relative
        self.folder = folder
        self.schema = schema
        self.created = created  # the folder held no dataset: the append creates it
        self.old_bytes = old_bytes  # the manifest file's bytes, None if it had none
        self.old = old
        self.new = new
        self.moves = moves  # (staged shard folder, its place in the column)


def _pack(manifest: Manifest) -> bytes:
    data = msgpack.packb(manifest.to_dict(), use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def _commit_locks(folders: Iterable[str]) -> Iterator[None]:
    """Every folder's commit lock, taken in one global order (real paths, sorted)."""
    with ExitStack() as stack:
        for folder in sorted({os.path.realpath(f) for f in folders}):
            stack.enter_context(commit_lock(folder))
        yield


@contextmanager
def _single_stores_claimed(folders: Iterable[str]) -> Iterator[None]:
    """A column that is still a single store is sealed by this append; its writer takes no
    commit lock, so the append holds the store's writer lock too, until it ends
    (StoreLockedError, before anything is written, while a handle appends to that column)."""
    with ExitStack() as stack:
        for folder in folders:
            stack.enter_context(sealing_single_store(folder, None))
        yield


def _plan_column(path: str, relative: str, staged: list[str], schema: Schema) -> _ColumnPlan:
    """Under the column's commit lock: checks it and computes its manifest after the append."""
    folder = os.path.join(path, relative)
    counts = [check_staged(s, schema) for s in staged]
    if os.path.isfile(schema_path(folder)):
        lines = differences(read_schema(folder), schema)
        if lines:
            raise SchemaError(f"cannot append to {folder!r}: " + "; ".join(lines))
        created = False
    elif os.path.isfile(os.path.join(folder, META_FILE)):
        raise SchemaError(f"{folder!r} is a Zrecord store without a schema; refusing to append")
    else:
        created = True
    found = read_manifest(folder)
    if found is not None:
        refuse_unfinished_delete(folder, found)
        settle_pending(folder, found)  # a killed sharded append's state, before we build on it
    else:
        refuse_lost_manifest(folder)  # its shards are no crash's leftovers: keep them
    old_bytes = _read_bytes(manifest_path(folder))
    old = (parse_manifest(old_bytes, manifest_path(folder)) if old_bytes is not None
           else current_manifest(folder))
    if len(old.shards) + len(staged) > SHARD_COUNT_MAX:
        raise ManifestError(f"{folder!r} has {len(old.shards)} shards; adding {len(staged)} "
                            f"would pass the limit of {SHARD_COUNT_MAX}")
    remove_unlisted(folder, old)  # left by a crashed commit
    new = Manifest([entry.copy() for entry in old.shards], old.generation + 1)
    seal_tail(folder, new)
    first = next_shard_number(old)
    moves = []
    for offset, (source, count) in enumerate(zip(staged, counts)):
        name = shard_name(first + offset)
        moves.append((source, os.path.join(folder, name)))
        new.shards.append(ShardEntry(name, count))
    return _ColumnPlan(relative, folder, schema, created, old_bytes, old, new, moves)


def _build_journal(build: str, plans: list[_ColumnPlan]) -> None:
    """The journal's whole content, fsynced, in `build` (a folder in the staging area)."""
    os.makedirs(os.path.join(build, "old"))
    os.mkdir(os.path.join(build, "new"))
    for index, plan in enumerate(plans):
        old = plan.old_bytes if plan.old_bytes is not None else _pack(plan.old)
        _write_synced(os.path.join(build, "old", str(index)), old)
        _write_synced(os.path.join(build, "new", str(index)), _pack(plan.new))
    record = {
        "format": _JOURNAL_FORMAT,
        "version": 1,
        "columns": [{"folder": p.relative, "had_manifest": p.old_bytes is not None,
                     "created": p.created} for p in plans],
    }
    _write_synced(os.path.join(build, _JOURNAL_RECORD), msgpack.packb(record, use_bin_type=True))
    os.symlink("old", os.path.join(build, "current"))
    os.symlink("new", os.path.join(build, "next"))
    for folder in ("old", "new", "."):
        fsync_folder(os.path.join(build, folder))


def _link_target(journal: str, index: int, folder: str) -> str:
    """What a column's manifest symlink holds: relative, so that path may be moved."""
    target = os.path.join(os.path.realpath(journal), "current", str(index))
    return os.path.relpath(target, os.path.realpath(folder))


def _link_column(journal: str, index: int, plan: _ColumnPlan) -> None:
    """Step 2 for one column: its manifest becomes the journal's symlink (same content)."""
    manifest = manifest_path(plan.folder)
    temporary = f"{manifest}.{os.path.basename(journal)}"
    os.symlink(_link_target(journal, index, plan.folder), temporary)
    os.replace(temporary, manifest)
    if plan.created:  # only now a dataset (empty, like every other new column until step 3)
        write_schema(plan.folder, plan.schema)
    fsync_folder(plan.folder)


def _read_journal(journal: str) -> list[dict[str, Any]]:
    with open(os.path.join(journal, _JOURNAL_RECORD), "rb") as f:
        record = msgpack.unpackb(f.read(), raw=False)
    if not isinstance(record, dict) or record.get("format") != _JOURNAL_FORMAT:
        raise ManifestError(f"{journal!r} is not a loaderx append journal")
    columns = record.get("columns")
    if not isinstance(columns, list):
        raise ManifestError(f"{journal!r}: bad column list")
    return columns


def _finish(path: str, journal: str) -> bool:
    """Under every column's commit lock: completes the append the journal records, forward if
    `current` names "new", else back; then removes the journal. Returns whether it went
    forward. On an error the journal stays (columns may still link to it): run it again."""
    forward = os.readlink(os.path.join(journal, "current")) == "new"
    for index, column in enumerate(_read_journal(journal)):
        folder = os.path.join(path, str(column["folder"]))
        if not os.path.isdir(folder):
            continue
        manifest = manifest_path(folder)
        temporary = f"{manifest}.{os.path.basename(journal)}"
        if os.path.islink(temporary):
            os.unlink(temporary)
        ours = (os.path.islink(manifest)
                and os.readlink(manifest) == _link_target(journal, index, folder))
        if forward:
            if ours:
                os.replace(os.path.join(journal, "new", str(index)), manifest)
        else:
            # The shards this append had moved in go while a manifest is still in place: shard
            # folders beside no manifest would mean a lost one (refuse_lost_manifest).
            listed = read_manifest(folder) or Manifest([ShardEntry(TOP_LEVEL, 0)])
            remove_unlisted(folder, listed)
            if ours and column["had_manifest"]:
                os.replace(os.path.join(journal, "old", str(index)), manifest)
            elif ours:
                os.unlink(manifest)
            if (column["created"] and not os.path.lexists(manifest)
                    and not os.path.isfile(os.path.join(folder, META_FILE))):
                with suppress(FileNotFoundError):
                    os.unlink(schema_path(folder))
        fsync_folder(folder)
    # No column needs the journal now. Renamed away first, so that a kill during the removal
    # never leaves a journal that lost its record.
    ident = os.path.basename(journal)[len(_JOURNAL_PREFIX):]
    finished = os.path.join(path, _FINISHED_PREFIX + ident)
    os.rename(journal, finished)
    fsync_folder(path)
    shutil.rmtree(finished)
    return forward


def refuse_some_new(created: dict[str, bool]) -> None:
    """A new column beside existing ones would hold only the appended rows: refused."""
    if len(set(created.values())) > 1:
        raise ValueError(
            "append=True needs every column to exist already, or none: "
            f"{[f for f, new in created.items() if new]} would hold only the new rows, "
            f"{[f for f, new in created.items() if not new]} all of them")


def append_all(path: str, staging: str,
                columns: list[tuple[str, list[str], Schema]]) -> None:
    """Appends each (folder, staged shards, schema) column in one commit (see above)."""
    folders = [os.path.join(path, relative) for relative, _, _ in columns]
    for folder in folders:
        os.makedirs(folder, exist_ok=True)  # the commit lock lives there
    with _commit_locks(folders), _single_stores_claimed(folders):
        plans = [_plan_column(path, *column) for column in columns]
        refuse_some_new({p.relative: p.created for p in plans})  # again, under the locks
        name = f"{_JOURNAL_PREFIX}{uuid.uuid4().hex[:12]}"
        build = os.path.join(staging, name)
        journal = os.path.join(path, name)
        try:
            _build_journal(build, plans)
            os.rename(build, journal)
            fsync_folder(path)
            for index, plan in enumerate(plans):
                _link_column(journal, index, plan)
            for plan in plans:
                for source, target in plan.moves:
                    os.rename(source, target)
                fsync_folder(plan.folder)
            os.replace(os.path.join(journal, "next"), os.path.join(journal, "current"))
        except BaseException:
            # Back in every column; forward only when interrupted right after the commit point.
            # Without a journal nothing visible has changed (the caller removes the staging).
            if os.path.lexists(journal):
                _finish(path, journal)
            raise
        try:
            fsync_folder(journal)  # the commit point is durable
            _finish(path, journal)
        except OSError as exc:
            warnings.warn(f"the append to {path!r} has landed in every column, but tidying up "
                          f"failed ({exc}); recover_appends({path!r}) finishes it", stacklevel=3)


def recover_appends(path: PathArg) -> int:
    """Finishes appends that a killed write_dataset(append=True) left halfway in path: each
    goes forward in every column if it had reached its commit point, else back in every
    column. Readers never need this (they see all columns before or all after); it makes the
    column folders self-contained again. Returns how many it finished; the next append into
    path runs it first."""
    path = os.path.abspath(fs_path(path))
    finished = 0
    for name in sorted(os.listdir(path)):
        journal = os.path.join(path, name)
        if name.startswith(_FINISHED_PREFIX):
            shutil.rmtree(journal, ignore_errors=True)
        if not name.startswith(_JOURNAL_PREFIX) or not os.path.isdir(journal):
            continue
        try:
            columns = _read_journal(journal)
        except FileNotFoundError:
            continue  # finished meanwhile
        folders = [os.path.join(path, str(c["folder"])) for c in columns]
        # An append in progress holds all these locks from before its journal exists until
        # after it is gone: holding them and still finding the journal means its writer died.
        with _commit_locks([f for f in folders if os.path.isdir(f)]):
            if os.path.isdir(journal):
                _finish(path, journal)
                finished += 1
    return finished


__all__ = ["append_all", "recover_appends", "refuse_some_new"]
