"""DenseDataset: fixed-shape samples read as (B, *item_shape) arrays by fixed-stride gathers.

A dense dataset holds one fixed-shape sample per record, so a read's result shape comes from the
schema alone and every read (and every append) is one batch and one native call. Its reads are
the loader's hot path.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from loaderx._data.dataset_base import DatasetBase, check_array
from loaderx._data.dataset_folder import Store
from loaderx._native.calls import NDARRAY, NativeCalls, gather_fixed, mypyc_attr
from loaderx._native.result_buffers import POOL as RESULT_BUFFERS
from loaderx._remote.remote_source import RemoteSource
from loaderx._store.indexing import normalize_selection
from loaderx._store.sharded_store import ShardedStore
from loaderx.errors import StoreFullError

_INT64: Final = np.dtype(np.int64)
# Iterating over a dataset reads about this many bytes of records per gather.
_ITERATION_BLOCK_BYTES: Final = 1 << 20


def _same_dtype(a: np.dtype[Any], b: np.dtype[Any]) -> bool:
    """a == b, without NumPy's comparison for the usual case of one dtype object (a builtin
    dtype such as uint8 is a single object): 0.15 us of a small read's time here."""
    return a is b or a == b


def _gather_fixed(
    store: Store, indices: npt.NDArray[np.int64], out: npt.NDArray[Any], record_size: int
) -> bool:
    """The dense fast path (loaderx._native.calls.gather_fixed) on the store's native handle, or
    on its view for a sharded store; False, with nothing copied, sends the caller to its general
    path. A Zrecord's own method would be looked up by name at every call: it is an interpreted
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
    one comes from recycled memory (see loaderx._native.result_buffers), a small one from
    np.empty."""
    if nbytes < RESULT_BUFFERS.min_bytes:
        return np.empty(shape, dtype=dtype)
    return RESULT_BUFFERS.empty(shape, dtype, nbytes)


# Subclassed by users (dataset_base.py says why this is allowed).
@mypyc_attr(allow_interpreted_subclasses=True)
class DenseDataset(DatasetBase):
    """A dataset of fixed-shape samples: every record is one item_shape array of dtype.

    DenseDataset(path) opens an existing dataset; DenseDataset(path, dtype=..., item_shape=...,
    codec="zstd", dict_size="balanced") creates one (writing its schema at once) or reopens one
    whose schema is the same. DenseDataset(path, readonly=True) opens one for reading only
    (see Zrecord). Reads return (B, *item_shape) arrays, or one sample for an int. verify=
    chooses which records reads check against their checksum (see Zrecord).
    """

    _record_size: int

    def _kind(self) -> str:
        return "dense"

    def _take_record_layout(self) -> None:
        self._record_size = self._schema.row_size

    @property
    def record_size(self) -> int:
        """The bytes of one record (its item shape times its dtype's size)."""
        return self._record_size

    def __getitem__(self, index: object) -> Any:
        """ds[index] as NumPy would index an array: read(index), except that an int index into
        a dataset of scalars (item_shape ()) gives a NumPy scalar rather than a 0-d array."""
        # A local dataset's fast path costs what it did before remote datasets: one more
        # attribute test. A remote one goes through read(), which fetches first.
        if type(index) is NDARRAY and self._remote is None:
            fast = self._read_plain(index, None)
            if fast is not None:
                return fast
        result = self.read(index)
        if result.ndim == 0:
            return result[()]
        return result

    def __array__(self, dtype: DTypeLike | None = None,
                  copy: bool | None = None) -> npt.NDArray[Any]:
        """np.asarray(ds) and np.array(ds): every record, in one (len, *item_shape) array.
        Without it the compiled class gave NumPy an object it wrapped in a 0-d array."""
        if copy is False:
            raise ValueError(
                "np.asarray(ds, copy=False): a dataset's records are read from its files, so "
                "the array is always a new one; leave copy= out"
            )
        records = self.read(slice(None))
        return records if dtype is None else records.astype(dtype, copy=False)

    def _records_per_block(self) -> int:
        return max(1, _ITERATION_BLOCK_BYTES // max(1, self._record_size))

    def read(self, index: object, out: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
        """The selected samples, gathered in one native call (into out when given).

        An int returns one sample of shape item_shape; a slice, an integer sequence or array or
        a bool mask returns a (B, *item_shape) batch in index order. out must then have exactly
        that shape and the dataset's dtype, and be C-contiguous and writable.
        """
        remote = self._remote
        if remote is not None:
            return self._read_remote(remote, index, out)
        return self._read_local(index, out)

    def _read_remote(
        self, remote: RemoteSource, index: object, out: npt.NDArray[Any] | None
    ) -> npt.NDArray[Any]:
        """read() of a dataset opened from a URL: without a lock while nothing is evicted
        (RemoteSource.begin), else holding the cache while the records are fetched and read."""
        if type(index) is NDARRAY and index.dtype is _INT64 and index.ndim == 1:
            probe: npt.NDArray[np.int64] = index
        else:
            probe, _ = normalize_selection(index, len(self._store))
        token = remote.begin(probe)
        if token >= 0:
            result = self._read_local(index, out)
            if remote.unchanged(token):
                return result
        if probe is index:
            probe, _ = normalize_selection(index, len(self._store))
        with remote.reading(probe):
            return self._read_local(index, out)

    def _read_local(self, index: object, out: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
        if type(index) is NDARRAY:
            fast = self._read_plain(index, out)
            if fast is not None:
                return fast
        indices, selection = normalize_selection(index, len(self._store))
        shape = (*selection, *self._item_shape)
        if out is None:
            result = _new_result(shape, self._dtype, len(indices) * self._record_size)
        else:
            result = check_array(out, "out", self._dtype)
            if result.shape != shape:
                raise ValueError(f"out has shape {result.shape}, the selection needs {shape}")
            if not result.flags.c_contiguous or not result.flags.writeable:
                raise ValueError("out must be a writable C-contiguous array")
        if len(indices):
            self._store.gather_into(indices, result, self._record_size)
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
        shape = (count,) + self._item_shape
        if out is None:
            result = _new_result(shape, self._dtype, count * self._record_size)
        elif type(out) is NDARRAY and _same_dtype(out.dtype, self._dtype) and out.shape == shape:
            result = out
        else:
            return None
        if _gather_fixed(store, index, result, self._record_size):
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
        # A remote dataset fetches first (_gather_into_remote).
        if type(out) is NDARRAY and type(indices) is NDARRAY and _same_dtype(out.dtype, self._dtype):
            remote = self._remote
            if remote is not None:
                self._gather_into_remote(remote, indices, out)
                return
            if _gather_fixed(self._store, indices, out, self._record_size):
                return
        else:
            self._check_into(indices, out)
        if indices.dtype != _INT64:
            raise TypeError(f"indices must be int64, not {indices.dtype}")
        self._store.gather_into(indices, out, self._record_size)

    def _gather_into_remote(
        self, remote: RemoteSource, indices: npt.NDArray[np.int64], out: npt.NDArray[Any]
    ) -> None:
        if indices.dtype != _INT64:
            raise TypeError(f"indices must be int64, not {indices.dtype}")
        token = remote.begin(indices)
        if token >= 0:
            if not _gather_fixed(self._store, indices, out, self._record_size):
                self._store.gather_into(indices, out, self._record_size)
            if remote.unchanged(token):
                return
        with remote.reading(indices):
            if not _gather_fixed(self._store, indices, out, self._record_size):
                self._store.gather_into(indices, out, self._record_size)

    def _check_into(self, indices: object, out: object) -> None:
        """gather_into's TypeErrors, for arguments that are not both arrays of the right dtype."""
        # isinstance first: anything else (a bytearray, a list) has no .dtype to compare.
        if not isinstance(out, NDARRAY):
            raise TypeError(
                f"out must be a numpy array of dtype {self._dtype}, not {type(out).__name__}"
            )
        if not isinstance(indices, NDARRAY):
            raise TypeError(
                f"indices must be an int64 numpy array, not {type(indices).__name__} "
                "(pass np.asarray(indices, dtype=np.int64); read(indices, out=out) takes any "
                "index form)"
            )
        if not _same_dtype(out.dtype, self._dtype):
            raise TypeError(f"out has dtype {out.dtype}, the dataset holds {self._dtype}")

    def _batch(self, batch: object, what: str) -> npt.NDArray[Any]:
        """batch validated as (B, *item_shape) of the dataset's dtype, made C-contiguous."""
        array = check_array(batch, what, self._dtype)
        if array.ndim != len(self._item_shape) + 1 or array.shape[1:] != self._item_shape:
            hint = ""
            if array.shape == self._item_shape:
                hint = " (one sample is a batch of one: pass sample[None])"
            raise ValueError(
                f"{what} has shape {array.shape}; this dataset takes batches of shape "
                f"(B, *{self._item_shape}){hint}"
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
            return store.append_fixed(data, self._record_size)
        except StoreFullError:
            if isinstance(store, ShardedStore) or len(store) == 0:
                raise
        # The single store ran out of chunk space before its record limit: roll over.
        return self._become_sharded().append_fixed(data, self._record_size)

    def train_dict(
        self, samples: npt.NDArray[Any], dict_size: str | SupportsIndex | None = None
    ) -> None:
        """Trains the zstd_dict dictionary on a (N, *item_shape) array of samples.

        dict_size defaults to the schema's; a tier name or a byte count overrides it.
        """
        data = self._batch(samples, "samples")
        flat = data.reshape(-1).view(np.uint8)
        size = self._record_size
        records = [flat[i * size : (i + 1) * size] for i in range(data.shape[0])]
        self._train(records, dict_size)


__all__ = ["DenseDataset"]
