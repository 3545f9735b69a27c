"""The parts of a parallel conversion: their staging folder, their common schema, their publishing.

Each worker of a parallel conversion writes its part(s) as complete single stores in a hidden
staging folder beside the destination (same file system, so publishing is a rename). Only when
every worker has succeeded are the parts published, in order, as the shards of the destination.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from loaderx._data.destination import (
    parts_claim_prefix,
    parts_prefix,
    remove_dead_parts,
    write_in_place,
)
from loaderx._os import claims
from loaderx._store.schema import Schema, differences, read_schema
from loaderx._store.shard_commit import commit_shards
from loaderx.errors import SchemaError

# One written part: its folder and its record count.
Part = tuple[str, int]


def make_staging(final: str) -> str:
    """A private folder beside final (same file system) for the parts of one conversion,
    claimed (loaderx._os.claims) until the conversion ends: end it with claims.discard.

    The parts folders of conversions that were killed (their claim died with them) are removed
    first: nothing else ever would."""
    parent = os.path.dirname(final)
    remove_dead_parts(final)
    return claims.claim_folder(parent, parts_prefix(final), parts_claim_prefix(final))


def part_folder(staging: str, job: int, piece: int) -> str:
    """The folder of piece `piece` of job `job` in a conversion's staging folder."""
    return os.path.join(staging, f"part-{job:06d}-{piece:06d}")


def common_schema(parts: Sequence[Part], owner: Callable[[int], str]) -> Schema:
    """The schema every part shares; SchemaError naming the first part that differs."""
    first = read_schema(parts[0][0])
    for position, (folder, _) in enumerate(parts[1:], start=1):
        lines = differences(read_schema(folder), first)
        if lines:
            raise SchemaError(
                f"{owner(position)} wrote records of another schema than {owner(0)} ("
                + "; ".join(lines).replace("store has", "it has") + "): every part of one "
                "dataset must have the same dtype and item shape"
            )
    return first


def publish(final: str, parts: Sequence[Part], schema: Schema, overwrite: bool,
            append: bool) -> None:
    """Makes the parts the shards of final, all at once.

    append=True adds them to the dataset at final (creating it if absent) in one manifest
    commit. Otherwise the complete sharded dataset is built in the converters' staging folder
    and moved into place the way every converter does (an old store is replaced only with
    overwrite=True, and a failure leaves it as it was).
    """
    folders = [folder for folder, _ in parts]
    if append:
        if not folders and os.path.exists(os.path.join(final, "schema.msgpack")):
            return  # nothing to add: a single store stays one (a commit would seal it as '.')
        commit_shards(final, folders, schema)
        return
    write_in_place(final, overwrite, lambda staged: commit_shards(staged, folders, schema))


def check_append_target(final: str, schema: Schema | None) -> None:
    """Before any work: an append target must be absent or a dataset of the same schema."""
    if schema is None or not os.path.exists(os.path.join(final, "schema.msgpack")):
        return
    lines = differences(read_schema(final), schema)
    if lines:
        raise SchemaError(
            f"cannot append to {final!r}: it holds a dataset of another schema ("
            + "; ".join(lines) + ")"
        )


__all__ = ["Part", "check_append_target", "common_schema", "make_staging", "part_folder",
           "publish"]
