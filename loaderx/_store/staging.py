"""Staging folders, where shards are built before a commit, and the leftovers of killed commits.

A staging folder (.staging-<pid>-*) lives inside the dataset folder, so a commit moves it in as
a shard by a rename. What a killed process leaves (staging folders nobody claims, temporary
files of manifest writes, shard folders no manifest lists) is removed under the commit lock.
"""

from __future__ import annotations

import os
import shutil
from contextlib import suppress

from loaderx._os import claims
from loaderx._os.paths import TEMPORARY_MARK
from loaderx._store.layout import (
    CLAIM_PREFIX,
    DELETE_JOURNAL_FILE,
    MANIFEST_FILE,
    STAGING_PREFIX,
    shard_number,
)
from loaderx._store.manifest import Manifest


def staging_folder(folder: str | os.PathLike[str]) -> str:
    """A fresh, empty hidden folder inside the dataset folder (created if absent) to build one
    shard in before commit_shards moves it in. Being inside the dataset, the move is a rename.

    It is claimed (loaderx._os.claims) by this process until commit_shards moves it in or
    discard_staging removes it; a folder whose claim nobody holds belongs to a process that was
    killed, and the next commit removes it (remove_dead_staging)."""
    folder = os.fspath(folder)
    return claims.claim_folder(folder, f"{STAGING_PREFIX}{os.getpid()}-", CLAIM_PREFIX)


def release_staging(path: str) -> None:
    """Ends this process's claim on a staging folder (moved in as a shard, or removed)."""
    claims.release(path)


def discard_staging(path: str) -> None:
    """Removes a staging folder this process will not commit, and its claim."""
    claims.discard(path)


def remove_dead_staging(folder: str) -> None:
    """Under the commit lock: removes staging folders (and stray markers) of killed processes.
    A folder without a marker (made before markers existed) is left alone, and so is every
    folder where file locks do not exist (Windows): there a live one looks the same."""
    claims.remove_dead(folder, STAGING_PREFIX, CLAIM_PREFIX)
    remove_dead_temporaries(folder)


def remove_dead_temporaries(folder: str) -> None:
    """Under the commit lock: removes the temporary files of manifest and delete-journal writes
    that a killed process left (every such write holds the commit lock, so none is live now;
    a killed large delete's journal can be large)."""
    dead = tuple(f"{name}{TEMPORARY_MARK}" for name in (MANIFEST_FILE, DELETE_JOURNAL_FILE))
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        # Only files: a folder under such a name was not made by a write (and would fail
        # every later commit here with IsADirectoryError).
        if name.startswith(dead) and not (os.path.isdir(path) and not os.path.islink(path)):
            with suppress(FileNotFoundError):
                os.unlink(path)


def remove_unlisted(folder: str, manifest: Manifest) -> None:
    """Removes shard folders that the manifest does not list (left by a crashed commit), and
    files or links under a shard's name: one left in place of the next shard's folder would
    fail every later commit's move into it (ENOTDIR) for good."""
    listed = set(manifest.names)
    for name in os.listdir(folder):
        if shard_number(name) is None or name in listed:
            continue
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with suppress(FileNotFoundError):
                os.unlink(path)
