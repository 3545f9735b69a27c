"""Conversions to a URL: the dataset is built on local disk, then uploaded with its manifest
last (loaderx._remote.upload). Everything that can be refused is refused first: the scheme, the
missing extra, a dataset already there."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import TypeVar

from loaderx._remote.replica import default_cache_dir
from loaderx._remote.upload import open_destination, refuse_existing, upload_dataset

_T = TypeVar("_T")

# Where datasets are built before their upload: under the cache folder (on the user's disk,
# where a large dataset fits better than in a RAM-backed /tmp). LOADERX_UPLOAD_DIR moves it.
UPLOAD_DIR_ENV = "LOADERX_UPLOAD_DIR"


def build_folder() -> str:
    chosen = os.environ.get(UPLOAD_DIR_ENV) or os.path.join(default_cache_dir(), "uploads")
    os.makedirs(chosen, exist_ok=True)
    return chosen


def write_to_url(url: str, append: bool, overwrite: bool, build: Callable[[str], int]) -> int:
    """build(local folder) -> records written, then the folder uploaded to url; the local
    build is removed whatever happens. Returns what build returned."""
    store = open_destination(url)
    refuse_existing(store, append, overwrite)
    scratch = tempfile.mkdtemp(prefix="loaderx-upload-", dir=build_folder())
    try:
        local = os.path.join(scratch, "dataset")
        written = build(local)
        upload_dataset(local, store, append, overwrite)
        return written
    finally:
        shutil.rmtree(scratch, ignore_errors=True)




def write_columns_to_url(
    url: str, overwrite: bool, build: Callable[[str], _T], append: bool = False
) -> _T:
    """build(local folder) writes one dataset per column under the folder (from_arrow, the
    Ray sink); each is uploaded to url/<column> (added to it with append=True). Every
    column's destination is checked before the first upload; columns are published one after
    another, each all or nothing."""
    open_destination(url)  # the scheme and the extra, before the build
    scratch = tempfile.mkdtemp(prefix="loaderx-upload-", dir=build_folder())
    try:
        local = os.path.join(scratch, "dataset")
        written = build(local)
        columns = sorted(name for name in os.listdir(local)
                         if os.path.isdir(os.path.join(local, name)) and not name.startswith("."))
        stores = {name: open_destination(f"{url.rstrip('/')}/{name}") for name in columns}
        for store in stores.values():
            refuse_existing(store, append, overwrite)
        for name, store in stores.items():
            upload_dataset(os.path.join(local, name), store, append, overwrite)
        return written
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


__all__ = ["UPLOAD_DIR_ENV", "write_columns_to_url", "write_to_url"]
