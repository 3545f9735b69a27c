"""How many shards a parallel conversion may write: checked before the work, or counted during it.

The limit is read from loaderx._store.layout at each call, not imported once, so that it is
always the store's own limit (tests lower it to keep their datasets small).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from loaderx._os.process_pool import JobRefused
from loaderx._store import layout
from loaderx._store.manifest import read_manifest


def shards_held(final: str, append: bool) -> int:
    """The shards an append target holds already (a single store is shard 0); 0 otherwise."""
    if not append or not os.path.exists(os.path.join(final, "schema.msgpack")):
        return 0
    manifest = read_manifest(final)
    return 1 if manifest is None else len(manifest.shards)


def _over_the_limit(final: str, made: str, have: int) -> str:
    held = f" on top of the {have} that {final!r} holds" if have else ""
    return (f"{made}{held}, over a dataset's limit of {layout.SHARD_COUNT_MAX}; pass a larger "
            "shard_records")


def check_shard_count(final: str, ranges: Sequence[tuple[int, int]], shard_records: int,
                      append: bool) -> None:
    """Before any work: the shards the workers will write (with an append target's own) must
    fit a dataset; the commit would refuse them only once every one of them was written."""
    new = sum(-(-(b - a) // shard_records) for a, b in ranges)
    have = shards_held(final, append)
    if have + new > layout.SHARD_COUNT_MAX:
        records = ranges[-1][1] - ranges[0][0] if ranges else 0
        raise ValueError(_over_the_limit(
            final, f"{records} records in shards of at most {shard_records} make {new} shards",
            have))


def stream_refusal(final: str, shard_records: int) -> str:
    """The refusal of one iterator read in this process whose records pass a dataset's limit:
    said as a parallel conversion's sources are (ShardBudget)."""
    return _over_the_limit(
        final, f"the iterator's records in shards of at most {shard_records} make more than "
        f"{layout.SHARD_COUNT_MAX} shards", 0)


class ShardLimitReached(JobRefused):
    """Raised in a worker that needs a shard when the conversion has none left to write."""


class ShardBudget:
    """The shards the workers of one from_iterator may still write between them, in shared
    memory. How many shards iterators make is known only as they run: each worker takes one
    before it writes a shard, so the first shard past a dataset's limit stops the conversion
    at once (the commit would refuse it only after every worker had written all of its own)."""

    def __init__(self, ctx: Any, final: str, shard_records: int, have: int) -> None:
        # In shared memory: the workers take from it.
        self.left = ctx.Value("q", max(0, layout.SHARD_COUNT_MAX - have))
        self.refusal = _over_the_limit(
            final, f"the sources' records in shards of at most {shard_records} make more than "
            f"{layout.SHARD_COUNT_MAX - have} shards", have)

    def take(self) -> None:
        with self.left.get_lock():
            if self.left.value <= 0:
                raise ShardLimitReached(self.refusal)
            self.left.value -= 1


__all__ = ["ShardBudget", "ShardLimitReached", "check_shard_count", "shards_held",
           "stream_refusal"]
