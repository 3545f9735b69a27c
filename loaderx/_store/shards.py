"""shards.msgpack: the manifest of a sharded dataset, and the atomic commit that adds shards.

A sharded dataset folder holds
    schema.msgpack     the dataset's schema (as for a single-store dataset)
    shards.msgpack     this manifest: the format version and the ordered list of shards
    shards.delete      only during a delete over several shards (loaderx._store.delete_journal)
    shard-000001/ ...  one ordinary single-store dataset folder per shard (its own
                       schema.msgpack, identical to the top one, plus meta.zr and chunks)
Shard k's records are the global indices [sum of the counts before k, ... + its count).

A single-store dataset (store files at the top level, no manifest) keeps opening as it always
did. When it rolls over, the manifest names "." (the top-level store, left where it is) as
shard 0 and the new shards follow as shard-000001, shard-000002, ...; nothing is moved.

The counts. Each entry records how many records its store held when the manifest was written.
A shard's store must hold exactly that many, with two exceptions that crashes make legitimate:
- the last shard (the tail) may hold more: appends fill it without rewriting the manifest;
- an entry with `records_before` is mid-delete: its store may hold any count from `records` to
  `records_before` (the delete is written to the manifest first, then to the store).
Anything else ("counts disagree") means a shard was replaced, truncated or lost, and opening
refuses it naming the shard. Readers always use the store's own length.

An append in flight. A batch larger than the tail's room is written as new shards plus the
tail's part, and must appear whole or not at all even if its process is killed. The manifest
then goes through one extra state (written with version 2, so that a loaderx that cannot read
it refuses it): the new shards are listed with `pending`, and the tail entry carries
`records_after`, its count once its part is in. The tail's own store append is the commit
point: every reader resolves the state by the tail store's length (`Manifest.resolved`): below
`records_after`, the pending shards are not part of the dataset (the append never happened);
at `records_after`, they are (it happened, only the final manifest write is missing). Every
writer, under the commit lock, first writes the resolved manifest back (`settle_pending`), so
no later append can move the tail past `records_after` while the state is still unresolved.

Commits. `commit_shards` moves complete staged shard folders in as the next shard names and
rewrites the manifest atomically (temporary file, fsync, rename, fsync of the folder), under a
commit lock (flock on `shards.lock` in the dataset folder), so independent jobs may append
shards at the same time. A shard folder that no manifest lists (a crash between the move and the
manifest write) is invisible to readers and removed by the next commit.

This module stays interpreted: it runs once per open, commit or rollover, never on a read path.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final

import msgpack

from loaderx._os import claims
from loaderx._os import descriptors
from loaderx.errors import ManifestError, SchemaError, StoreLockedError
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor
from loaderx._os.paths import TEMPORARY_MARK, is_file, write_file_atomically
from loaderx._store.schema import SCHEMA_FILE, Schema, differences, read_schema, write_schema

__all__ = [
    "SHARD_COUNT_MAX", "SHARD_RECORDS_MAX", "Manifest", "ShardEntry", "commit_shards",
    "discard_staging", "read_manifest", "release_staging", "staging_folder",
]

MANIFEST_FILE: Final = "shards.msgpack"
MANIFEST_FORMAT: Final = "loaderx-shards"
MANIFEST_VERSION: Final = 1
# The version of a manifest with an append in flight (see the module doc).
MANIFEST_VERSION_APPENDING: Final = 2
LOCK_FILE: Final = "shards.lock"
# Opens hold it shared, deletes exclusively (reading_lock, deleting_lock).
READERS_LOCK_FILE: Final = "shards.readers.lock"
# The journal of a delete over several shards (loaderx._store.delete_journal).
DELETE_JOURNAL_FILE: Final = "shards.delete"
STAGING_PREFIX: Final = ".staging-"
# The name a staging folder's marker is made and locked under before it is renamed into place
# (loaderx._os.claims).
_CLAIM_PREFIX: Final = ".claim-"
# The name of the top-level store when a single-store dataset has rolled over.
TOP_LEVEL: Final = "."

# A store's record limit (loaderx._store.zrecord.RECORD_COUNT_MAX; limits.zig record_count_max): the
# default capacity of a shard before appends roll over to a new one.
SHARD_RECORDS_MAX: Final = 1 << 24
# Shards a dataset may hold (limits.zig view_shard_count_max): 2^20 shards of 2^24 records
# each is 2^44 records, far inside the int64 index space.
SHARD_COUNT_MAX: Final = 1 << 20
RECORD_COUNT_MAX: Final = SHARD_COUNT_MAX * SHARD_RECORDS_MAX

_GENERATION_MASK: Final = (1 << 64) - 1
# Lock files are opened without following a link (O_NOFOLLOW; Windows has no such flag).
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)

_META_FILE: Final = "meta.zr"
_NAME_PATTERN: Final = re.compile(r"shard-([0-9]{6,7})")
# 2^20 entries of a name and two ints stay well under this.
_MANIFEST_BYTES_MAX: Final = 1 << 26


class ShardEntry:
    """One shard: its folder name inside the dataset and its record count (see the module doc)."""

    name: str
    records: int
    records_before: int | None
    # An append in flight (module doc): the tail's count once its part is in ...
    records_after: int | None
    # ... and the shards that the append adds after it.
    pending: bool

    def __init__(
        self,
        name: str,
        records: int,
        records_before: int | None = None,
        records_after: int | None = None,
        pending: bool = False,
    ) -> None:
        self.name = name
        self.records = records
        self.records_before = records_before
        self.records_after = records_after
        self.pending = pending

    def accepts(self, length: int, is_tail: bool) -> bool:
        """Whether a store holding `length` records agrees with this entry."""
        if self.records_before is not None and self.records <= length <= self.records_before:
            return True
        return length >= self.records if is_tail else length == self.records

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"name": self.name, "records": self.records}
        if self.records_before is not None:
            entry["records_before"] = self.records_before
        if self.records_after is not None:
            entry["records_after"] = self.records_after
        if self.pending:
            entry["pending"] = True
        return entry

    def copy(self) -> ShardEntry:
        return ShardEntry(
            self.name, self.records, self.records_before, self.records_after, self.pending
        )

    def _key(self) -> tuple[str, int, int | None, int | None, bool]:
        return (self.name, self.records, self.records_before, self.records_after, self.pending)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardEntry):
            return NotImplemented
        return self._key() == other._key()

    def __repr__(self) -> str:
        extra = "" if self.records_before is None else f", records_before={self.records_before}"
        if self.records_after is not None:
            extra += f", records_after={self.records_after}"
        if self.pending:
            extra += ", pending=True"
        return f"ShardEntry({self.name!r}, records={self.records}{extra})"


class Manifest:
    """The ordered shards of a dataset; `generation` grows by one with every write. The format
    version it is written with follows from its content (to_dict)."""

    generation: int
    shards: list[ShardEntry]

    def __init__(self, shards: Sequence[ShardEntry], generation: int = 0) -> None:
        self.generation = generation
        self.shards = list(shards)

    @property
    def records(self) -> int:
        """The total of the recorded counts (the tail's store may hold more)."""
        return sum(entry.records for entry in self.shards)

    @property
    def names(self) -> list[str]:
        return [entry.name for entry in self.shards]

    @property
    def appending(self) -> int | None:
        """The position of the entry with an append in flight (module doc), or None."""
        for position, entry in enumerate(self.shards):
            if entry.records_after is not None:
                return position
        return None

    def resolved(self, appending_length: int) -> Manifest:
        """This manifest with its append in flight settled by the length of the store that
        takes the tail's part (module doc): the pending shards kept when the store reached
        records_after, dropped otherwise. A manifest without one comes back as a copy."""
        position = self.appending
        entries = [entry.copy() for entry in self.shards]
        if position is not None:
            entry = entries[position]
            assert entry.records_after is not None
            if appending_length >= entry.records_after:
                entry.records = entry.records_after
                for added in entries[position + 1 :]:
                    added.pending = False
            else:
                entries = entries[: position + 1]
            entry.records_after = None
        return Manifest(entries, self.generation)

    def to_dict(self) -> dict[str, Any]:
        version = MANIFEST_VERSION if self.appending is None else MANIFEST_VERSION_APPENDING
        return {
            "format": MANIFEST_FORMAT,
            "version": version,
            # Generations only tell versions apart (loaderx._store.sharded's signature), so they wrap
            # at msgpack's largest integer rather than fail the write: a damaged manifest may
            # hold any uint64 (one read near 2^64 failed its next write with OverflowError).
            "generation": self.generation & _GENERATION_MASK,
            "shards": [entry.to_dict() for entry in self.shards],
        }

    def __repr__(self) -> str:
        return f"Manifest(generation={self.generation}, shards={self.shards!r})"


def manifest_path(folder: str) -> str:
    return os.path.join(folder, MANIFEST_FILE)


def shard_name(number: int) -> str:
    """The folder name of shard `number` (shard-000001; "." is only ever the legacy shard 0)."""
    if number < 0 or number >= SHARD_COUNT_MAX:
        raise ValueError(f"shard number {number} is outside 0..{SHARD_COUNT_MAX - 1}")
    return f"shard-{number:06d}"


def shard_number(name: str) -> int | None:
    """The number in a shard folder name, 0 for ".", None for anything else."""
    if name == TOP_LEVEL:
        return 0
    found = _NAME_PATTERN.fullmatch(name)
    return int(found.group(1)) if found else None


def sharded_dataset_of(folder: str) -> str | None:
    """The sharded dataset whose manifest lists the store at `folder`, found by its place: a
    shard folder (shard-000001) beside a manifest, or a dataset folder holding a manifest, whose
    own store is the top-level shard '.'. None for any other folder. Reads no manifest."""
    real = os.path.realpath(folder)
    if is_file(manifest_path(real)):
        return real
    parent, name = os.path.split(real)
    if shard_number(name) is not None and is_file(manifest_path(parent)):
        return parent
    return None


def shard_folder(folder: str, name: str) -> str:
    """The path of a shard's store folder ("." is the dataset folder itself)."""
    return folder if name == TOP_LEVEL else os.path.join(folder, name)


# --- reading --------------------------------------------------------------------------------


# The fields a shard entry may have (ShardEntry.to_dict). A newer manifest format would bump
# the version, so any other key is damage: a flipped byte in "records_before" must not make a
# delete in progress read as settled.
_ENTRY_FIELDS: Final = frozenset({"name", "records", "records_before", "records_after", "pending"})


def _entry(raw: object, position: int, path: str) -> ShardEntry:
    if not isinstance(raw, dict):
        raise ManifestError(f"{path}: shard entry {position} is not a map")
    unknown = sorted(str(key) for key in raw if key not in _ENTRY_FIELDS)
    if unknown:
        raise ManifestError(f"{path}: shard entry {position} has unknown fields {unknown}")
    name = raw.get("name")
    records = raw.get("records")
    before = raw.get("records_before")
    after = raw.get("records_after")
    pending = raw.get("pending", False)
    if not isinstance(name, str) or shard_number(name) is None:
        raise ManifestError(f"{path}: shard entry {position} has a bad name {name!r}")
    if name == TOP_LEVEL and position != 0:
        raise ManifestError(f"{path}: '.' (the top-level store) may only be shard 0")
    for what, value in (("records", records), ("records_before", before), ("records_after", after)):
        if value is None and what != "records":
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ManifestError(f"{path}: shard {name!r} has a bad {what} {value!r}")
        if value > SHARD_RECORDS_MAX:
            raise ManifestError(
                f"{path}: shard {name!r} claims {value} records; a shard holds at most "
                f"{SHARD_RECORDS_MAX}"
            )
    assert isinstance(records, int)
    if before is not None and before < records:
        raise ManifestError(f"{path}: shard {name!r} has records_before below records")
    if after is not None and (after <= records or before is not None):
        raise ManifestError(
            f"{path}: shard {name!r} has records_after not above records, or with records_before"
        )
    if not isinstance(pending, bool):
        raise ManifestError(f"{path}: shard {name!r} has a bad pending {pending!r}")
    assert after is None or isinstance(after, int)
    return ShardEntry(name, records, before, after, pending)


def _check_appending(entries: list[ShardEntry], version: int, path: str) -> None:
    """An append in flight is one entry with records_after followed by its pending shards only
    (module doc), in a version 2 manifest; a manifest without one has no pending shard."""
    marked = [i for i, entry in enumerate(entries) if entry.records_after is not None]
    pending = [i for i, entry in enumerate(entries) if entry.pending]
    if not marked and not pending:
        return
    if (
        len(marked) != 1
        or version != MANIFEST_VERSION_APPENDING
        or pending != list(range(marked[0] + 1, len(entries)))
        or not pending
    ):
        raise ManifestError(
            f"{path}: a malformed append in flight (records_after on one shard, then only "
            "pending shards, in a version 2 manifest)"
        )
    if any(entry.records_before is not None for entry in entries):
        # Every writer finishes a killed delete before it appends, and a delete starts from a
        # settled manifest: the two are never in flight at once. Resolving the append would
        # drop shards of the delete as if they had never been committed.
        raise ManifestError(f"{path}: an append in flight in a manifest mid-delete")


def _check_numbering(entries: list[ShardEntry], path: str) -> None:
    """Shards are numbered in the order they were committed, each one above the one before
    (commit_shards_locked), so the list is a run of consecutive numbers. Anything else is a
    damaged manifest: two entries swapped would read every record of both at the other's global
    indices, and a dropped entry would shift every later record down and leave its folder
    unlisted, for the next commit to remove as a crash's leftover (remove_unlisted)."""
    numbers = [shard_number(entry.name) for entry in entries]
    if numbers and numbers[0] != 0:
        raise ManifestError(
            f"{path}: the first shard is {entries[0].name!r}; a dataset's shards start at '.' "
            "or shard-000000, so an entry is missing"
        )
    for position in range(1, len(numbers)):
        previous, number = numbers[position - 1], numbers[position]
        assert previous is not None and number is not None
        if number != previous + 1:
            raise ManifestError(
                f"{path}: shard {entries[position].name!r} follows {entries[position - 1].name!r}; "
                "shards are listed in consecutive order, so an entry is missing or out of place"
            )


def parse_manifest(data: bytes, path: str) -> Manifest:
    """A Manifest from a manifest file's bytes; ManifestError if they are not one."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError) as exc:
        raise ManifestError(f"{path} is not a valid msgpack manifest: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"{path} is not a loaderx shard manifest (no format {MANIFEST_FORMAT!r})")
    version = raw.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ManifestError(f"{path}: bad manifest version {version!r}")
    if version > MANIFEST_VERSION_APPENDING:
        raise ManifestError(
            f"{path} has manifest version {version}; this loaderx reads versions up to "
            f"{MANIFEST_VERSION_APPENDING} (upgrade loaderx)"
        )
    generation = raw.get("generation")
    shards = raw.get("shards")
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise ManifestError(f"{path}: bad generation {generation!r}")
    if not isinstance(shards, list):
        raise ManifestError(f"{path}: 'shards' must be a list")
    if len(shards) > SHARD_COUNT_MAX:
        raise ManifestError(f"{path} lists {len(shards)} shards; the limit is {SHARD_COUNT_MAX}")
    entries = [_entry(item, position, path) for position, item in enumerate(shards)]
    names = [entry.name for entry in entries]
    if len(set(names)) != len(names):
        raise ManifestError(f"{path} lists a shard twice")
    _check_numbering(entries, path)
    _check_appending(entries, version, path)
    return Manifest(entries, generation)


def read_manifest(folder: str | os.PathLike[str]) -> Manifest | None:
    """The manifest of a dataset folder, or None for a single-store (or absent) dataset."""
    path = manifest_path(os.fspath(folder))
    try:
        with descriptors.open_binary(path, "rb") as f:
            data = f.read(_MANIFEST_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ManifestError(f"{path} is a folder, not a loaderx shard manifest") from None
    if len(data) > _MANIFEST_BYTES_MAX:
        raise ManifestError(f"{path} is too large to be a loaderx shard manifest")
    manifest = parse_manifest(data, path)
    _check_top_level(os.fspath(folder), manifest, path)
    return manifest


def _check_top_level(folder: str, manifest: Manifest, path: str) -> None:
    """A store at the top level of a dataset is shard '.', the first, and only then: a dataset
    starts either as a single store (which becomes shard '.' when it rolls over) or sharded
    (its first shard shard-000000). A manifest that does not list the store there has lost
    entries: it would read the shards at shifted indices, and the next commit would remove the
    shard folders it does not list."""
    listed = bool(manifest.shards) and manifest.shards[0].name == TOP_LEVEL
    if not listed and is_file(os.path.join(folder, _META_FILE)):
        raise ManifestError(
            f"{path} does not list the store at the top level of {folder!r} as shard '.': "
            "entries are missing"
        )


# --- writing --------------------------------------------------------------------------------


def fsync_folder(folder: str) -> None:
    """Makes a rename or a new entry in `folder` durable (a no-op where folders cannot be synced)."""
    if sys.platform == "win32":
        return
    fd = descriptors.os_open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(folder: str | os.PathLike[str], manifest: Manifest) -> None:
    """Writes the manifest atomically: a temporary file, fsync, rename over, fsync the folder."""
    folder = os.fspath(folder)
    data = msgpack.packb(manifest.to_dict(), use_bin_type=True)
    write_file_atomically(manifest_path(folder), data)
    fsync_folder(folder)


@contextmanager
def commit_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the dataset's commit lock (an exclusive flock on shards.lock) for the block.

    Every manifest change takes it: commits, rollovers, appends to a sharded dataset and
    maintenance. The lock is per open file, so it excludes other threads of this process too;
    it is not re-entrant (code holding it calls the *_locked functions).
    """
    with _exclusive(folder, LOCK_FILE):
        yield


@contextmanager
def _exclusive(folder: str | os.PathLike[str], name: str) -> Iterator[None]:
    """An exclusive flock on the lock file `name` in folder (created if absent), for the block."""
    # A registered descriptor: a child forked while we hold the lock closes its copy, so the
    # lock ends with our close (loaderx._os.lock_descriptors).
    path = os.path.join(os.fspath(folder), name)
    try:
        # Never through a link: O_CREAT would make the file wherever the link points.
        fd = open_descriptor(path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW, 0o644)
    except OSError as error:
        if not (error.errno == errno.ELOOP and os.path.islink(path)):
            raise
        raise ManifestError(
            f"{path} is a symbolic link (to {os.readlink(path)!r}), not the dataset's lock "
            "file; loaderx makes that file itself and does not follow links out of the dataset"
        ) from None
    try:
        _lock_file(fd)
        yield
    finally:
        close_descriptor(fd)  # closing the descriptor releases the lock


@contextmanager
def reading_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the readers lock shared for the block, so that an open reads the manifest and opens
    the shards it lists while no delete runs (one that moved records in between would make the
    counts disagree). Appends and commits do not take this lock: they never invalidate what an
    open reads, so opens never wait for them. Nothing is locked where the lock file cannot be
    opened for reading (no delete ever ran, or a read-only copy without one) or on Windows (no
    shared mode); opening then relies on its retries."""
    if sys.platform == "win32":
        yield
        return
    import fcntl

    try:
        fd = open_descriptor(
            os.path.join(os.fspath(folder), READERS_LOCK_FILE), os.O_RDONLY | _NO_FOLLOW
        )
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        close_descriptor(fd)


@contextmanager
def deleting_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Holds the readers lock exclusively for the block (a delete, with the commit lock held):
    opens wait for it instead of opening shards that are moving, or taking the handles that
    would make the delete refuse."""
    with _exclusive(folder, READERS_LOCK_FILE):
        yield


def refuse_unfinished_delete(folder: str, manifest: Manifest) -> None:
    """Under the commit lock, for a commit that has no handle on the shards: refuses while a
    killed delete over several shards waits to be finished (loaderx._store.delete_journal), which only
    a writable open of the dataset can do."""
    mid_delete = any(entry.records_before is not None for entry in manifest.shards)
    if mid_delete and os.path.exists(os.path.join(folder, DELETE_JOURNAL_FILE)):
        raise ManifestError(
            f"{folder!r}: a delete over several shards was interrupted by a crash; open the "
            "dataset writable once (DenseDataset(path) or RaggedDataset(path)) to finish it"
        )


def _lock_file(fd: int) -> None:
    if sys.platform == "win32":  # Windows wheels only
        import msvcrt

        msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
    else:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)


def staging_folder(folder: str | os.PathLike[str]) -> str:
    """A fresh, empty hidden folder inside the dataset folder (created if absent) to build one
    shard in before commit_shards moves it in. Being inside the dataset, the move is a rename.

    It is claimed (loaderx._os.claims) by this process until commit_shards moves it in or
    discard_staging removes it; a folder whose claim nobody holds belongs to a process that was
    killed, and the next commit removes it (remove_dead_staging)."""
    folder = os.fspath(folder)
    return claims.claim_folder(folder, f"{STAGING_PREFIX}{os.getpid()}-", _CLAIM_PREFIX)


def release_staging(path: str) -> None:
    """Ends this process's claim on a staging folder (moved in as a shard, or removed)."""
    claims.release(path)


def discard_staging(path: str) -> None:
    """Removes a staging folder this process will not commit, and its claim."""
    claims.discard(path)


def remove_dead_staging(folder: str) -> None:
    """Under the commit lock: removes staging folders (and stray markers) of killed processes.
    A folder without a marker (made before markers existed) is left alone, and so is every
    folder where file locks do not exist (Windows): there a live one looks the same."""
    claims.remove_dead(folder, STAGING_PREFIX, _CLAIM_PREFIX)
    remove_dead_temporaries(folder)


def remove_dead_temporaries(folder: str) -> None:
    """Under the commit lock: removes the temporary files of manifest and delete-journal writes
    that a killed process left (every such write holds the commit lock, so none is live now;
    a killed large delete's journal can be large)."""
    dead = tuple(f"{name}{TEMPORARY_MARK}" for name in (MANIFEST_FILE, DELETE_JOURNAL_FILE))
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        # Only files: a folder under such a name was not made by a write (and would fail
        # every later commit here with IsADirectoryError).
        if name.startswith(dead) and not (os.path.isdir(path) and not os.path.islink(path)):
            with suppress(FileNotFoundError):
                os.unlink(path)


def _store_length(folder: str) -> int:
    # Imported here so that reading a manifest never needs the native library.
    from loaderx._store.zrecord import Zrecord

    with Zrecord(folder, create=False) as store:
        return len(store)


def check_staged(folder: str, schema: Schema) -> int:
    """A staged shard's record count, after checking it is one complete single-store dataset."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"staged shard {folder!r} is not a folder")
    if os.path.exists(manifest_path(folder)):
        raise ManifestError(f"staged shard {folder!r} is itself sharded; stage single stores")
    if not os.path.isfile(os.path.join(folder, _META_FILE)):
        raise ManifestError(f"staged shard {folder!r} has no {_META_FILE}: it is not a store")
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
        if os.path.isfile(os.path.join(folder, _META_FILE)):
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
    if os.path.isfile(os.path.join(folder, _META_FILE)):
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


def remove_unlisted(folder: str, manifest: Manifest) -> None:
    """Removes shard folders that the manifest does not list (left by a crashed commit), and
    files or links under a shard's name: one left in place of the next shard's folder would
    fail every later commit's move into it (ENOTDIR) for good."""
    listed = set(manifest.names)
    for name in os.listdir(folder):
        if shard_number(name) is None or name in listed:
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with suppress(FileNotFoundError):
                os.unlink(path)


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
    opened it as a single store then refuses its first append (loaderx._data.dataset). A caller
    passing tail_records has the store open and claimed already."""
    if tail_records is not None or read_manifest(folder) is not None:
        yield
        return
    if not os.path.isfile(os.path.join(folder, _META_FILE)):
        yield  # a new dataset: nothing to seal
        return
    from loaderx._store.zrecord import Zrecord  # here: reading a manifest never needs the library

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
    from loaderx._store.zrecord import Zrecord  # here: reading a manifest never needs the library

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
