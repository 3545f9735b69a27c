"""Stores: Zrecord, views, schemas, indexing, manifests, shard commits and sharded stores.

Private: import from loaderx's public modules instead."""
