"""shards.msgpack: the manifest of a sharded dataset, and the atomic commit that adds shards.

The public face of loaderx._store's layout, manifest, staging and shard_commit modules: every
name here is part of loaderx's API."""

from loaderx._store.layout import SHARD_COUNT_MAX, SHARD_RECORDS_MAX
from loaderx._store.manifest import Manifest, ShardEntry, read_manifest
from loaderx._store.shard_commit import commit_shards
from loaderx._store.staging import discard_staging, release_staging, staging_folder

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
