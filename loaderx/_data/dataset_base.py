"""What dense and ragged datasets share: opening, the schema, the store's maintenance, close.

A dataset folder is a Zrecord store plus schema.msgpack (see loaderx._store.schema); a sharded
dataset is several such stores under a manifest (loaderx._store.sharded_store). DenseDataset
(loaderx._data.dense) and RaggedDataset (loaderx._data.ragged) add their reads and appends.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, SupportsIndex, TypeVar

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.dataset_folder import Shape, Store, create_schema, open_store
from loaderx._native.calls import mypyc_attr
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.paths import PathArg, fs_path, is_file
from loaderx._remote.remote_source import RemoteSource, opening_version
from loaderx._os.urls import is_url, local_path
from loaderx._store.content_identity import content_identity
from loaderx._store.flags import Flag, check_flag, check_optional_flag
from loaderx._store.indexing import normalize_index
from loaderx._store.schema import Codec, Schema, resolve_dict_size
from loaderx._store.sharded_store import ShardedStore, check_shard_records
from loaderx._store.layout import SHARD_RECORDS_MAX, manifest_path, sharded_dataset_of
from loaderx._store.verify import BadRecord, VerifyReport
from loaderx._store.zrecord import Zrecord
from loaderx.errors import DictionaryError, ReadOnlyStoreError, StoreLockedError

D = TypeVar("D", bound="DatasetBase")


def check_array(value: object, what: str, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """value as an ndarray of exactly dtype; TypeError otherwise (never a silent cast)."""
    if not isinstance(value, np.ndarray):
        # A NumPy scalar's type is named like a dtype: "of dtype uint16, not uint16" said nothing.
        found = type(value).__name__
        if isinstance(value, np.generic):
            found = f"a NumPy {found} scalar"
        raise TypeError(
            f"{what} must be a numpy array of dtype {dtype}, not {found} "
            "(build it with np.asarray(..., dtype=...))"
        )
    if value.dtype != dtype:
        raise TypeError(
            f"{what} has dtype {value.dtype} but the dataset holds {dtype}; convert it "
            f"explicitly with .astype(np.{dtype.name}) if that is what you mean"
        )
    return value


# Users subclass the datasets (a read that post-processes, attributes of their own): compiled
# without allow_interpreted_subclasses, such a class could be defined but not made ("interpreted
# classes cannot inherit from compiled"), while the interpreted build allowed it. The datasets
# themselves still call their methods through mypyc's vtable; a subclass's overrides are
# called through its shadow vtable, so the loader uses them too.
@mypyc_attr(allow_interpreted_subclasses=True)
class DatasetBase:
    """What dense and ragged datasets share: the schema, the store and its maintenance."""

    _path: str
    _schema: Schema
    _dtype: np.dtype[Any]
    _item_shape: tuple[int, ...]
    _codec: str
    _dict_size: int
    _shard_records: int
    _store: Store
    # A dataset opened from a URL: the cache its reads go through (None for a local one).
    _remote: RemoteSource | None
    _sharding: ForkSafeLock
    # The process in which this handle became its single store's writer and checked it is
    # still one (0: not yet). A forked child is not the writer (the parent keeps the lock), so
    # it checks again: the parent may close and another process roll the store over first.
    _writer_pid: int

    def __init__(
        self,
        path: PathArg,
        dtype: DTypeLike | None = None,
        item_shape: Shape | None = None,
        codec: Codec | np.str_ = "zstd",
        dict_size: str | SupportsIndex = "balanced",
        *,
        shard_records: SupportsIndex | None = None,
        readonly: Flag = False,
        verify: Flag | None = None,
        cache_dir: PathArg | None = None,
        cache_bytes: SupportsIndex | None = None,
    ) -> None:
        # The flags and the codec are annotated so that mypyc lets any value reach these
        # checks (loaderx._store.flags), which run before anything is opened or created.
        readonly = check_flag("readonly", readonly)
        verify = check_optional_flag("verify", verify)
        kind = self._kind()
        wanted = create_schema(kind, dtype, item_shape, codec, dict_size)
        capacity = SHARD_RECORDS_MAX if shard_records is None else shard_records
        self._shard_records = check_shard_records(capacity)
        # Assigned once, from the returned value: mypyc would trust a narrowing to None made
        # before a method assigned the attribute.
        folder, remote = self._open_remote(path, cache_dir, cache_bytes)
        self._remote = remote
        if remote is not None:
            readonly = True  # a remote dataset is written by the converters (docs/remote.md)
        try:
            schema, store = open_store(
                folder, kind, wanted, self._shard_records, readonly, verify
            )
        except BaseException:
            self._close_remote()
            raise
        store.name_as_dataset(self._path)  # a URL, not its replica in the cache
        self._schema = schema
        self._dtype = schema.dtype
        self._item_shape = schema.item_shape
        self._codec = schema.codec
        self._dict_size = schema.dict_size
        self._store = store
        # A child forked while another thread rolls over must not find it held for good.
        self._sharding = ForkSafeLock()
        self._writer_pid = 0
        self._take_record_layout()

    def _open_remote(
        self, path: PathArg, cache_dir: PathArg | None, cache_bytes: SupportsIndex | None
    ) -> tuple[str, RemoteSource | None]:
        """Sets self._path; for a URL opens its cache. Returns the folder the store opens (the
        path itself, or the cache's replica of the remote dataset) and the cache."""
        if is_url(path):
            assert isinstance(path, str)
            remote = RemoteSource(
                path, None if cache_dir is None else fs_path(cache_dir), cache_bytes
            )
            self._path = remote.url
            return remote.local_path, remote
        if cache_dir is not None or cache_bytes is not None:
            raise TypeError(
                "cache_dir= and cache_bytes= apply to a dataset opened from a URL "
                f"(s3://, gs://, az://, https://), not to the local path {fs_path(path)!r}"
            )
        self._path = local_path(fs_path(path))
        return self._path, None

    def _close_remote(self) -> None:
        remote = self._remote
        if remote is not None:
            remote.close()

    def _kind(self) -> str:
        """The schema kind of this class's datasets: "dense" or "ragged"."""
        raise NotImplementedError

    def _take_record_layout(self) -> None:
        """Keeps what this class's reads need from the schema (called once it is known)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self._store)

    # Iteration is spelled out: a mypyc-compiled class with __getitem__ and __len__ does not
    # get Python's fallback sequence protocol, so the shipped (compiled) datasets were not
    # iterable while the interpreted ones were. Records are read a block at a time.

    def __iter__(self) -> Iterator[Any]:
        """The records in order, each as ds[i] gives it (read a block of them per gather)."""
        count = len(self)
        block = self._records_per_block()
        for start in range(0, count, block):
            yield from self[start:min(start + block, count)]

    def __reversed__(self) -> Iterator[Any]:
        """The records from the last to the first, each as ds[i] gives it."""
        block = self._records_per_block()
        for stop in range(len(self), 0, -block):
            yield from reversed(self[max(0, stop - block):stop])

    def __getitem__(self, index: object) -> Any:
        raise NotImplementedError

    def _records_per_block(self) -> int:
        """How many records iteration reads at a time."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        # A dataset pickles as its path (made absolute, in case the receiver changes directory)
        # and reopens there with the same options, never creating anything: e.g. for spawned
        # torch DataLoader workers.
        remote = self._remote
        if remote is not None:
            return reopen_dataset, (
                type(self), self._path, True, self._shard_records, self._store.verify_reads,
                remote.cache_dir, remote.cache_bytes_asked, remote.version,
            )
        return reopen_dataset, (
            type(self),
            os.path.abspath(self._path),
            self.readonly,
            self._shard_records,
            self._store.verify_reads,
        )

    # The schema's facts are read-only: assigning one (ds.dtype = np.float64, hoping for a
    # cast) would leave reads and appends disagreeing with the store on disk.
    @property
    def path(self) -> str:
        """The dataset's folder (absolute), or the URL it was opened from."""
        return self._path

    @property
    def schema(self) -> Schema:
        """The schema read from schema.msgpack (kind, dtype, item shape, codec)."""
        return self._schema

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of every record's values."""
        return self._dtype

    @property
    def item_shape(self) -> tuple[int, ...]:
        """A record's shape (dense), or its trailing dimensions after the length (ragged)."""
        return self._item_shape

    @property
    def codec(self) -> str:
        """How each record is stored: "raw", "zstd" or "zstd_dict"."""
        return self._codec

    @property
    def dict_size(self) -> int:
        """The zstd_dict dictionary's size in bytes, as the schema records it."""
        return self._dict_size

    @property
    def shard_records(self) -> int:
        """The most records a shard of this dataset holds before appends start another."""
        return self._shard_records

    @property
    def store(self) -> Store:
        """The underlying byte-record store, or the ShardedStore of a sharded dataset."""
        return self._store

    @property
    def remote(self) -> bool:
        """Whether the dataset was opened from a URL (its reads go through a local cache)."""
        return self._remote is not None

    def remote_usage(self) -> tuple[int, int] | None:
        """For a dataset opened from a URL: (its bytes in the object store, the bytes its
        records take in the local cache now); None for a local dataset."""
        remote = self._remote
        return None if remote is None else remote.usage()

    def remote_orphans(self) -> list[str]:
        """For a dataset opened from a URL: objects in shard folders its manifest does not list
        (a killed writer's uploads, which the next writer removes); [] otherwise."""
        remote = self._remote
        return [] if remote is None else remote.orphans

    @property
    def sharded(self) -> bool:
        """Whether the dataset is several stores (it has a shard manifest)."""
        return isinstance(self._store, ShardedStore)

    def shard_stats(self) -> list[dict[str, Any]]:
        """stats() of each shard with its folder name ('.' for a single store)."""
        store = self._store
        if isinstance(store, ShardedStore):
            return store.shard_stats()
        found: dict[str, Any] = {"name": "."}
        found.update(store.stats())
        return [found]

    def _store_for(self, count: int) -> Store:
        """The store an append of count records goes to. A single store is used while it has
        room; past that the dataset becomes sharded, once, with its store as shard 0."""
        store = self._store
        if store.readonly:
            raise ReadOnlyStoreError(
                f"append refused: dataset {self._path!r} was opened with readonly=True"
            )
        if isinstance(store, Zrecord):
            if self._writer_pid != os.getpid():
                self._claim_single_store(store)
            if len(store) + count > self._shard_records:
                return self._become_sharded()
        return store

    def _claim_single_store(self, store: Zrecord) -> None:
        """Before the first append to a single store: this handle becomes its writer, then
        checks that no other process has made the dataset sharded since it opened (a rollover
        seals the store, and claims its writer lock to do so, so none can from now on)."""
        self._refuse_if_shard("append")
        store.claim_writer()
        if is_file(manifest_path(self._path)):
            raise StoreLockedError(
                f"append refused: {self._path!r} became a sharded dataset in another process "
                "after this handle opened it as a single store; open it again"
            )
        self._writer_pid = os.getpid()

    def _refuse_if_shard(self, operation: str) -> None:
        """Refuses to change the single store of this handle when a sharded dataset's manifest
        lists it: a shard folder opened as a dataset of its own, or this dataset's own store
        after another handle rolled it over (it is then shard '.'). The manifest lists the
        store's count, so the dataset would no longer open. So does a store whose folder was
        moved (a commit_shards renamed it into a sharded dataset) since this handle opened it."""
        store = self._store
        if isinstance(store, Zrecord):
            store.refuse_if_moved(operation)
        dataset = sharded_dataset_of(self._path)
        if dataset is None:
            return
        if dataset == os.path.realpath(self._path):
            raise StoreLockedError(
                f"{operation} refused: {self._path!r} became a sharded dataset in another "
                "process or handle after this handle opened it as a single store; open it again"
            )
        raise ValueError(
            f"{operation} refused: {self._path!r} is a shard of the sharded dataset "
            f"{dataset!r}; open that dataset and {operation} through it"
        )

    def _single_store_write(self, operation: str, write: Callable[[Store], None]) -> None:
        """Runs a write that must not change a store a manifest lists (delete, compact,
        train_dict) on this handle's store. A single store is checked and written under the
        rollover lock: another thread of this handle cannot roll it over in between, and the
        check sees a rollover by another handle or process (_refuse_if_shard). The check runs
        again inside the native call, with the store held exclusively: another process could
        roll the store over between the first check and the call (Zrecord's own shard check
        says why it holds then)."""
        store = self._store
        if isinstance(store, Zrecord):
            with self._sharding:
                store = self._store
                if isinstance(store, Zrecord):
                    self._refuse_if_shard(operation)
                    with store.maintenance_checked_by(self._refuse_if_shard):
                        write(store)
                    return
        write(store)

    def _become_sharded(self) -> ShardedStore:
        with self._sharding:
            store = self._store
            if isinstance(store, ShardedStore):
                return store
            sharded = ShardedStore.adopt(self._path, store, self._schema, self._shard_records)
            sharded.name_as_dataset(self._path)
            self._store = sharded
            return sharded

    @property
    def readonly(self) -> bool:
        """Whether the dataset was opened with readonly=True (every write is refused)."""
        return self._store.readonly

    @property
    def has_dict(self) -> bool:
        return self._store.has_dict

    def delete(self, index: object) -> None:
        """Swap-last delete of the selected records: survivors reindex to stay 0..len-1.

        In a sharded dataset each shard deletes swap-last within itself and later shards shift
        down (see loaderx._store.shard_delete)."""
        indices = normalize_index(index, len(self._store))
        if len(indices):
            self._single_store_write("delete", lambda store: store.delete(indices))

    def stats(self) -> dict[str, int]:
        """records, live_bytes, chunk_bytes and reclaimable, straight from the store (summed
        over the shards of a sharded dataset; shard_stats() lists them one by one)."""
        return self._store.stats()

    def compact(self) -> None:
        """Reclaims deleted bytes in place (offline: no other reader or writer may be active)."""
        self._single_store_write("compact", lambda store: store.compact())

    def sync(self) -> None:
        """Flushes the store's data and table to stable storage."""
        self._store.sync()

    def close(self) -> None:
        self._store.close()
        self._close_remote()

    def __enter__(self: D) -> D:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def verify(self) -> VerifyReport:
        """Checks every record (see Zrecord.verify; every shard of a sharded dataset) and that
        its size fits the schema: a dense record is exactly one sample, a ragged one a whole
        number of rows (reason "size"). A dataset opened from a URL checks the remote objects
        themselves: every record is downloaded (and not cached) and compared with its checksum;
        the table was checked when the dataset was opened."""
        remote = self._remote
        if remote is not None:
            report = self._verify_remote(remote)
        else:
            report = self._store.verify()
        if not report.records:
            return report
        lengths = self._store.record_lengths(slice(0, report.records))
        wrong = self._wrong_sizes(lengths.astype(np.int64))
        reported = {bad.index for bad in report.bad}
        extra = [BadRecord(int(i), "size") for i in wrong.tolist() if int(i) not in reported]
        if not extra:
            return report
        bad = sorted(report.bad + extra)
        return VerifyReport(
            report.path,
            report.records,
            report.has_checksums,
            report.checksummed,
            bad,
            report.bad_count + len(extra),
            report.missing_sums,
        )

    def content_identity(self, length: SupportsIndex | None = None) -> str:
        """An identity of the first `length` records (default: all of them) that changes with
        their content: equal for the same records in the same order (the dataset reopened,
        opened read-only, copied with `cp -a`, or read from a URL), different once any of them
        was rewritten or deleted. A digest of the schema and of each record's checksum
        (loaderx._store.content_identity): it reads 4 bytes a record, so ask once. A loader
        puts it in its checkpoint's fingerprint."""
        # An integer (NumPy's too) as an index is taken: int() took "3" and 1.5 interpreted,
        # and an int annotation made the compiled method refuse np.int64 with mypyc's words.
        if length is None:
            count = len(self)
        else:
            try:
                count = operator.index(length)
            except TypeError:
                raise TypeError(
                    f"length must be an integer or None, not {type(length).__name__}"
                ) from None
        if not 0 <= count <= len(self):
            raise ValueError(f"length must be in [0, {len(self)}], got {count}")
        store = self._store
        parts = store.parts() if isinstance(store, ShardedStore) else [(store.path, len(store))]
        schema = self._schema
        description = f"{schema.kind} {schema.dtype.str} {tuple(schema.item_shape)}"
        return content_identity(description, parts, count)

    def _verify_remote(self, remote: RemoteSource) -> VerifyReport:
        checked, wrong = remote.check_records()
        bad = [BadRecord(index, "checksum") for index in wrong]
        return VerifyReport(self._path, len(self._store), checked > 0, checked, bad, len(bad),
                            remote.missing_sums())

    def _wrong_sizes(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Indices of records whose logical size the schema does not allow."""
        size = self._schema.row_size
        if self._schema.kind == "dense":
            return np.flatnonzero(lengths != size)
        return np.flatnonzero(lengths % size != 0)

    def _check_appendable(self) -> None:
        if self._codec == "zstd_dict" and not self._store.has_dict:
            raise DictionaryError(
                f"{self._path!r} is a zstd_dict dataset without a dictionary yet; call "
                "train_dict(samples) with representative samples before the first append"
            )

    def _train(
        self, records: list[npt.NDArray[np.uint8]], dict_size: str | SupportsIndex | None
    ) -> None:
        if self._codec != "zstd_dict":
            raise ValueError(
                f"train_dict applies to a zstd_dict dataset; {self._path!r} uses {self._codec!r} "
                "(loaderx.converter.recode rewrites a store with another codec)"
            )
        size = self._dict_size if dict_size is None else resolve_dict_size(dict_size)
        if not records:
            raise ValueError("train_dict needs at least one sample")
        self._single_store_write("train_dict", lambda store: store.train_dict(records, size))

    def __repr__(self) -> str:
        name = type(self).__name__
        return (
            f"{name}({self._path!r}, dtype={self._dtype}, item_shape={self._item_shape}, "
            f"codec={self._codec!r})"
        )


def reopen_dataset(
    kind: Callable[..., DatasetBase],
    path: str,
    readonly: bool,
    shard_records: int,
    verify: bool | None,
    cache_dir: str | None = None,
    cache_bytes: int | None = None,
    version: str | None = None,
) -> DatasetBase:
    """Unpickles a dataset: opens the existing one at path with its class (kind); one from a
    URL with the same cache folder and bound, at the version the sender had open (or raises
    RemoteChangedError: remote_source.opening_version)."""
    if cache_dir is None and cache_bytes is None:
        return kind(path, readonly=readonly, shard_records=shard_records, verify=verify)
    with opening_version(version):
        return kind(path, readonly=readonly, shard_records=shard_records, verify=verify,
                    cache_dir=cache_dir, cache_bytes=cache_bytes)


__all__ = ["DatasetBase", "check_array", "reopen_dataset"]
