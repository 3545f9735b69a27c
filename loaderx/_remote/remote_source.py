"""A remote dataset opened for reading: its cached replica and the fetcher that fills it.

A dataset opened from a URL reads exactly as a local one, from the replica folder, once the
records a read needs are present: DatasetBase wraps each read in `reading(indices)`, which
fetches what is missing and holds the cache gate while the native gather copies. The loader's
look-ahead (loaderx._loading.look_ahead) calls `prefetch` for the steps ahead of the consumer.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._remote.fetcher import REQUESTS_ENV, REQUESTS_IN_FLIGHT, Fetcher
from loaderx._remote.object_store import ObjectStore
from loaderx._remote.record_map import RecordMap
from loaderx._remote.settings import count_setting
from loaderx._store.layout import TOP_LEVEL
from loaderx._store.sums_expected import SUMS_FILE, missing_sums
from loaderx._remote.replica import default_cache_dir, open_replica
from loaderx._os.urls import parse
from loaderx.errors import RemoteChangedError

# Without cache_bytes=, a cache may hold the whole dataset, but never more than this share of
# the free space its filesystem had at open (the rest stays for everything else on the disk).
FREE_SPACE_SHARE: Final = 0.8
# verify downloads this many bytes at a time (requests in flight together), keeping none.
VERIFY_WINDOW_BYTES: Final = 64 << 20


# The version an unpickled dataset asks for, on the thread that reopens it (opening_version).
_opening = threading.local()


@contextmanager
def opening_version(version: str | None) -> Iterator[None]:
    """Datasets opened from a URL in the with block, on this thread, open that version of
    their dataset (RemoteSource.version) or raise RemoteChangedError: a worker process reopens
    what its consumer has open, never a version an append or a rewrite made since (its batches
    would mix two versions), and from the cache alone, as the consumer's reads do."""
    previous = getattr(_opening, "version", None)
    _opening.version = version
    try:
        yield
    finally:
        _opening.version = previous


def _cache_budget(cache_bytes: SupportsIndex | None, folder: str, needed: int) -> int:
    if cache_bytes is not None:
        if isinstance(cache_bytes, bool):
            raise TypeError("cache_bytes must be an int number of bytes, not a bool")
        budget = int(cache_bytes.__index__())
        if budget <= 0:
            raise ValueError(f"cache_bytes must be positive, not {budget}")
        return budget
    free = shutil.disk_usage(folder).free
    return max(1, min(needed, int(free * FREE_SPACE_SHARE)))


class RemoteSource:
    """The replica of one remote dataset and its fetcher, open until close()."""

    def __init__(
        self, url: str, cache_dir: str | os.PathLike[str] | None, cache_bytes: SupportsIndex | None
    ) -> None:
        location = parse(url)
        # The fetcher reads this only after the listing and the metadata downloads; checked
        # here, a bad value is refused before any request or cache file (remote.md, Failures).
        count_setting(REQUESTS_ENV, REQUESTS_IN_FLIGHT, minimum=1)
        self.url = location.url
        self.cache_dir = os.fspath(cache_dir) if cache_dir is not None else default_cache_dir()
        self.cache_bytes_asked = None if cache_bytes is None else int(cache_bytes.__index__())
        os.makedirs(self.cache_dir, exist_ok=True)
        self._objects = ObjectStore(location)
        wanted: str | None = getattr(_opening, "version", None)
        self._replica = open_replica(self._objects, self.cache_dir, wanted)
        try:
            if wanted is not None and self._replica.key != wanted:
                raise RemoteChangedError(
                    f"{self.url} changed since the process that sent this dataset opened it "
                    f"(version {wanted}, now {self._replica.key}), and the cache no longer has "
                    "that version: reopen the dataset there to read the new one"
                )
            self.version = self._replica.key
            self.local_path = self._replica.data
            records = RecordMap(self.local_path)
            self._records = records
            self.length = records.length
            costs = sum(int(store.blocks().sum()) for store in records.stores)
            self.cache_bytes = _cache_budget(cache_bytes, self.cache_dir, costs)
            self.fetcher = Fetcher(self._objects, self._replica, records, self.cache_bytes)
        except BaseException:
            self._replica.close()
            raise

    def begin(self, indices: npt.NDArray[np.int64]) -> int:
        """The warm path (Fetcher.begin): a token when indices may be read without the gate,
        -1 when the read must go through reading()."""
        return self.fetcher.begin(indices)

    def unchanged(self, token: int) -> bool:
        return self.fetcher.unchanged(token)

    def reading(self, indices: npt.NDArray[np.int64]) -> AbstractContextManager[None]:
        """Every record of indices present, and the cache gate held, for the with block."""
        return self.fetcher.reading(indices)

    def prefetch(self, indices: npt.NDArray[np.int64]) -> None:
        """Fetches the records of indices that are not cached (the look-ahead's call)."""
        if len(indices) and int(indices.min()) >= 0 and int(indices.max()) < self.length:
            self.fetcher.fetch(indices)

    def usage(self) -> tuple[int, int]:
        """(the dataset's bytes in the object store, the bytes its records take in the cache)."""
        return self._replica.remote_bytes, self.fetcher.cached_bytes()

    @property
    def orphans(self) -> list[str]:
        """Objects of shard folders the manifest does not list (as of the open)."""
        return self._replica.orphans

    def check_records(self) -> tuple[int, list[int]]:
        """Every record downloaded and compared with its checksum (verify's remote half):
        how many had a checksum, and the indices that did not match."""
        return self.fetcher.check_everything(VERIFY_WINDOW_BYTES)

    def missing_sums(self) -> list[str]:
        """The sums.zr objects that stores written with checksums lack (what the replica's
        copies of their other files show: loaderx._store.sums_expected), as URLs."""
        found = []
        for store in self._records.stores:
            if store.sums is None and missing_sums(store.folder):
                name = SUMS_FILE if store.name == TOP_LEVEL else f"{store.name}/{SUMS_FILE}"
                found.append(f"{self.url.rstrip('/')}/{name}")
        return found

    def close(self) -> None:
        self.fetcher.close()
        self._replica.close()


__all__ = ["RemoteSource"]
