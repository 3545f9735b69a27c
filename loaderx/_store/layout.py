"""The names of the files and folders a store or a sharded dataset holds, and its size limits.

A store folder holds meta.zr (its header and record table) and chunk files. A sharded dataset
folder holds
    schema.msgpack     the dataset's schema (as for a single-store dataset)
    shards.msgpack     its manifest (loaderx._store.manifest): the ordered list of shards
    shards.lock        the commit lock; shards.readers.lock, the readers lock (shard_locks)
    shards.delete      only during a delete over several shards (loaderx._store.delete_journal)
    .staging-*         staging folders, where shards are built before a commit (staging)
    shard-000001/ ...  one ordinary single-store dataset folder per shard (its own
                       schema.msgpack, identical to the top one, plus meta.zr and chunks)
Shard k's records are the global indices [sum of the counts before k, ... + its count).

A single-store dataset (store files at the top level, no manifest) keeps opening as it always
did. When it rolls over, the manifest names "." (the top-level store, left where it is) as
shard 0 and the new shards follow as shard-000001, shard-000002, ...; nothing is moved.

This module imports nothing from the store layer, so every store module may use it.
"""

from __future__ import annotations

import os
import re
from typing import Final

from loaderx._os.paths import is_file

# A store's header and record table: a folder holding it is a store.
META_FILE: Final = "meta.zr"
# Per-record checksums; a store written before checksums existed has none.
SUMS_FILE: Final = "sums.zr"
DICT_FILE: Final = "dict.zr"  # a zstd_dict store's trained dictionary
MANIFEST_FILE: Final = "shards.msgpack"
LOCK_FILE: Final = "shards.lock"
# Opens hold it shared, deletes exclusively (loaderx._store.shard_locks).
READERS_LOCK_FILE: Final = "shards.readers.lock"
# The journal of a delete over several shards (loaderx._store.delete_journal).
DELETE_JOURNAL_FILE: Final = "shards.delete"
STAGING_PREFIX: Final = ".staging-"
# The name a staging folder's marker is made and locked under before it is renamed into place
# (loaderx._os.claims).
CLAIM_PREFIX: Final = ".claim-"
# The name of the top-level store when a single-store dataset has rolled over.
TOP_LEVEL: Final = "."

# A store's record limit (loaderx._store.zrecord.RECORD_COUNT_MAX; limits.zig record_count_max):
# the default capacity of a shard before appends roll over to a new one.
SHARD_RECORDS_MAX: Final = 1 << 24
# Shards a dataset may hold (limits.zig view_shard_count_max): 2^20 shards of 2^24 records
# each is 2^44 records, far inside the int64 index space.
SHARD_COUNT_MAX: Final = 1 << 20
RECORD_COUNT_MAX: Final = SHARD_COUNT_MAX * SHARD_RECORDS_MAX

_NAME_PATTERN: Final = re.compile(r"shard-([0-9]{6,7})")


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
