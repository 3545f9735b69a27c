"""shards.msgpack: the manifest of a sharded dataset, and the atomic commit that adds shards.

The public face of loaderx._store.shards: every name here is part of loaderx's API."""

from loaderx._store.shards import (
    SHARD_COUNT_MAX,
    SHARD_RECORDS_MAX,
    Manifest,
    ShardEntry,
    commit_shards,
    discard_staging,
    read_manifest,
    release_staging,
    staging_folder,
)

__all__ = [
    "SHARD_COUNT_MAX",
    "SHARD_RECORDS_MAX",
    "Manifest",
    "ShardEntry",
    "commit_shards",
    "discard_staging",
    "read_manifest",
    "release_staging",
    "staging_folder",
]
