"""ShardedStore: the shards of a sharded dataset, open together and used like one Zrecord.

DenseDataset and RaggedDataset hold either a Zrecord (a single-store dataset) or this. It reads
through the one native View over every shard that its ShardSet (loaderx._store.shard_set)
keeps, appends through a ShardAppender (loaderx._store.shard_append: rollover to new shards,
all or nothing) and deletes through a ShardDeleter (loaderx._store.shard_delete: a journaled
delete across shards). Maintenance runs shard by shard. Every change to the manifest holds the
dataset's commit lock (see loaderx._store.shard_locks), so other processes may commit shards
meanwhile.

Stays interpreted: it is ctypes glue (through View and Zrecord) and runs per call, not per
record.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.paths import folder_identity
from loaderx._store.indexing import normalize_index
from loaderx._store.schema import Schema
from loaderx._store.shard_append import RecordWriter, ShardAppender
from loaderx._store.shard_delete import ShardDeleter, delete_unsettled
from loaderx._store.shard_set import ShardSet, manifest_signature, required_manifest
from loaderx._store.layout import SHARD_RECORDS_MAX
from loaderx._store.shard_locks import commit_lock, reading_lock
from loaderx._store.verify import BadRecord, VerifyReport
from loaderx._store.view import View
from loaderx._store.zrecord import Zrecord
from loaderx.errors import ManifestError, ReadOnlyStoreError, SchemaError

# Opening retries while the dataset folder keeps being replaced under it (each replacement is
# a whole conversion, so two attempts nearly always suffice).
_OPEN_ATTEMPTS: Final = 8
# Seconds added to the wait before each further attempt while a replacement is in progress.
_SWAP_WAIT: Final = 0.005


def check_shard_records(shard_records: object) -> int:
    """A shard capacity as an int in 1 .. SHARD_RECORDS_MAX."""
    if isinstance(shard_records, bool) or not isinstance(shard_records, (int, np.integer)):
        raise TypeError(f"shard_records must be an int, not {type(shard_records).__name__}")
    if not 1 <= shard_records <= SHARD_RECORDS_MAX:
        raise ValueError(
            f"shard_records must be in 1..{SHARD_RECORDS_MAX} (a store's limit), "
            f"got {shard_records}"
        )
    return int(shard_records)


def _no_records() -> int:
    return 0


def _refuse_any(indices: npt.NDArray[np.int64]) -> None:
    """What a gather from a dataset without shards does: nothing, or IndexError."""
    if len(indices):
        raise IndexError(f"index {int(indices[0])} is out of range for length 0")


class ShardedStore:
    """The shards listed by a dataset's manifest, in order, as one store."""

    _path: str
    _schema: Schema
    _shard_records: int
    _readonly: bool
    # Which records gathers check against their checksum, for every shard (see Zrecord).
    _verify_reads: bool | None
    _shards: ShardSet
    _appender: ShardAppender
    _deleter: ShardDeleter
    # A parent thread may hold it (an append or a delete) at the moment of fork; a child gets
    # it back unlocked.
    _guard: ForkSafeLock

    def __init__(
        self,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> None:
        self._path = path
        self._verify_reads = verify
        self._schema = schema
        self._shard_records = check_shard_records(shard_records)
        self._readonly = readonly
        self._shards = ShardSet(path, schema, readonly, verify)
        self._appender = ShardAppender(self._shards, self._shard_records)
        self._deleter = ShardDeleter(self._shards)
        self._guard = ForkSafeLock()

    # Read-only, as Zrecord's: the shards were opened with these.
    @property
    def path(self) -> str:
        """The dataset's folder (absolute)."""
        return self._path

    @property
    def schema(self) -> Schema:
        """The dataset's schema, which every shard shares."""
        return self._schema

    @property
    def shard_records(self) -> int:
        """The most records a shard holds before appends start another."""
        return self._shard_records

    @property
    def readonly(self) -> bool:
        """Whether the dataset was opened read-only (every write is refused)."""
        return self._readonly

    @property
    def verify_reads(self) -> bool | None:
        """Which reads check their checksums, in every shard (see Zrecord)."""
        return self._verify_reads

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> ShardedStore:
        """Opens every shard the manifest lists, refusing (naming the shard) one that is
        missing, has another schema, or holds a count the manifest does not allow. With
        readonly, every shard opens read-only and every write is refused; verify is every
        shard's gather verification (see Zrecord)."""
        for attempt in range(_OPEN_ATTEMPTS - 1):
            identity = folder_identity(path)
            manifest_version = manifest_signature(path)
            try:
                sharded = cls._open_once(path, schema, shard_records, readonly, verify)
            except (ManifestError, SchemaError, OSError):
                now = folder_identity(path)
                unchanged = manifest_signature(path) == manifest_version
                if now is not None and now == identity and unchanged:
                    raise
                # The whole folder was replaced while we read it, or we are between the two
                # renames of a replacement (the path names no folder for a moment), or another
                # process committed meanwhile (a delete whose shards moved after we read the
                # manifest: their counts then disagree with it): open again.
                time.sleep(_SWAP_WAIT * attempt)
                continue
            if folder_identity(path) == identity:
                return sharded
            sharded.close()  # manifest and shards may come from two folders: open again
        if folder_identity(path) is None:
            raise FileNotFoundError(f"no dataset at {path!r} (it is gone, or being replaced)")
        return cls._open_once(path, schema, shard_records, readonly, verify)

    @classmethod
    def _open_once(
        cls,
        path: str,
        schema: Schema,
        shard_records: int,
        readonly: bool,
        verify: bool | None = None,
    ) -> ShardedStore:
        sharded = cls(path, schema, shard_records, readonly, verify)
        try:
            with reading_lock(path):
                signature = manifest_signature(path)
                manifest = required_manifest(path)
                unsettled = not readonly and delete_unsettled(path, manifest)
                if not unsettled:
                    try:
                        sharded._shards.load(manifest, signature)
                        if readonly:
                            sharded._deleter.refuse_half_deleted()
                    except BaseException:
                        sharded.close()  # under the lock: its handles never block a finish
                        raise
            if unsettled:
                sharded._deleter.finish_at_open()
        except BaseException:
            sharded.close()
            raise
        return sharded

    @classmethod
    def adopt(cls, path: str, store: Zrecord, schema: Schema, shard_records: int) -> ShardedStore:
        """A single-store dataset about to roll over: its open store becomes shard 0 ('.').

        The store's writer lock is claimed first: another process writing it as a single store
        (it takes no commit lock) must never find it sealed under it. While that process holds
        it, this raises StoreLockedError and nothing changes."""
        store.claim_writer()
        sharded = cls(path, schema, shard_records, verify=store.verify_reads)
        sharded._shards.adopt(store)
        return sharded

    def name_as_dataset(self, name: str) -> None:
        """A closed dataset's calls say "dataset 'name' is closed": its name as its user opened
        it (a URL for a remote dataset, whose replica this store reads), not this folder."""
        self._shards.shown = name

    def _refuse_if_readonly(self, operation: str) -> None:
        self._shards.check_open()
        if self._readonly:
            raise ReadOnlyStoreError(
                f"{operation} refused: sharded dataset {self._path!r} was opened with readonly=True"
            )

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._shards.read(len, _no_records)

    @property
    def view(self) -> View | None:
        return self._shards.view

    @property
    def has_dict(self) -> bool:
        stores = self._shards.stores
        return bool(stores) and stores[-1].has_dict

    def gather_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> None:
        self._shards.read(
            lambda view: view.gather_into(indices, out, record_size),
            lambda: _refuse_any(indices),
        )

    def gather_fixed(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> bool:
        """The dense fast path through the view (see View.gather_fixed); False, with nothing
        copied, sends the caller to its general path."""
        shards = self._shards
        view = shards.view
        if view is None:
            return False
        try:
            return view.gather_fixed(indices, out, record_size)
        except ValueError:
            if shards.replaced(view):
                return False  # the general path reads through the current view
            raise

    def gather_ragged(
        self, indices: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        def without_shards() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
            _refuse_any(indices)
            return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.uint64)

        return self._shards.read(lambda view: view.gather_ragged(indices), without_shards)

    def gather_packed(
        self, indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None = None,
    ) -> bool:
        """See Zrecord.gather_packed (indices global, in range)."""
        def without_shards() -> bool:
            _refuse_any(indices)
            offsets[0] = 0
            if rows is not None:
                rows[0] = 0
            return True

        return self._shards.read(
            lambda view: view.gather_packed(indices, row_size, out, offsets, rows), without_shards
        )

    def gather_padded(
        self, indices: npt.NDArray[np.int64], row_size: int, pad_row: npt.NDArray[Any],
        lengths: npt.NDArray[np.uint64], truncate: bool, out: npt.NDArray[Any],
        mask: npt.NDArray[Any], rows: npt.NDArray[np.uint64],
    ) -> bool:
        """See Zrecord.gather_padded (indices global, in range)."""
        def without_shards() -> bool:
            _refuse_any(indices)
            rows[0] = lengths[0] if len(lengths) else 0
            return True

        return self._shards.read(
            lambda view: view.gather_padded(
                indices, row_size, pad_row, lengths, truncate, out, mask, rows),
            without_shards,
        )

    def record_offsets(
        self, indices: npt.NDArray[np.int64], row_size: int, offsets: npt.NDArray[np.uint64],
        rows: npt.NDArray[np.int32] | None = None,
    ) -> None:
        """See Zrecord.record_offsets (indices global, in range)."""
        def without_shards() -> None:
            _refuse_any(indices)
            offsets[0] = 0
            if rows is not None:
                rows[0] = 0

        self._shards.read(
            lambda view: view.record_offsets(indices, row_size, offsets, rows), without_shards
        )

    def gather_ragged_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], offsets: npt.NDArray[np.uint64]
    ) -> bool:
        """See Zrecord.gather_ragged_into (indices global, in range)."""
        def without_shards() -> bool:
            _refuse_any(indices)
            return True

        return self._shards.read(
            lambda view: view.gather_ragged_into(indices, out, offsets), without_shards
        )

    def record_lengths(self, index: object) -> npt.NDArray[np.uint64]:
        """The logical size of each selected record (any index form, as Zrecord takes)."""
        def without_shards() -> npt.NDArray[np.uint64]:
            normalize_index(index, 0)  # only an empty selection gets past it
            return np.empty(0, dtype=np.uint64)

        return self._shards.read(
            lambda view: view.record_lengths(normalize_index(index, len(view))), without_shards
        )

    # --- writing ---------------------------------------------------------------------------

    def append_fixed(self, data: npt.NDArray[Any], record_size: int) -> int:
        """Appends the records of a C-contiguous (B, ...) array, rolling over as shards fill."""
        self._refuse_if_readonly("append")

        def write(store: Zrecord, begin: int, end: int) -> int:
            return store.append_fixed(data[begin:end], record_size)

        return self._append(int(data.shape[0]), write)

    def append(self, records: Sequence[Any]) -> int:
        """Appends a list of bytes-like records, rolling over as shards fill."""
        self._refuse_if_readonly("append")

        def write(store: Zrecord, begin: int, end: int) -> int:
            return store.append(records[begin:end])

        return self._append(len(records), write)

    def _append(self, count: int, write: RecordWriter) -> int:
        """ShardAppender.append, under the commit lock, caught up with the manifest."""
        with self._guard, commit_lock(self._path):
            self._deleter.catch_up()
            return self._appender.append(count, write)

    def delete(self, indices: npt.NDArray[np.int64]) -> None:
        """Deletes the selected global records (see loaderx._store.shard_delete for where the
        survivors go)."""
        self._refuse_if_readonly("delete")
        with self._guard, commit_lock(self._path):
            self._deleter.catch_up()
            self._deleter.delete(indices)

    def train_dict(self, records: Sequence[Any], dict_size: int) -> None:
        """Trains the tail shard's dictionary (the one later rollovers copy)."""
        self._refuse_if_readonly("train_dict")
        with self._guard:
            if not self._shards.stores:
                with commit_lock(self._path):
                    self._appender.roll_over()
            self._shards.stores[-1].train_dict(records, dict_size)

    # --- maintenance -------------------------------------------------------------------------

    def compact(self) -> None:
        """Compacts every shard in place (offline, as for a single store)."""
        self._refuse_if_readonly("compact")
        with self._guard:
            for store in self._shards.stores:
                store.compact()

    def stats(self) -> dict[str, int]:
        """The shards' stats summed."""
        total = {"records": 0, "live_bytes": 0, "chunk_bytes": 0, "reclaimable": 0}
        for found in self.shard_stats():
            for key in total:
                total[key] += int(found[key])
        return total

    def shard_stats(self) -> list[dict[str, Any]]:
        """One dict per shard: its name plus its store's stats."""
        shards = self._shards
        shards.check_open()
        return [
            {"name": entry.name, **store.stats()}
            for entry, store in zip(shards.entries, shards.stores)
        ]

    def sync(self) -> None:
        self._refuse_if_readonly("sync")
        for store in self._shards.stores:
            store.sync()

    def parts(self) -> list[tuple[str, int]]:
        """(folder, records) of every shard's store, in the dataset's order."""
        self._shards.check_open()
        with self._guard:
            return [(store.path, len(store)) for store in self._shards.stores]

    def verify(self) -> VerifyReport:
        """Every shard's Zrecord.verify() as one report, in the dataset's index space."""
        self._shards.check_open()
        with self._guard:
            reports = [store.verify() for store in self._shards.stores]
        bad: list[BadRecord] = []
        before = 0
        for report in reports:
            bad.extend(BadRecord(before + b.index, b.reason) for b in report.bad)
            before += report.records
        return VerifyReport(
            self._path,
            before,
            all(report.has_checksums for report in reports),
            sum(report.checksummed for report in reports),
            bad,
            sum(report.bad_count for report in reports),
            [path for report in reports for path in report.missing_sums],
        )

    def close(self) -> None:
        """Closes the views, then every shard's store."""
        self._shards.close()
