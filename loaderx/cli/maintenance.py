"""The maintenance command: compact, which reclaims the bytes of deleted records in place."""

from __future__ import annotations

import argparse
from typing import TextIO

from loaderx.cli.exits import EXIT_OK
from loaderx.cli.sizes import size_text
from loaderx.cli.stores import open_store


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    """Compacts the store in place (it takes the writer lock) and says how much it reclaimed."""
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
