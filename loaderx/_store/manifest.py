"""shards.msgpack: the manifest format of a sharded dataset (ShardEntry, Manifest, read, write).

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
writer, under the commit lock, first writes the resolved manifest back
(loaderx._store.shard_commit.settle_pending), so no later append can move the tail past
`records_after` while the state is still unresolved.

A manifest is written atomically (temporary file, fsync, rename, fsync of the folder), always
under the commit lock (loaderx._store.shard_locks). Reading one never needs the native library.

A lost manifest. Every commit writes a dataset's manifest before it moves the first shard
folder in (shard_commit, column_append), so a store folder under a shard's name beside no
manifest never comes from an interrupted commit: the manifest was lost, and the shards' order
and counts with it. Opening and committing refuse such a folder (refuse_lost_manifest) rather
than read its top-level store alone or remove the shards as a crash's leftovers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

import msgpack

from loaderx._os import descriptors
from loaderx._os.folder_swap import fsync_folder
from loaderx._os.paths import is_file, write_file_atomically
from loaderx._store.layout import (
    META_FILE,
    SHARD_COUNT_MAX,
    SHARD_RECORDS_MAX,
    TOP_LEVEL,
    manifest_path,
    shard_number,
)
from loaderx.errors import ManifestError

MANIFEST_FORMAT: Final = "loaderx-shards"
MANIFEST_VERSION: Final = 1
# The version of a manifest with an append in flight (see the module doc).
MANIFEST_VERSION_APPENDING: Final = 2

_GENERATION_MASK: Final = (1 << 64) - 1
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
            # Generations only tell versions apart (loaderx._store.shard_set's signature), so they
            # wrap at msgpack's largest integer rather than fail the write: a damaged manifest
            # may hold any uint64 (one read near 2^64 failed its next write with OverflowError).
            "generation": self.generation & _GENERATION_MASK,
            "shards": [entry.to_dict() for entry in self.shards],
        }

    def __repr__(self) -> str:
        return f"Manifest(generation={self.generation}, shards={self.shards!r})"


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
        raise ManifestError(
            f"{path} is not a loaderx shard manifest (no format {MANIFEST_FORMAT!r})"
        )
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
    if not listed and is_file(os.path.join(folder, META_FILE)):
        raise ManifestError(
            f"{path} does not list the store at the top level of {folder!r} as shard '.': "
            "entries are missing"
        )


def refuse_lost_manifest(folder: str) -> None:
    """Raises ManifestError when `folder` has no manifest but holds shard stores (module doc:
    the manifest was lost). A folder with a manifest, or with no shard stores, passes."""
    if os.path.lexists(manifest_path(folder)):
        return
    try:
        names = os.listdir(folder)
    except OSError:
        return  # no folder (or none we may list): the caller's own open says what is wrong
    shards = sorted(name for name in names if shard_number(name) is not None
                    and is_file(os.path.join(folder, name, META_FILE)))
    if not shards:
        return
    top = (" beside its top-level store (shard '.')"
           if is_file(os.path.join(folder, META_FILE)) else "")
    raise ManifestError(
        f"{folder!r} holds shard folders ({', '.join(shards[:3])}"
        f"{', ...' if len(shards) > 3 else ''}){top} but its manifest "
        f"{os.path.basename(manifest_path(folder))} is missing: the shards' order and counts "
        "cannot be known; restore the manifest from a copy of the dataset (a loaderx from "
        "before this check left the same when a rollover was killed before its first "
        "manifest write: those shard folders then hold no acknowledged records)"
    )


def write_manifest(folder: str | os.PathLike[str], manifest: Manifest) -> None:
    """Writes the manifest atomically: a temporary file, fsync, rename over, fsync the folder."""
    folder = os.fspath(folder)
    data = msgpack.packb(manifest.to_dict(), use_bin_type=True)
    write_file_atomically(manifest_path(folder), data)
    fsync_folder(folder)
