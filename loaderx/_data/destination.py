"""Where a conversion may write, and how its result replaces what was there.

Every converter builds its result in a private staging folder beside the destination and moves
it into place only when everything was written and made durable (loaderx._os.folder_swap), so a
failed, interrupted or killed conversion leaves the old or the new destination, never neither.
An existing destination is replaced only with overwrite=True, and only when it holds nothing but
a loaderx store's own files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Final, TypeVar

from loaderx._os import claims
from loaderx._os.folder_swap import StagedFolder
from loaderx._store.schema import schema_path
from loaderx._store.layout import META_FILE, manifest_path, shard_number

T = TypeVar("T")

# What a store folder may hold: the schema, the Zrecord files, and their temporary siblings.
# A store's own files, plus a sharded dataset's manifest, commit lock, shard folders and the
# staging folders a crashed rollover or commit may leave.
_STORE_FILE: Final = re.compile(
    r"(schema\.msgpack|meta\.zr|sums\.zr|dict\.zr|redo\.zr|[0-9]+\.zr|shards\.msgpack|shards\.lock"
    r"|shard-[0-9]{6,7}|\.staging-[0-9]+-[0-9a-f]+|open\.lock|writer\.lock|maintenance\.lock)"
    r"(\.tmp[-.\w]*)?"
)


def _foreign_entries(folder: str) -> list[str]:
    """Names in folder that are not a loaderx store's own files."""
    return sorted(n for n in os.listdir(folder) if not _STORE_FILE.fullmatch(n))


def _is_store(folder: str) -> bool:
    """Whether folder holds a loaderx store (a dataset's schema or a Zrecord's meta file)."""
    return os.path.isfile(schema_path(folder)) or os.path.isfile(os.path.join(folder, META_FILE))


def check_append_or_overwrite(append: bool, overwrite: bool) -> None:
    """The two ask for opposite things; refuse the pair rather than pick one silently."""
    if append and overwrite:
        raise ValueError(
            "append=True adds records to the dataset at path and overwrite=True replaces it: "
            "pass one of them"
        )


def _refuse_shard_folder(path: str) -> None:
    """A shard folder of a sharded dataset is no destination: a new store there has another
    count (or schema) than the manifest lists, so the dataset no longer opens, and a folder
    with a shard's name that the manifest does not list is removed by its next commit."""
    parent, name = os.path.split(os.path.realpath(path))
    if shard_number(name) is not None and os.path.exists(manifest_path(parent)):
        raise FileExistsError(
            f"{path!r} is a shard folder of the sharded dataset {parent!r}; refusing to write a "
            "store there even with overwrite=True (convert into another path)"
        )


def check_destination(path: str, overwrite: bool) -> bool:
    """Raises unless path may be written; returns whether an old store has to be replaced.

    An empty folder counts as free. Anything else needs overwrite=True and must be a loaderx
    store holding only its own files: nothing else is ever deleted.
    """
    _refuse_shard_folder(path)
    if not os.path.lexists(path):
        return False
    if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
        return False
    # Checked before overwrite: "pass overwrite=True" would be wrong advice for a file or a
    # folder of someone else's that overwrite would refuse too.
    if os.path.islink(path) or not os.path.isdir(path) or not _is_store(path):
        raise FileExistsError(
            f"{path!r} exists and is not a loaderx store; refusing to remove it even with "
            "overwrite=True (delete it yourself or pick another path)"
        )
    if not overwrite:
        raise FileExistsError(
            f"{path!r} already exists; pass overwrite=True to replace the store there"
        )
    foreign = _foreign_entries(path)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise FileExistsError(
            f"{path!r} is a loaderx store but also holds other files ({shown}); refusing to "
            "remove them even with overwrite=True"
        )
    return True


def parts_prefix(final: str) -> str:
    """The name prefix of a parallel conversion's parts folders beside final."""
    return f".{os.path.basename(final)}.loaderx-parts-"


def parts_claim_prefix(final: str) -> str:
    """The name prefix of the claims those parts folders are taken under."""
    return f".{os.path.basename(final)}.loaderx-claim-"


def remove_dead_parts(final: str) -> int:
    """Removes the parts folders beside final whose parallel conversion was killed (its claim
    died with it); returns how many. Every conversion into final calls it, in one process or
    in parallel, whichever the killed one was: nothing else ever would remove them. Where file
    locks do not exist (Windows) a live folder looks the same: none is removed."""
    return claims.remove_dead(os.path.dirname(final), parts_prefix(final),
                              parts_claim_prefix(final))


def stage_conversion(path: str, overwrite: bool) -> tuple[StagedFolder, bool]:
    """A staging folder for path (after recovering any interrupted earlier conversion and
    removing a killed parallel one's parts) and whether an old store has to be replaced on
    commit."""
    remove_dead_parts(os.path.abspath(path))
    staging = StagedFolder(path)
    try:
        replace = check_destination(staging.final, overwrite)
    except BaseException:
        staging.abort()
        raise
    return staging, replace


def commit_conversion(staging: StagedFolder, replace: bool) -> None:
    """Moves a finished conversion into place (replacing the old store when replace is True)."""
    # Checked again right before the swap: the folder may have changed while the conversion ran.
    staging.commit(replace, recheck=lambda: check_destination(staging.final, True))


def write_in_place(path: str, overwrite: bool, write: Callable[[str], T]) -> T:
    """write(staging folder) for path, then committed in its place; returns what write returns.
    A failure (or an interrupt) removes the staging folder and leaves path as it was."""
    staging, replace = stage_conversion(path, overwrite)
    try:
        result = write(staging.path)
        commit_conversion(staging, replace)
    except BaseException:
        staging.abort()
        raise
    return result


__all__ = ["check_append_or_overwrite", "check_destination", "commit_conversion",
           "parts_claim_prefix", "parts_prefix", "remove_dead_parts", "stage_conversion",
           "write_in_place"]
