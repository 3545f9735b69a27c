"""DenseDataset, RaggedDataset, pad and DICT_TIERS: typed NumPy datasets over a Zrecord store.

A dataset folder is a Zrecord store plus schema.msgpack (see loaderx._store.schema). A dense dataset
holds one fixed-shape sample per record, so its reads are fixed-stride gathers whose result shape
comes from the schema alone; a ragged dataset holds records of shape (L, *item_shape) with their
own L and reads them into a list. Every read and every append is one batch and one native call.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._os.folder_swap import recover
from loaderx.errors import (
    CorruptStoreError,
    DictionaryError,
    ReadOnlyStoreError,
    SchemaError,
    StoreFullError,
    StoreLockedError,
)
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._store.indexing import normalize_index, normalize_selection
from loaderx._native.calls import NDARRAY, NativeCalls, gather_fixed
from loaderx._os.paths import PathArg, fs_path, is_file
from loaderx._native.result_buffers import POOL as RESULT_BUFFERS
from loaderx._store.schema import (
    DICT_SIZE_MAX,
    DICT_SIZE_MIN,
    DICT_TIERS,
    RECORD_SIZE_MAX,
    Codec,
    Schema,
    make_schema,
    read_schema,
    require_same,
    resolve_dict_size,
    schema_path,
    write_schema,
)
from loaderx._store.sharded_store import ShardedStore, check_shard_records
from loaderx._store.layout import META_FILE, SHARD_RECORDS_MAX, manifest_path, sharded_dataset_of
from loaderx._store.verify import BadRecord, VerifyReport
from loaderx._store.zrecord import Zrecord

__all__ = [
    "SHARD_RECORDS_MAX",
    "DICT_SIZE_MAX",
    "DICT_SIZE_MIN",
    "DICT_TIERS",
    "DenseDataset",
    "RaggedDataset",
    "pad",
]

_INT64: Final = np.dtype(np.int64)

Shape = SupportsIndex | Sequence[SupportsIndex]
# What a dataset reads and writes through: one store, or the shards of a sharded dataset.
Store = Zrecord | ShardedStore


def _open_store(
    path: str,
    kind: str,
    wanted: Schema | None,
    shard_records: int,
    readonly: bool,
    verify: bool | None,
) -> tuple[Schema, Store]:
    """Opens (wanted is None) or creates the dataset folder and returns its schema and store.

    Creation validates the schema before touching the disk, then creates the store, then writes
    the schema; opening a folder that already has a schema compares it with the one asked for.
    A folder with a shard manifest opens as a ShardedStore. A read-only open never creates
    anything.
    """
    if not readonly and not is_file(schema_path(path)):
        # A conversion killed in the middle of replacing this folder left it moved aside: put
        # the complete one in place before deciding there is no dataset (or creating one).
        # A read-only open changes nothing, so it leaves that to the next writable one.
        recover(path)
    if is_file(schema_path(path)):
        found = read_schema(path)
        if found.kind != kind:
            right = "RaggedDataset" if found.kind == "ragged" else "DenseDataset"
            raise SchemaError(f"{path!r} holds a {found.kind} dataset; open it with {right}")
        if wanted is not None:
            require_same(path, found, wanted)
        if os.path.exists(manifest_path(path)):
            return found, ShardedStore.open(path, found, shard_records, readonly, verify)
        create = wanted is not None and not readonly
        # The dataset guards a shard folder opened by itself (_refuse_if_shard), and its
        # own checks (a rollover elsewhere) must come first: its store skips Zrecord's.
        return found, Zrecord(
            path, create=create, codec=found.codec, readonly=readonly, verify=verify,
            _dataset_owned=True,
        )
    if wanted is None or readonly:
        if is_file(os.path.join(path, META_FILE)):
            raise SchemaError(
                f"{path!r} is a Zrecord store without {os.path.basename(schema_path(path))}: "
                "open it with loaderx._store.zrecord.Zrecord, or pass dtype= (and item_shape=) to "
                "declare the schema of an empty store"
            )
        if wanted is not None:  # readonly: the schema named, but a read-only open never creates
            raise FileNotFoundError(
                f"no loaderx dataset at {path!r}; readonly=True opens an existing one and never "
                "creates it (open without readonly=True to create it)"
            )
        raise FileNotFoundError(
            f"no loaderx dataset at {path!r}; pass dtype= (and item_shape=) to create one"
        )
    store = Zrecord(path, create=True, codec=wanted.codec, verify=verify, _dataset_owned=True)
    count = len(store)
    if count > 0:
        store.close()
        raise SchemaError(
            f"{path!r} already holds {count} Zrecord records but no schema; refusing to "
            "declare one over data of unknown layout"
        )
    try:
        write_schema(path, wanted)
    except BaseException:
        store.close()
        raise
    return wanted, store


def _same_dtype(a: np.dtype[Any], b: np.dtype[Any]) -> bool:
    """a == b, without NumPy's comparison for the usual case of one dtype object (a builtin
    dtype such as uint8 is a single object): 0.15 us of a small read's time here."""
    return a is b or a == b


def _gather_fixed(
    store: Store, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
) -> bool:
    """The dense fast path (native_calls.gather_fixed) on the store's native handle, or on its
    view for a sharded store; False, with nothing copied, sends the caller to its general path.
    A Zrecord's own method would be looked up by name at every call: it is an interpreted
    class, its base NativeCalls is compiled."""
    if isinstance(store, NativeCalls):
        return gather_fixed(store, indices, out, record_size)
    view = store.view
    if view is None:
        return False
    try:
        return gather_fixed(view, indices, out, record_size)
    except ValueError:
        if view.closed:
            return False  # a rollover or delete replaced it: the general path reads the new one
        raise


def _new_result(shape: tuple[int, ...], dtype: np.dtype[Any], nbytes: int) -> npt.NDArray[Any]:
    """A fresh array for a read to fill completely (a failed read never returns it): a big
    one comes from recycled memory (see loaderx._native.result_buffers), a small one from np.empty."""
    if nbytes < RESULT_BUFFERS.min_bytes:
        return np.empty(shape, dtype=dtype)
    return RESULT_BUFFERS.empty(shape, dtype, nbytes)


def _create_schema(
    kind: str,
    dtype: DTypeLike | None,
    item_shape: Shape | None,
    codec: str,
    dict_size: str | SupportsIndex,
) -> Schema | None:
    """The schema a constructor asked for, or None when it only opens."""
    if dtype is None:
        if item_shape is not None:
            raise TypeError("item_shape was given without dtype; a new dataset needs both")
        return None
    return make_schema(kind, dtype, () if item_shape is None else item_shape, codec, dict_size)


def _check_array(value: object, what: str, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
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


class _DatasetBase:
    """What dense and ragged datasets share: the schema, the store and its maintenance."""

    path: str
    schema: Schema
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...]
    codec: str
    dict_size: int
    shard_records: int
    _store: Store
    _sharding: ForkSafeLock
    # The process in which this handle became its single store's writer and checked it is
    # still one (0: not yet). A forked child is not the writer (the parent keeps the lock), so
    # it checks again: the parent may close and another process roll the store over first.
    _writer_pid: int

    def __init__(
        self,
        path: PathArg,
        kind: str,
        wanted: Schema | None,
        shard_records: SupportsIndex | None,
        readonly: bool,
        verify: bool | None,
    ) -> None:
        self.path = fs_path(path)
        capacity = SHARD_RECORDS_MAX if shard_records is None else shard_records
        self.shard_records = check_shard_records(capacity)
        schema, store = _open_store(
            self.path, kind, wanted, self.shard_records, readonly, verify
        )
        self.schema = schema
        self.dtype = schema.dtype
        self.item_shape = schema.item_shape
        self.codec = schema.codec
        self.dict_size = schema.dict_size
        self._store = store
        # A child forked while another thread rolls over must not find it held for good.
        self._sharding = ForkSafeLock()
        self._writer_pid = 0

    def __len__(self) -> int:
        return len(self._store)

    def __reduce__(self) -> tuple[Any, ...]:
        # A dataset pickles as its path (made absolute, in case the receiver changes directory)
        # and reopens there with the same options, never creating anything: e.g. for spawned
        # torch DataLoader workers.
        return _reopen_dataset, (
            type(self).__name__,
            os.path.abspath(self.path),
            self.readonly,
            self.shard_records,
            self._store.verify_reads,
        )

    @property
    def store(self) -> Store:
        """The underlying byte-record store, or the ShardedStore of a sharded dataset."""
        return self._store

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
                f"append refused: dataset {self.path!r} was opened with readonly=True"
            )
        if isinstance(store, Zrecord):
            if self._writer_pid != os.getpid():
                self._claim_single_store(store)
            if len(store) + count > self.shard_records:
                return self._become_sharded()
        return store

    def _claim_single_store(self, store: Zrecord) -> None:
        """Before the first append to a single store: this handle becomes its writer, then
        checks that no other process has made the dataset sharded since it opened (a rollover
        seals the store, and claims its writer lock to do so, so none can from now on)."""
        self._refuse_if_shard("append")
        store.claim_writer()
        if is_file(manifest_path(self.path)):
            raise StoreLockedError(
                f"append refused: {self.path!r} became a sharded dataset in another process "
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
        dataset = sharded_dataset_of(self.path)
        if dataset is None:
            return
        if dataset == os.path.realpath(self.path):
            raise StoreLockedError(
                f"{operation} refused: {self.path!r} became a sharded dataset in another "
                "process or handle after this handle opened it as a single store; open it again"
            )
        raise ValueError(
            f"{operation} refused: {self.path!r} is a shard of the sharded dataset "
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
            sharded = ShardedStore.adopt(self.path, store, self.schema, self.shard_records)
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
        down (see loaderx._store.sharded_store)."""
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

    def verify(self) -> VerifyReport:
        """Checks every record (see Zrecord.verify; every shard of a sharded dataset) and that
        its size fits the schema: a dense record is exactly one sample, a ragged one a whole
        number of rows (reason "size")."""
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
        )

    def _wrong_sizes(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
        """Indices of records whose logical size the schema does not allow."""
        size = self.schema.row_size
        if self.schema.kind == "dense":
            return np.flatnonzero(lengths != size)
        return np.flatnonzero(lengths % size != 0)

    def _check_appendable(self) -> None:
        if self.codec == "zstd_dict" and not self._store.has_dict:
            raise DictionaryError(
                f"{self.path!r} is a zstd_dict dataset without a dictionary yet; call "
                "train_dict(samples) with representative samples before the first append"
            )

    def _train(
        self, records: list[npt.NDArray[np.uint8]], dict_size: str | SupportsIndex | None
    ) -> None:
        if self.codec != "zstd_dict":
            raise ValueError(
                f"train_dict applies to a zstd_dict dataset; {self.path!r} uses {self.codec!r} "
                "(loaderx._data.converter.recode rewrites a store with another codec)"
            )
        size = self.dict_size if dict_size is None else resolve_dict_size(dict_size)
        if not records:
            raise ValueError("train_dict needs at least one sample")
        self._single_store_write("train_dict", lambda store: store.train_dict(records, size))

    def __repr__(self) -> str:
        name = type(self).__name__
        return (
            f"{name}({self.path!r}, dtype={self.dtype}, item_shape={self.item_shape}, "
            f"codec={self.codec!r})"
        )


class DenseDataset(_DatasetBase):
    """A dataset of fixed-shape samples: every record is one item_shape array of dtype.

    DenseDataset(path) opens an existing dataset; DenseDataset(path, dtype=..., item_shape=...,
    codec="zstd", dict_size="balanced") creates one (writing its schema at once) or reopens one
    whose schema is the same. DenseDataset(path, readonly=True) opens one for reading only
    (see Zrecord). Reads return (B, *item_shape) arrays, or one sample for an int. verify=
    chooses which records reads check against their checksum (see Zrecord).
    """

    record_size: int

    def __init__(
        self,
        path: PathArg,
        dtype: DTypeLike | None = None,
        item_shape: Shape | None = None,
        codec: Codec = "zstd",
        dict_size: str | SupportsIndex = "balanced",
        *,
        shard_records: SupportsIndex | None = None,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> None:
        wanted = _create_schema("dense", dtype, item_shape, codec, dict_size)
        super().__init__(path, "dense", wanted, shard_records, readonly, verify)
        self.record_size = self.schema.row_size

    def __enter__(self) -> DenseDataset:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __getitem__(self, index: object) -> Any:
        """ds[index] as NumPy would index an array: read(index), except that an int index into
        a dataset of scalars (item_shape ()) gives a NumPy scalar rather than a 0-d array."""
        if type(index) is NDARRAY:
            fast = self._read_plain(index, None)
            if fast is not None:
                return fast
        result = self.read(index)
        if result.ndim == 0:
            return result[()]
        return result

    def read(self, index: object, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """The selected samples, gathered in one native call (into out when given).

        An int returns one sample of shape item_shape; a slice, an integer sequence or array or
        a bool mask returns a (B, *item_shape) batch in index order. out must then have exactly
        that shape and the dataset's dtype, and be C-contiguous and writable.
        """
        if type(index) is NDARRAY:
            fast = self._read_plain(index, out)
            if fast is not None:
                return fast
        indices, selection = normalize_selection(index, len(self._store))
        shape = (*selection, *self.item_shape)
        if out is None:
            result = _new_result(shape, self.dtype, len(indices) * self.record_size)
        else:
            result = _check_array(out, "out", self.dtype)
            if result.shape != shape:
                raise ValueError(f"out has shape {result.shape}, the selection needs {shape}")
            if not result.flags.c_contiguous or not result.flags.writeable:
                raise ValueError("out must be a writable C-contiguous array")
        if len(indices):
            self._store.gather_into(indices, result, self.record_size)
        return result

    def _read_plain(
        self, index: npt.NDArray[Any], out: npt.NDArray[Any] | None
    ) -> npt.NDArray[Any] | None:
        """read() of a one-dimensional int64 index array in one native call, or None (nothing
        copied) when the general path must run: another dtype, a negative or out-of-range
        index, an out that does not fit. The indices are not scanned here: the native gather
        checks their bounds once, before any byte moves (a sharded dataset's view does the
        same across its shards)."""
        store = self._store
        # The dtype first: a bool mask or an int32 array must not cost a result array here.
        if index.dtype is not _INT64 or index.ndim != 1:
            return None
        count = len(index)
        shape = (count,) + self.item_shape
        if out is None:
            result = _new_result(shape, self.dtype, count * self.record_size)
        elif type(out) is NDARRAY and _same_dtype(out.dtype, self.dtype) and out.shape == shape:
            result = out
        else:
            return None
        if _gather_fixed(store, index, result, self.record_size):
            return result
        return None

    def gather_into(self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any]) -> None:
        """The loader's hot path: samples indices[i] into out[i], one native call.

        indices must already be normalised (a C-contiguous int64 array with 0 <= i < len);
        out a writable C-contiguous array of this dtype holding exactly len(indices) samples.
        Only cheap checks run here; the native side refuses out-of-range indices before copying.
        """
        # The common case first, with exact type checks (cheaper than isinstance); a subclass
        # or anything else is checked below, and a declined fast path takes the general one.
        if type(out) is NDARRAY and type(indices) is NDARRAY and _same_dtype(out.dtype, self.dtype):
            if _gather_fixed(self._store, indices, out, self.record_size):
                return
        else:
            self._check_into(indices, out)
        if indices.dtype != _INT64:
            raise TypeError(f"indices must be int64, not {indices.dtype}")
        self._store.gather_into(indices, out, self.record_size)

    def _check_into(self, indices: object, out: object) -> None:
        """gather_into's TypeErrors, for arguments that are not both arrays of the right dtype."""
        # isinstance first: anything else (a bytearray, a list) has no .dtype to compare.
        if not isinstance(out, NDARRAY):
            raise TypeError(
                f"out must be a numpy array of dtype {self.dtype}, not {type(out).__name__}"
            )
        if not isinstance(indices, NDARRAY):
            raise TypeError(
                f"indices must be an int64 numpy array, not {type(indices).__name__} "
                "(normalise it with loaderx._store.indexing.normalize_index)"
            )
        if not _same_dtype(out.dtype, self.dtype):
            raise TypeError(f"out has dtype {out.dtype}, the dataset holds {self.dtype}")

    def _batch(self, batch: object, what: str) -> npt.NDArray[Any]:
        """batch validated as (B, *item_shape) of the dataset's dtype, made C-contiguous."""
        array = _check_array(batch, what, self.dtype)
        if array.ndim != len(self.item_shape) + 1 or array.shape[1:] != self.item_shape:
            hint = ""
            if array.shape == self.item_shape:
                hint = " (one sample is a batch of one: pass sample[None])"
            raise ValueError(
                f"{what} has shape {array.shape}; this dataset takes batches of shape "
                f"(B, *{self.item_shape}){hint}"
            )
        return np.ascontiguousarray(array)

    def append(self, batch: npt.NDArray[Any]) -> int:
        """Appends a (B, *item_shape) batch in one native call and returns its first index.

        The batch must already have the dataset's dtype: a different dtype is refused with a
        TypeError (convert with .astype yourself; nothing is cast silently). A non-contiguous
        batch is copied first. Everything is checked before anything is written.
        """
        data = self._batch(batch, "batch")
        self._check_appendable()
        if data.shape[0] == 0:
            return len(self._store)
        store = self._store_for(data.shape[0])
        try:
            return store.append_fixed(data, self.record_size)
        except StoreFullError:
            if isinstance(store, ShardedStore) or len(store) == 0:
                raise
        # The single store ran out of chunk space before its record limit: roll over.
        return self._become_sharded().append_fixed(data, self.record_size)

    def train_dict(
        self, samples: npt.NDArray[Any], dict_size: str | SupportsIndex | None = None
    ) -> None:
        """Trains the zstd_dict dictionary on a (N, *item_shape) array of samples.

        dict_size defaults to the schema's; a tier name or a byte count overrides it.
        """
        data = self._batch(samples, "samples")
        flat = data.reshape(-1).view(np.uint8)
        size = self.record_size
        records = [flat[i * size : (i + 1) * size] for i in range(data.shape[0])]
        self._train(records, dict_size)


class RaggedDataset(_DatasetBase):
    """A dataset of variable-length records: record i has shape (L_i, *item_shape).

    Construction works as for DenseDataset. Reads return a list of arrays (one array for an
    int); append takes a sequence of arrays whose trailing dimensions equal item_shape.
    """

    row_size: int

    def __init__(
        self,
        path: PathArg,
        dtype: DTypeLike | None = None,
        item_shape: Shape | None = None,
        codec: Codec = "zstd",
        dict_size: str | SupportsIndex = "balanced",
        *,
        shard_records: SupportsIndex | None = None,
        readonly: bool = False,
        verify: bool | None = None,
    ) -> None:
        wanted = _create_schema("ragged", dtype, item_shape, codec, dict_size)
        super().__init__(path, "ragged", wanted, shard_records, readonly, verify)
        self.row_size = self.schema.row_size

    def __enter__(self) -> RaggedDataset:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __getitem__(self, index: object) -> Any:
        return self.read(index)

    def read(self, index: object) -> Any:
        """One array for an int index, else a list of arrays in index order.

        The records of one read are views into a single buffer filled by one gather.
        """
        indices, selection = normalize_selection(index, len(self._store))
        if len(selection) > 1:
            raise IndexError(
                f"a ragged dataset takes one-dimensional selections; this index has shape "
                f"{selection} (flatten it, or read its rows one at a time)"
            )
        records = self._read(indices)
        if not selection:
            return records[0]
        return records

    def _read(self, indices: npt.NDArray[np.int64]) -> list[npt.NDArray[Any]]:
        if len(indices) == 0:
            return []
        data, offsets = self._store.gather_ragged(indices)
        bounds: list[int] = offsets.tolist()
        row = self.row_size
        shape = (-1, *self.item_shape)
        records: list[npt.NDArray[Any]] = []
        for i in range(len(bounds) - 1):
            start = bounds[i]
            stop = bounds[i + 1]
            if (stop - start) % row:
                raise CorruptStoreError(
                    f"record {int(indices[i])} of {self.path!r} has {stop - start} bytes, not a "
                    f"whole number of {row}-byte rows of the schema"
                )
            records.append(data[start:stop].view(self.dtype).reshape(shape))
        return records

    def lengths(self, index: object) -> npt.NDArray[np.int64]:
        """The number of rows (L) of each selected record, without reading the records."""
        indices = normalize_index(index, len(self._store))
        if len(indices) == 0:
            return np.empty(0, dtype=np.int64)
        sizes = self._store.record_lengths(indices)
        return (sizes // np.uint64(self.row_size)).astype(np.int64)

    def _records(self, records: object, what: str) -> list[npt.NDArray[Any]]:
        """Every record validated against the schema and made C-contiguous (nothing written)."""
        if isinstance(records, np.ndarray) or not isinstance(records, Sequence):
            raise TypeError(
                f"{what} must be a list (or other sequence) of arrays, not "
                f"{type(records).__name__}; wrap a single record as [record]"
            )
        checked: list[npt.NDArray[Any]] = []
        ndim = len(self.item_shape) + 1
        for position, record in enumerate(records):
            name = f"{what}[{position}]"
            array = _check_array(record, name, self.dtype)
            if array.ndim != ndim or array.shape[1:] != self.item_shape:
                raise ValueError(
                    f"{name} has shape {array.shape}; records of this dataset have shape "
                    f"(L, *{self.item_shape})"
                )
            if array.nbytes > RECORD_SIZE_MAX:
                raise ValueError(
                    f"{name} is {array.nbytes} bytes, over the store's {RECORD_SIZE_MAX}-byte "
                    "(1 MiB) record limit"
                )
            checked.append(np.ascontiguousarray(array))
        return checked

    def append(self, records: Sequence[npt.NDArray[Any]]) -> int:
        """Appends a list of (L, *item_shape) arrays in one native call; returns the first index.

        Every record must have the dataset's dtype exactly (no silent casts: use .astype) and
        at most 1 MiB; every record is checked before anything is written.
        """
        checked = self._records(records, "records")
        self._check_appendable()
        if not checked:
            return len(self._store)
        store = self._store_for(len(checked))
        try:
            return store.append(checked)
        except StoreFullError:
            if isinstance(store, ShardedStore) or len(store) == 0:
                raise
        # The single store ran out of chunk space before its record limit: roll over.
        return self._become_sharded().append(checked)

    def train_dict(
        self, samples: Sequence[npt.NDArray[Any]], dict_size: str | SupportsIndex | None = None
    ) -> None:
        """Trains the zstd_dict dictionary on a list of sample records."""
        checked = self._records(samples, "samples")
        self._train([record.reshape(-1).view(np.uint8) for record in checked], dict_size)


def _reopen_dataset(
    kind: str,
    path: str,
    readonly: bool = False,
    shard_records: int | None = None,
    verify: bool | None = None,
) -> DenseDataset | RaggedDataset:
    """Unpickles a dataset: opens the existing one at path by its class name. (The defaults
    keep pickles made before `verify` was carried loadable.)"""
    if kind == "RaggedDataset":
        return RaggedDataset(path, readonly=readonly, shard_records=shard_records, verify=verify)
    return DenseDataset(path, readonly=readonly, shard_records=shard_records, verify=verify)


def _padding(value: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """value as a 0-d array of dtype; ValueError when the cast would change more than a float's
    rounding (np.full pads int records with 1 for 1.5, or with -2**63 for NaN, without a word)."""
    try:
        with np.errstate(invalid="ignore", over="ignore"):
            cast = np.array(value, dtype=dtype)
            wanted = np.asarray(value)
            if cast.ndim != 0 or wanted.dtype.kind not in "biufc":
                kept = False
            elif dtype.kind in "fc":  # rounded is fine; infinite, NaN or imaginary parts must stay
                kept = bool(np.isfinite(cast) == np.isfinite(wanted)
                            and np.isnan(cast) == np.isnan(wanted)
                            and (dtype.kind == "c" or np.imag(wanted) == 0))
            else:
                kept = bool(cast == wanted)
    except (TypeError, ValueError, OverflowError):
        kept = False
    if not kept:
        raise ValueError(f"padding value {value!r} is not a value of the records' dtype {dtype}")
    return cast


def pad(
    records: Sequence[npt.NDArray[Any]], value: Any = 0
) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
    """Pads a list of (L_i, *trailing) arrays into a (B, max L, *trailing) array plus the L_i.

    Every record must have the same dtype and trailing shape; the padding is `value`, which
    must be a value of that dtype (a float dtype rounds it; anything else it would change, such
    as NaN or 1.5 for integer records, is a ValueError).
    """
    if len(records) == 0:
        raise ValueError("pad needs at least one record to know the dtype and trailing shape")
    first = records[0]
    if not isinstance(first, np.ndarray) or first.ndim == 0:
        raise TypeError("pad takes a list of arrays with at least one dimension")
    trailing = first.shape[1:]
    lengths = np.empty(len(records), dtype=np.int64)
    for position, record in enumerate(records):
        if not isinstance(record, np.ndarray) or record.ndim == 0:
            raise TypeError(f"records[{position}] is not an array with at least one dimension")
        if record.dtype != first.dtype:
            raise TypeError(
                f"records[{position}] has dtype {record.dtype}, records[0] has {first.dtype}"
            )
        if record.shape[1:] != trailing:
            raise ValueError(
                f"records[{position}] has trailing shape {record.shape[1:]}, records[0] has "
                f"{trailing}"
            )
        lengths[position] = record.shape[0]
    longest = int(lengths.max())
    dense = np.full((len(records), longest, *trailing), _padding(value, first.dtype),
                    dtype=first.dtype)
    for position, record in enumerate(records):
        dense[position, : record.shape[0]] = record
    return dense, lengths
