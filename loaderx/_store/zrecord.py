"""Zrecord: the persistent byte-record store, a thin typed layer over libloaderx's lx_store_*.

Every operation is one native call on a whole batch; the native side validates again, so the
checks here exist to give clear messages early. Calls in flight are tracked by NativeCalls
(loaderx._native.calls: lock-free with a GIL, under a lock on free-threaded builds), so
close() waits for calls already inside the library and every later call raises ValueError.
Every open Zrecord is known to a fork handler (loaderx._store.store_open) that gives the child
fresh locks and an empty list of calls (the native side does the same for its own state).
"""

from __future__ import annotations

import ctypes
import os
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from loaderx._native import library as _native
from loaderx.errors import ReadOnlyStoreError
from loaderx._store.indexing import normalize_index
from loaderx._native.calls import NativeCalls
from loaderx._os.urls import local_path, refuse_url
from loaderx._os.paths import PathArg, folder_identity, fs_path, is_file
from loaderx._store import shared_calls
from loaderx._store.maintenance_check import (
    MAINTENANCE_CHECK,
    caller_check,
    check_maintenance,
    checked_by,
    register,
)
from loaderx._store.native_append import append_packed, append_rows
from loaderx._store.record_batches import (
    CODECS,
    RECORD_COUNT_MAX,
    RECORD_SIZE_MAX,
    Records,
    codec_id,
    fixed_records,
    pack_records,
    verify_flags,
)
from loaderx._store.flags import Flag, check_flag, check_optional_flag
from loaderx._store.schema import Codec
from loaderx._store.store_open import open_store_handle, track_open
from loaderx._store.layout import META_FILE, sharded_dataset_of
from loaderx._store.sums_expected import missing_sums
from loaderx._store.verify import BadRecord, VerifyReport
from loaderx._native.library import (POOL_ALWAYS, POOL_AUTO, POOL_NEVER, STORES_AUTO, STORES_CACHED,
                             STORES_STREAMING, pool_policy, set_pool_policy, set_stores_policy,
                             stores_policy)

# The pool and stores policies are tuning knobs of the native library; their public home is here.
__all__ = [
    "CODECS", "POOL_ALWAYS", "POOL_AUTO", "POOL_NEVER", "RECORD_COUNT_MAX", "RECORD_SIZE_MAX",
    "STORES_AUTO", "STORES_CACHED", "STORES_STREAMING", "Zrecord", "pool_policy", "set_pool_policy",
    "set_stores_policy", "stores_policy",
]

_STATS_KEYS: Final = ("records", "live_bytes", "chunk_bytes", "reclaimable")
# The most bad records a VerifyReport lists (it always counts them all).
VERIFY_LIST_MAX: Final = 1 << 16


class StoreView(Protocol):
    """What a store needs of a view over it (loaderx._store.view.View): to close it first."""

    def close(self) -> None: ...


class Zrecord(NativeCalls):
    """A persistent store of byte records at `path` (a folder holding meta.zr and chunk files).

    Zrecord(path) opens an existing store and raises FileNotFoundError when there is none, so a
    mistyped path never leaves an empty store behind; Zrecord(path, create=True) creates the
    store if needed. A Zrecord pickles as its path and options and reopens the store (never
    creating it) when unpickled, so it can travel to spawned worker processes.

    readonly=True opens an existing store for reading only: meta.zr is mapped read-only, no
    writer lock is taken, nothing is created, and every write raises ReadOnlyStoreError before
    touching anything. It works on a read-only filesystem and for a user who cannot write the
    store's files.

    A shard folder of a sharded dataset (or a sharded dataset's own folder, whose store is its
    top-level shard) reads like any store but refuses append, delete, compact and train_dict
    with ValueError: its manifest lists the shard's record count, and the sharded dataset would
    no longer open. Write through the dataset (DenseDataset or RaggedDataset) instead. delete,
    compact and train_dict check again inside their native call, once they hold the store
    exclusively (loaderx._store.maintenance_check), so a rollover in another process cannot
    slip between the check and the change.
    """

    _path: str
    # What a closed store calls itself: empty for "Zrecord '/path'", or what name_as_dataset set.
    _named: str = ""
    _codec: str
    _durable: bool
    _readonly: bool
    _verify_reads: bool | None
    _codec_id: int
    # Whether writes skip the shard-folder check (_refuse_if_shard): the handle is loaderx's
    # own dataset layer's, or it is the store's writer and passed the check when it claimed.
    _writes_checked: bool
    _dataset_owned: bool
    # The folder's (st_dev, st_ino) when opened: a handle whose folder a commit renamed into a
    # sharded dataset still writes it, while its path no longer shows it is a shard.
    _folder_identity: tuple[int, int] | None
    _folder_absolute: str  # the path, made absolute at open (a later chdir is no move)
    _finalizer: weakref.finalize[Any, Any]
    # The open views over this store (each holds the store; close() closes them first).
    _views: weakref.WeakSet[StoreView]

    def __init__(
        self,
        path: PathArg,
        *,
        create: Flag = False,
        codec: Codec = "zstd",
        durable: Flag = False,
        readonly: Flag = False,
        verify: Flag | None = None,
        _dataset_owned: bool = False,
    ) -> None:
        """verify: which records gathers check against their checksum. None (the default):
        compressed and empty records, whose check costs little next to decompression; True:
        every record, raw ones included; False: none. A mismatch raises CorruptStoreError.

        _dataset_owned is internal: loaderx's dataset layer opens its stores with it, since it
        keeps a sharded dataset's manifest in step with its shards
        (loaderx._store.sharded_store) and refuses the writes that a shard opened by itself
        must not take (loaderx._data.dataset_base)."""
        create = check_flag("create", create)
        durable = check_flag("durable", durable)
        readonly = check_flag("readonly", readonly)
        verify = check_optional_flag("verify", verify)
        refuse_url(path, "Zrecord", "open a dataset at a URL with DenseDataset or RaggedDataset")
        self._path = local_path(fs_path(path))
        self._codec_id = codec_id(codec)
        self._codec = codec
        self._durable = durable
        self._readonly = readonly
        # readonly wins over create (a read-only open never makes anything), and the message
        # for a missing store must then not suggest the create=True the caller passed.
        asked_to_create = create
        if self._readonly:
            create = False
        verify_flag = verify_flags(verify)
        self._verify_reads = verify
        self._dataset_owned = bool(_dataset_owned)
        self._writes_checked = self._dataset_owned
        self._init_calls()
        self._views = weakref.WeakSet()
        if os.path.exists(self._path) and not os.path.isdir(self._path):
            raise NotADirectoryError(f"{self._path!r} is a file; a Zrecord store is a folder")
        if create:
            os.makedirs(self._path, exist_ok=True)
        elif not is_file(os.path.join(self._path, META_FILE)):
            advice = ("readonly=True never creates one: open it without readonly to create it"
                      if asked_to_create else "pass create=True to create one")
            raise FileNotFoundError(
                f"no Zrecord store at {self._path!r} (meta.zr is missing); {advice}"
            )
        flags = (
            (_native.OPEN_CREATE if create else 0)
            | (_native.OPEN_DURABLE if durable else 0)
            | (_native.OPEN_READ_ONLY if self._readonly else 0)
            | verify_flag
        )
        handle = open_store_handle(self._path, flags)
        if not self._readonly:
            # Every writable handle: the dataset layer's handles run their dataset's check.
            code = _native.lib.lx_store_set_maintenance_check(
                handle, MAINTENANCE_CHECK, register(self)
            )
            if code != _native.OK:
                _native.lib.lx_store_close(handle)
                _native.raise_status(code, f"cannot open Zrecord store {self._path!r}")
        self._set_handle(handle)
        self._closed = False
        self._folder_absolute = os.path.abspath(self._path)
        self._folder_identity = folder_identity(self._folder_absolute)
        # Closes the native store if this object is collected without close(). Not at exit:
        # daemon threads may still be inside a call then, and the OS releases everything anyway.
        self._finalizer = weakref.finalize(self, _native.lib.lx_store_close, self._handle)
        self._finalizer.atexit = False
        track_open(self)
        # Looked up once: the attribute chain costs as much as a small gather's bookkeeping.
        self._gather_fixed_native = _native.lib.lx_store_gather_fixed
        self._gather_arrays_native = _native.lib.lx_store_gather_arrays
        self._gather_packed_arrays_native = _native.lib.lx_store_gather_packed_arrays
        self._gather_packed_native = _native.lib.lx_store_gather_packed

    # --- lifetime ---------------------------------------------------------------------------

    def _describe(self) -> str:
        return self._named or f"Zrecord {self._path!r}"

    def name_as_dataset(self, name: str) -> None:
        """Has this store call itself "dataset 'name'" when a call finds it closed: it is the
        store of a dataset opened as `name` (a path, or a URL whose replica this store reads),
        so a closed dataset's every call names it as its user opened it."""
        self._named = f"dataset {name!r}"

    def _label(self) -> str:
        return repr(self._path)

    def _refuse_if_readonly(self, operation: str) -> None:
        if self._readonly:
            raise ReadOnlyStoreError(
                f"{operation} refused: Zrecord {self._path!r} was opened with readonly=True; "
                "open it without readonly to change it"
            )

    def _refuse_if_shard(self, operation: str) -> None:
        """Refuses a write that changes the record count or layout of a sharded dataset's
        shard: the manifest lists each shard's count, so the dataset would no longer open."""
        self.refuse_if_moved(operation)
        dataset = sharded_dataset_of(self._folder_absolute)
        if dataset is None:
            return
        if dataset == os.path.realpath(self._folder_absolute):
            what = "the top-level store (shard '.') of the sharded dataset"
        else:
            what = "a shard of the sharded dataset"
        raise ValueError(
            f"{operation} refused: Zrecord {self._path!r} is {what} {dataset!r}, whose manifest "
            f"lists its record count; open that dataset with DenseDataset or RaggedDataset and "
            f"{operation} through it"
        )

    def refuse_if_moved(self, operation: str) -> None:
        """Refuses a first write when the store's folder is no longer at its path (moved or
        replaced since this handle opened it): the path then says nothing about the folder's
        place, and a commit_shards may have renamed it into a sharded dataset as a shard."""
        if folder_identity(self._folder_absolute) != self._folder_identity:
            raise ValueError(
                f"{operation} refused: the folder of Zrecord {self._path!r} was moved or "
                "replaced since this handle opened it (a commit_shards makes a staged folder a "
                "shard that way); open the store where it is now"
            )

    def _check_first_write(self, operation: str, claim: bool) -> None:
        """Before a write of a handle not checked yet: _refuse_if_shard. With claim, this
        handle then becomes the store's writer (as the write would make it) and checks again,
        in case another process rolled the store into a sharded dataset in between; from then
        on no rollover or commit can list the store (they claim its writer lock first), so the
        check holds until the handle closes. Without a claim it holds for this moment only:
        delete, compact and train_dict, which claim nothing, make it again inside their native
        call (loaderx._store.maintenance_check)."""
        self._refuse_if_shard(operation)
        if claim:
            self._claim_writer()
            self._refuse_if_shard(operation)
            self._writes_checked = True

    def _check_in_maintenance(self, operation: str) -> None:
        """What the native maintenance check runs (loaderx._store.maintenance_check):
        _refuse_if_shard for a handle that is not the store's writer, then the caller's check,
        if any."""
        if not self._writes_checked:
            self._refuse_if_shard(operation)
        check = caller_check(self)
        if check is not None:
            check(operation)

    def maintenance_checked_by(self, check: Callable[[str], None]) -> AbstractContextManager[None]:
        """For loaderx's dataset layer: every delete, compact and train_dict on this handle that
        this thread makes in the block runs check(operation) once it holds the store
        exclusively; what check raises refuses the call (nothing changed) and is raised."""
        return checked_by(self, check)

    def _reset_after_fork(self) -> None:
        super()._reset_after_fork()
        # The writer lock stays with the parent (the native side forgets it here), so the check
        # a claim made no longer holds: the parent may close, and another process roll the
        # store over, before this child's first write.
        self._writes_checked = self._dataset_owned

    def close(self) -> None:
        """Closes the store after calls already in flight return; later calls raise ValueError.
        Every open View over it is closed first: its handle would otherwise point at a freed
        store."""
        self._close_handle(self._release)

    def _release(self, _handle: int) -> None:
        # No call is in flight and none can start (a View being made counts as one).
        for view in list(self._views):
            view.close()
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def native_handle(self) -> int:
        """The lx_store pointer, for a loaderx._store.view.View over this store (which this store's
        close() closes first)."""
        with self._lock:
            if self._closed:
                raise ValueError(f"Zrecord {self._path!r} is closed")
            return self._handle

    def __enter__(self) -> Zrecord:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        # The handle belongs to this process: the copy reopens the same folder by its absolute
        # path (the receiver may run in another directory), with the same options.
        return _reopen, (
            os.path.abspath(self._path), self._codec, self._durable, self._readonly,
            self._verify_reads,
        )

    def __len__(self) -> int:
        mark = object()
        try:
            handle = self._enter(mark)
            return int(_native.lib.lx_store_length(handle))
        finally:
            self._marks.discard(mark)

    # Read-only: the native handle was opened with these, so a changed one would describe a
    # store other than the one this handle reads and writes.
    @property
    def path(self) -> str:
        """The store's folder (absolute)."""
        return self._path

    @property
    def codec(self) -> str:
        """The codec appends use: "raw", "zstd" or "zstd_dict"."""
        return self._codec

    @property
    def durable(self) -> bool:
        """Whether each write is synced to disk before it returns (fsync)."""
        return self._durable

    @property
    def readonly(self) -> bool:
        """Whether the store was opened read-only (every write is refused)."""
        return self._readonly

    @property
    def verify_reads(self) -> bool | None:
        """Which reads check their checksums: None the default, True all, False none."""
        return self._verify_reads

    def __repr__(self) -> str:
        if self._closed:
            return f"Zrecord({self._path!r}, closed)"
        mode = ", readonly" if self._readonly else ""
        return f"Zrecord({self._path!r}, records={len(self)}, codec={self._codec!r}{mode})"

    @property
    def has_dict(self) -> bool:
        """Whether the store has a trained dictionary (dict.zr) loaded."""
        mark = object()
        try:
            handle = self._enter(mark)
            return bool(_native.lib.lx_store_has_dict(handle))
        finally:
            self._marks.discard(mark)

    # --- writing ----------------------------------------------------------------------------

    def _codec_for(self, codec: Codec | None) -> int:
        return self._codec_id if codec is None else codec_id(codec)

    def claim_writer(self) -> None:
        """Makes this handle the store's writer now, as its first append would (an append of
        nothing): StoreLockedError while another handle writes the store. The claim lasts
        until the handle closes; a sharded dataset takes it before it seals the store."""
        self._refuse_if_readonly("append")
        if not self._writes_checked:
            self._check_first_write("append", claim=True)
        else:
            self._claim_writer()

    def _claim_writer(self) -> None:
        offsets = np.zeros(1, dtype=np.uint64)
        mark = object()
        try:
            handle = self._enter(mark)
            append_packed(handle, None, offsets, codec_id("raw"), f"append to {self._path!r}")
        finally:
            self._marks.discard(mark)

    def append(self, records: Records, *, codec: Codec | None = None) -> int:
        """Appends a batch of bytes-like records in one native call; returns the first new index."""
        self._refuse_if_readonly("append")
        tag = self._codec_for(codec)
        data, offsets = pack_records(records)
        count = len(offsets) - 1
        if not self._writes_checked:
            self._check_first_write("append", claim=count > 0)
        mark = object()
        try:
            handle = self._enter(mark)
            if count == 0:
                return int(_native.lib.lx_store_length(handle))
            context = f"append of {count} records to {self._path!r}"
            return append_packed(handle, data, offsets, tag, context)
        finally:
            self._marks.discard(mark)

    def append_fixed(
        self, data: npt.NDArray[Any], record_size: int, *, codec: Codec | None = None
    ) -> int:
        """Appends nbytes // record_size records of exactly record_size bytes from one array."""
        self._refuse_if_readonly("append")
        tag = self._codec_for(codec)
        contiguous, record_size, count = fixed_records(data, record_size)
        if not self._writes_checked:
            self._check_first_write("append", claim=count > 0)
        mark = object()
        try:
            handle = self._enter(mark)
            if count == 0:
                return int(_native.lib.lx_store_length(handle))
            context = f"append of {count} records to {self._path!r}"
            return append_rows(handle, contiguous, record_size, count, tag, context)
        finally:
            self._marks.discard(mark)

    def train_dict(self, samples: Records, dict_size: int) -> None:
        """Trains the store's zstd dictionary (dict.zr) from sample records: at most dict_size."""
        self._refuse_if_readonly("train_dict")
        if isinstance(dict_size, bool) or not isinstance(dict_size, (int, np.integer)):
            raise TypeError(f"dict_size must be an int, not {type(dict_size).__name__}")
        if dict_size <= 0:
            raise ValueError(f"dict_size must be positive, got {dict_size}")
        data, offsets = pack_records(samples)
        count = len(offsets) - 1
        if count == 0:
            raise ValueError("train_dict needs at least one sample record")
        if not self._writes_checked:
            self._check_first_write("train_dict", claim=False)
        mark = object()
        try:
            handle = self._enter(mark)
            code = _native.lib.lx_store_train_dict(
                handle, data, offsets.ctypes.data, count, int(dict_size)
            )
            check_maintenance(code, f"dictionary training for {self._path!r}")
        finally:
            self._marks.discard(mark)

    # --- reading ----------------------------------------------------------------------------

    def _gather_ragged(
        self, handle: int, index: object
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        indices = normalize_index(index, int(_native.lib.lx_store_length(handle)))
        return shared_calls.gather_ragged(
            _native.lib.lx_store_record_lengths, _native.lib.lx_store_gather, handle, indices,
            repr(self._path))

    def record_lengths(self, indices: object) -> npt.NDArray[np.uint64]:
        """The logical (decompressed) size of each selected record."""
        mark = object()
        try:
            handle = self._enter(mark)
            normal = normalize_index(indices, int(_native.lib.lx_store_length(handle)))
            return shared_calls.record_lengths(
                _native.lib.lx_store_record_lengths, handle, normal, repr(self._path))
        finally:
            self._marks.discard(mark)

    def gather_ragged(
        self, indices: object
    ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint64]]:
        """The selected records in one uint8 buffer plus count+1 offsets into it."""
        mark = object()
        try:
            handle = self._enter(mark)
            return self._gather_ragged(handle, indices)
        finally:
            self._marks.discard(mark)

    def gather_packed(
        self, indices: npt.NDArray[np.int64], row_size: int, out: npt.NDArray[Any],
        offsets: npt.NDArray[np.uint64], rows: npt.NDArray[np.int32] | None = None,
    ) -> bool:
        """One native call, under one hold of the lock: offsets and rows as record_offsets
        gives them, then, when out has room, record indices[i] into out's bytes
        [offsets[i], offsets[i + 1]). False, with nothing copied, when out is too small:
        offsets[-1] is then the bytes it needs."""
        return shared_calls.gather_packed(
            self, _native.lib.lx_store_gather_packed, repr(self._path), indices, row_size, out,
            offsets, rows)

    def gather_padded(
        self, indices: npt.NDArray[np.int64], row_size: int, pad_row: npt.NDArray[Any],
        lengths: npt.NDArray[np.uint64], truncate: bool, out: npt.NDArray[Any],
        mask: npt.NDArray[Any], rows: npt.NDArray[np.uint64],
    ) -> bool:
        """One native call, under one hold of the lock (lx_store_gather_padded): rows[i] = the
        rows (of row_size bytes) of record indices[i], rows[-1] = the padded length L (the
        smallest of lengths, uint64 and increasing, that holds the longest record; the longest
        record's rows when lengths is empty; the last length when truncate and none does);
        then, when out and mask (any dtype, taken as bytes) hold count * L rows and count * L
        bytes, record i's first min(n_i, L) rows at the start of out's block i of L rows,
        pad_row's bytes after them, and mask's bytes 1 for a record row and 0 for padding.
        False, with only rows written, when out or mask is too small (rows[-1] is the length
        they must hold) or a record is longer than every length without truncate (rows[-1] is
        its rows, past lengths[-1])."""
        return shared_calls.gather_padded(
            self, _native.lib.lx_store_gather_padded, repr(self._path), indices, row_size,
            pad_row, lengths, truncate, out, mask, rows)

    def record_offsets(
        self, indices: npt.NDArray[np.int64], row_size: int, offsets: npt.NDArray[np.uint64],
        rows: npt.NDArray[np.int32] | None = None,
    ) -> None:
        """One native call: offsets[i] = the bytes of the first i records of indices (offsets[0]
        is 0), and with rows, rows[i] = offsets[i] // row_size (a packed batch's cu_seqlens).
        CorruptStoreError for a record that is not whole rows; nothing written on an error."""
        shared_calls.record_offsets(
            self, _native.lib.lx_store_record_offsets, repr(self._path), indices, row_size, offsets,
            rows)

    def gather_ragged_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], offsets: npt.NDArray[np.uint64]
    ) -> bool:
        """Record indices[i] into out's bytes [offsets[i], offsets[i + 1]), in one native call.

        The offsets come from the caller's own record_lengths; False, with the records that
        still fit written or not, when one of them no longer has its slot's size (a delete or
        compaction in between moved it): the caller sizes again (loaderx._store.ragged_into).
        """
        return shared_calls.gather_ragged_into(
            self, _native.lib.lx_store_gather, repr(self._path), indices, out, offsets)

    def gather(self, index: object) -> list[bytes]:
        """The selected records as bytes (int, slice, integer sequence/array or bool mask)."""
        mark = object()
        try:
            handle = self._enter(mark)
            data, offsets = self._gather_ragged(handle, index)
        finally:
            self._marks.discard(mark)
        view = data.data
        bounds = offsets.tolist()
        return [bytes(view[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)]

    def gather_into(
        self, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
    ) -> None:
        """Dense hot path: record indices[i] fills bytes [i*record_size, (i+1)*record_size) of out.

        indices must be a C-contiguous int64 array already in range (not normalised here; the
        native side refuses anything out of range before copying); out a writable C-contiguous
        array of exactly len(indices) * record_size bytes.
        """
        if type(record_size) is int and self.gather_fixed(indices, out, record_size):
            return
        # Off the fast path: every check again, in order, each with its own message.
        if isinstance(record_size, bool) or not isinstance(record_size, (int, np.integer)):
            raise TypeError(f"record_size must be an int, not {type(record_size).__name__}")
        if type(record_size) is not int:  # a NumPy integer, as append_fixed takes it
            return self.gather_into(indices, out, int(record_size))
        shared_calls.gather_fixed(
            self, _native.lib.lx_store_gather_fixed, repr(self._path), indices, out, record_size)

    # --- maintenance ------------------------------------------------------------------------

    def delete(self, index: object) -> None:
        """Swap-last delete of the selected records (descending order, duplicates ignored)."""
        self._refuse_if_readonly("delete")
        if not self._writes_checked:
            self._check_first_write("delete", claim=False)
        mark = object()
        try:
            handle = self._enter(mark)
            indices = normalize_index(index, int(_native.lib.lx_store_length(handle)))
            if len(indices):
                code = _native.lib.lx_store_delete(handle, indices.ctypes.data, len(indices))
                check_maintenance(code, f"delete of {len(indices)} records from {self._path!r}")
        finally:
            self._marks.discard(mark)

    def compact(self) -> None:
        """Rewrites live records in place to reclaim deleted bytes (takes the store exclusively)."""
        self._refuse_if_readonly("compact")
        if not self._writes_checked:
            self._check_first_write("compact", claim=False)
        mark = object()
        try:
            handle = self._enter(mark)
            check_maintenance(_native.lib.lx_store_compact(handle), f"compaction of {self._path!r}")
        finally:
            self._marks.discard(mark)

    def stats(self) -> dict[str, int]:
        """records, live_bytes, chunk_bytes and reclaimable (chunk_bytes - live_bytes)."""
        out = _native.Stats()
        mark = object()
        try:
            handle = self._enter(mark)
            code = _native.lib.lx_store_stats(handle, ctypes.byref(out))
            _native.check(code, f"stats of {self._path!r}")
        finally:
            self._marks.discard(mark)
        return {key: int(getattr(out, key)) for key in _STATS_KEYS}

    def verify(self) -> VerifyReport:
        """Checks every record, in parallel on the native pool, and reports the bad ones.

        Each record's table entry must lie inside the written chunk space, its stored bytes
        must match its checksum (stores written before checksums have none: see the report's
        has_checksums), and a compressed record must decode to its logical length with a valid
        frame checksum. A store without sums.zr whose files show it was written with checksums
        (loaderx._store.sums_expected) is reported in missing_sums, and the report is not ok.
        Runs beside gathers and appends; never raises for a bad record.
        """
        mark = object()
        try:
            handle = self._enter(mark)
            capacity = min(int(_native.lib.lx_store_length(handle)), VERIFY_LIST_MAX)
            problems = (_native.VerifyProblem * max(capacity, 1))()
            summary = _native.VerifySummary()
            code = _native.read_status(lambda: _native.lib.lx_store_verify(
                handle, ctypes.addressof(problems), capacity, ctypes.byref(summary)
            ))
            _native.check(code, f"verification of {self._path!r}")
        finally:
            self._marks.discard(mark)
        listed = min(int(summary.problem_count), capacity)
        bad = [
            BadRecord(
                int(problems[i].index),
                _native.VERIFY_REASONS.get(int(problems[i].reason), "unknown"),
            )
            for i in range(listed)
        ]
        has_checksums = bool(summary.has_checksums)
        return VerifyReport(
            self._path,
            int(summary.records),
            has_checksums,
            int(summary.checksummed),
            bad,
            int(summary.problem_count),
            [] if has_checksums else missing_sums(self._path),
        )

    def sync(self) -> None:
        """Flushes every chunk file and the table to stable storage."""
        self._refuse_if_readonly("sync")
        mark = object()
        try:
            handle = self._enter(mark)
            _native.check(_native.lib.lx_store_sync(handle), f"sync of {self._path!r}")
        finally:
            self._marks.discard(mark)


def _reopen(
    path: str, codec: Codec, durable: bool, readonly: bool = False, verify: bool | None = None
) -> Zrecord:
    """Unpickles a Zrecord: opens the existing store at path (it is never created here)."""
    return Zrecord(
        path, create=False, codec=codec, durable=durable, readonly=readonly, verify=verify
    )
