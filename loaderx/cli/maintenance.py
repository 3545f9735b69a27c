"""The maintenance command: compact, which reclaims the bytes of deleted records in place."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from loaderx._os.urls import refuse_url
from loaderx._store.layout import sharded_dataset_of
from loaderx.cli.exits import EXIT_OK, Problem
from loaderx.cli.sizes import size_text
from loaderx.cli.stores import open_store


def refuse_shard(path: str) -> None:
    """The refusal compact documents for a shard folder (its manifest lists the shard's
    records), said before the store is opened: the library raises it as a plain ValueError,
    which the command must not catch (a bug raises those too). A URL is refused before the
    dataset is opened (opening it would fill the cache to then refuse a read-only dataset)."""
    refuse_url(path, "compact", "compact a local copy, then write it to a new URL (a dataset "
               "at a URL takes appends only)")
    dataset = sharded_dataset_of(path)
    if dataset is not None and dataset != os.path.realpath(path):
        raise Problem(f"{path}: a shard of the sharded dataset {dataset}; compact the dataset, "
                      "which compacts every shard")


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    """Compacts the store in place (it takes the writer lock) and says how much it reclaimed."""
    refuse_shard(args.path)
    opened = open_store(args.path, readonly=False)
    try:
        before = opened.stats()
        opened.compact()
        after = opened.stats()
    finally:
        opened.close()
    freed = before["chunk_bytes"] - after["chunk_bytes"]
    print(f"{args.path}: compacted, {size_text(freed)} reclaimed; {after['records']:,} records, "
          f"{size_text(after['chunk_bytes'])} of chunk data", file=out)
    return EXIT_OK
