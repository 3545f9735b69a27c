"""Zrecord: the persistent byte-record store, a thin typed layer over libloaderx's lx_store_*.

The public face of loaderx._store.zrecord: every name here is part of loaderx's API."""

from loaderx._os.descriptors import set_raise_descriptor_limit
from loaderx._store.zrecord import (
    CODECS,
    POOL_ALWAYS,
    POOL_AUTO,
    POOL_NEVER,
    RECORD_COUNT_MAX,
    RECORD_SIZE_MAX,
    STORES_AUTO,
    STORES_CACHED,
    STORES_STREAMING,
    Zrecord,
    pool_policy,
    set_pool_policy,
    set_stores_policy,
    stores_policy,
)

__all__ = [
    "CODECS",
    "POOL_ALWAYS",
    "POOL_AUTO",
    "POOL_NEVER",
    "RECORD_COUNT_MAX",
    "RECORD_SIZE_MAX",
    "STORES_AUTO",
    "STORES_CACHED",
    "STORES_STREAMING",
    "Zrecord",
    "pool_policy",
    "set_pool_policy",
    "set_raise_descriptor_limit",
    "set_stores_policy",
    "stores_policy",
]
