"""PyTorch adapters: a map-style Dataset with one gather per batch, and tensors from a DataLoader.

torch stays optional: it is imported here only, and `import loaderx.dataset` never needs it.

- ``TorchDataset(streams)`` is a ``torch.utils.data.Dataset`` over dense datasets. It implements
  ``__getitems__``, so torch's own DataLoader, when it has a batch sampler, asks for a whole
  batch at once and the adapter answers with one native gather per stream. By default it
  returns that batch as a list of samples (views of its rows), as torch's convention for
  ``__getitems__`` is, and torch's default collate stacks them into the batch (one copy). With
  ``collated=True`` it returns the gathered batch itself, with no copy after the gather: give
  torch's DataLoader ``collate_fn=loaderx.torch.collate`` (or build it with
  ``TorchDataset.loader(...)``, which does); torch's default collate_fn then meets a TypeError
  that says so. A dict of streams gives dicts of tensors; a single DenseDataset gives bare
  tensors. Indices may be ints, lists of them, or integer tensors (a batch sampler such as
  ``torch.randperm(n).split(b)``, or a BatchSampler over a tensor, which yields lists of 0-d
  tensors). It pickles by path (the datasets reopen in the worker), so spawn and forkserver
  workers work. In a worker process, what goes to the main process as it is (a collated batch,
  a sample of ``batch_size=None``) is made in shared memory, as torch's default collate makes
  its own batches, so it goes as a handle: otherwise the queue's feeder thread copied it into
  shared memory, and a spawn worker that exited while its feeder was inside that copy aborted
  ("terminate called without an active exception": CPython 3.11 ends a daemon thread that
  wants the GIL back during finalization with pthread_exit, which aborts in torch's C++ frames).
- ``TorchLoader(loader)`` wraps a ``loaderx._loading.dataloader.DataLoader`` and yields dicts of tensors
  made with ``torch.from_numpy``: no copy, the tensors share the loader's arrays (and keep them
  alive, so the loader never writes into an array a tensor still uses). A loader made with
  ``reuse_buffers=True`` writes later steps into its arrays whatever still uses them, so its
  batches are copied once (as loaderx.jax does), and tensors already yielded keep their values.
  With ``pin_memory=True`` every batch is copied once into page-locked buffers that are reused
  across steps, ready for ``.to(device, non_blocking=True)``; a batch is then valid until
  ``ring`` more batches have been taken (over reuse_buffers too: that copy is the only one).
  With ``device=`` as well, each batch is copied into fresh page-locked buffers from torch's
  caching host allocator instead, which keeps a block until the asynchronous copy to the device
  that reads it is done: a reused buffer could be rewritten while that copy is still queued.
- Datasets stored with a non-native byte order (say dtype ``'>f4'`` on a little-endian host),
  which torch refuses, become tensors of the native dtype with the same values: each such
  batch is byte-swapped in one copy (so those tensors do not share the loader's arrays). Other
  datasets are untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt
import torch
import torch.utils.data

from loaderx._loading.dataloader import DataLoader
from loaderx._data.dense import DenseDataset
from loaderx._store.flags import Flag, check_flag
from loaderx._store.indexing import is_scalar_index, normalize_index

__all__ = ["CollatedBatch", "TorchDataset", "TorchLoader", "collate"]

TensorBatch = dict[str, torch.Tensor]
# One sample (or a collated batch): a dict of tensors over a dict of streams, a tensor over one.
Sample = TensorBatch | torch.Tensor
S = TypeVar("S", bound=Sample)
# What torch's samplers hand a map-style dataset: ints or integer tensors (numpy's too).
SampleIndex = int | np.integer[Any] | torch.Tensor
BatchIndices = Sequence[int] | Sequence[torch.Tensor] | torch.Tensor | npt.NDArray[np.integer[Any]]
RING_DEFAULT: Final = 2
# The name a single DenseDataset goes by inside TorchDataset (its samples are bare tensors).
SINGLE: Final = "data"


def collate(batch: Any) -> Any:
    """The collate_fn for a TorchDataset made with collated=True: its batches arrive collated
    (a dict of tensors, or a tensor over a single DenseDataset), so this returns them as is.

    (Typed Any because torch declares collate_fn as taking a list of samples.)
    """
    if isinstance(batch, list):
        raise TypeError(
            "collate passes on batches that are already collated, and got a list of samples: "
            "make the TorchDataset with collated=True (the zero-copy path), or leave torch's "
            "default collate_fn in place"
        )
    if not isinstance(batch, (Mapping, torch.Tensor)):
        raise TypeError(
            f"collate passes on the batches TorchDataset makes (a dict of tensors, or a tensor), "
            f"not {type(batch).__name__}; use it as the collate_fn of a torch DataLoader over a "
            "TorchDataset made with collated=True"
        )
    return batch


class CollatedBatch(dict[str, torch.Tensor]):
    """A batch from TorchDataset(..., collated=True).__getitems__: stream name -> (B, *item_shape)
    tensor.

    torch's default collate_fn takes a list of samples and starts with ``batch[0]``; on a plain
    dict that is a bare KeyError(0). An integer key here says what to do instead.
    """

    def __missing__(self, key: object) -> torch.Tensor:
        if isinstance(key, int):
            raise TypeError(
                f"a batch of a TorchDataset made with collated=True is already collated (a dict "
                f"of stream name -> tensor, streams {sorted(self)}), not a list of samples to "
                f"index with [{key}]: give torch's DataLoader collate_fn=loaderx.torch.collate, "
                "or build it with TorchDataset.loader(...), or drop collated=True to use "
                "torch's default collate"
            )
        raise KeyError(key)


def _batch_index(indices: object) -> object:
    """A batch of indices as normalize_index takes it. torch's DataLoader passes on what its
    batch sampler yields: a list of ints (BatchSampler), a 1-d tensor
    (``torch.randperm(n).split(b)``), or a list of 0-d tensors (a BatchSampler over a tensor)."""
    if is_scalar_index(indices):
        raise TypeError(
            f"__getitems__ takes a batch of indices, not the single index {indices!r}; "
            "use ds[i] for one sample"
        )
    if isinstance(indices, (list, tuple)) and _same_scalar_tensors(indices):
        return torch.stack(list(indices))
    if isinstance(indices, (list, tuple, range, np.ndarray, torch.Tensor)):
        return indices
    if isinstance(indices, Iterable):
        return list(indices)  # another sampler's batch type, say a deque
    return indices  # normalize_index says what is wrong with it


def _same_scalar_tensors(items: list[Any] | tuple[Any, ...]) -> bool:
    """True when items are 0-d tensors of one dtype, which stack into the 1-d index they mean.
    (torch.stack would promote a mix of bools and ints, which normalize_index refuses.)"""
    if not items or not all(isinstance(item, torch.Tensor) and item.ndim == 0 for item in items):
        return False
    return len({item.dtype for item in items}) == 1


def _torch_holds(dtype: np.dtype[Any]) -> bool:
    """True for the dtypes torch.from_numpy takes (in either byte order): bool, integers,
    float16/32/64 and complex64/128; not strings, objects, records, long double or
    ml_dtypes' bfloat16 (a 'V' kind)."""
    if dtype.kind in "biu":
        return True
    if dtype.kind == "f":
        return dtype.itemsize in (2, 4, 8)
    return dtype.kind == "c" and dtype.itemsize in (8, 16)


def _held(value: Any, where: str) -> npt.NDArray[Any]:
    """value as the array its tensor is made of. torch.from_numpy's own TypeError for a dtype
    it lacks names the NumPy type alone; this one says where the value sits (`where`, e.g.
    "the batch's 'tag'") and what it is. (An ndarray comes back as itself.)"""
    array = np.asarray(value)
    if not _torch_holds(array.dtype):
        raise TypeError(
            f"{where} is of dtype {array.dtype} ({type(value).__name__}); torch tensors hold "
            "bool, integer, float16/32/64 and complex64/128 arrays"
        )
    return array


def _native(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """array itself in native byte order, else a copy converted to it (same values)."""
    if array.dtype.isnative:
        return array
    return array.astype(array.dtype.newbyteorder("="))


def _tensor(value: Any, copy: bool = False) -> torch.Tensor:
    """torch.from_numpy, which shares memory but refuses non-native byte order and negative
    strides (a transform's np.flip); such arrays are converted first (one copy), and so are
    read-only ones (a transform's np.broadcast_to), which torch would share writable. With
    copy the tensor never shares value's memory."""
    array = np.asarray(value)
    native = _native(array)
    if native is array and (copy or not _shareable(array)):
        native = array.copy()
    return torch.from_numpy(native)


def _shareable(array: npt.NDArray[Any]) -> bool:
    """True when torch.from_numpy may share array: writable, with no negative stride."""
    return array.flags.writeable and all(stride >= 0 for stride in array.strides)


def _in_worker() -> bool:
    """True in a worker process of torch's DataLoader."""
    return torch.utils.data.get_worker_info() is not None


def _shared_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory (what torch's default collate makes in a worker)."""
    size = math.prod(shape) * dtype.itemsize
    if size == 0:
        return torch.empty(shape, dtype=dtype)  # nothing to share (torch sends empty ones as such)
    new_shared = torch.UntypedStorage._new_shared
    storage: torch.UntypedStorage = new_shared(size)  # type: ignore[no-untyped-call]
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def _shared_tensor(value: Any) -> torch.Tensor:
    """_tensor(value, copy=True), made in shared memory."""
    native = _native(np.asarray(value))
    tensor = _shared_empty(native.shape, _torch_dtype(native.dtype))
    np.copyto(tensor.numpy(), native)
    return tensor


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    """The dtype of a tensor made by _tensor from an array of this dtype."""
    return torch.from_numpy(np.empty(0, dtype.newbyteorder("="))).dtype


def _streams(streams: Mapping[str, DenseDataset] | DenseDataset) -> dict[str, DenseDataset]:
    if isinstance(streams, DenseDataset):
        return {SINGLE: streams}
    if not isinstance(streams, Mapping) or not streams:
        raise TypeError("streams must be a DenseDataset or a non-empty dict of name -> DenseDataset")
    lengths = set()
    for name, dataset in streams.items():
        if not isinstance(name, str):
            raise TypeError(
                f"stream names must be strings (they key the batch dict), not "
                f"{type(name).__name__} {name!r}"
            )
        if not isinstance(dataset, DenseDataset):
            raise TypeError(f"stream {name!r} must be a DenseDataset, not {type(dataset).__name__}")
        lengths.add(len(dataset))
    if len(lengths) != 1:
        raise ValueError(f"all streams must have the same length, got {sorted(lengths)}")
    return dict(streams)


def _samples(tensors: TensorBatch, count: int, single: bool) -> list[Sample]:
    """The batch split into its `count` samples, each a view of the batch's rows (what
    ``[ds[i] for i in indices]`` would give, as torch's default collate expects)."""
    rows: dict[str, tuple[torch.Tensor, ...]] = {}
    for name, tensor in tensors.items():
        if tensor.ndim == 0 or tensor.shape[0] != count:
            raise ValueError(
                f"the transform returned {_stream_label(name, single)} of shape "
                f"{tuple(tensor.shape)} for a batch of {count}: to be split into samples, "
                f"every value needs {count} rows (or use collated=True)"
            )
        rows[name] = tensor.unbind(0)
    if single:
        return list(rows[SINGLE])
    return [{name: parts[k] for name, parts in rows.items()} for k in range(count)]


def _stream_label(name: str, single: bool) -> str:
    return "an array" if single else f"stream {name!r}"


class TorchDataset(torch.utils.data.Dataset[S]):
    """A map-style torch Dataset over dense loaderx datasets (one gather per batch and stream).

    A dict of streams gives dicts of tensors (stream name -> tensor); a single DenseDataset
    gives bare tensors. ``ds[i]`` is one sample. ``ds.__getitems__(indices)``, which torch's
    DataLoader calls with a batch sampler, gathers the whole batch once per stream and returns
    it as a list of samples (views of the batch's rows), as torch's default collate expects.
    With ``collated=True`` it returns the batch itself instead, one (B, *item_shape) tensor per
    stream, with no copy after the gather: use it with ``collate_fn=loaderx.torch.collate``
    (``ds.loader(...)`` sets it), the fast path. ``transform`` runs on each batch (or sample)
    of NumPy arrays before it becomes tensors, like DataLoader's transform: a dict of arrays
    in and out over a dict of streams, an array in and out over a single DenseDataset.
    """

    streams: dict[str, DenseDataset]
    single: bool
    collated: bool

    @overload
    def __init__(
        self: TorchDataset[torch.Tensor],
        streams: DenseDataset,
        transform: Callable[[Any], Any] | None = None,
        collated: Flag = False,
    ) -> None: ...

    @overload
    def __init__(
        self: TorchDataset[TensorBatch],
        streams: Mapping[str, DenseDataset],
        transform: Callable[[Any], Any] | None = None,
        collated: Flag = False,
    ) -> None: ...

    def __init__(
        self,
        streams: Mapping[str, DenseDataset] | DenseDataset,
        transform: Callable[[Any], Any] | None = None,
        collated: Flag = False,
    ) -> None:
        collated = check_flag("collated", collated)
        self.single = isinstance(streams, DenseDataset)
        self.streams = _streams(streams)
        self.transform = transform
        self.collated = collated
        self._length = len(next(iter(self.streams.values())))

    def __len__(self) -> int:
        return self._length

    def _gathered(
        self, indices: npt.NDArray[np.int64], scalar: bool, shared: bool
    ) -> TensorBatch:
        """Each stream's rows at indices as tensors (stream name -> tensor), transformed.
        With shared (in a worker process), gathered straight into shared memory (see the
        module docstring); a stream in non-native byte order, or an array the transform made,
        is copied into it once."""
        arrays: dict[str, Any] = {}
        gathered: dict[str, tuple[npt.NDArray[Any], torch.Tensor]] = {}
        for name, dataset in self.streams.items():
            shape = dataset.item_shape if scalar else (len(indices), *dataset.item_shape)
            if shared and dataset.dtype.isnative:
                tensor = _shared_empty(shape, _torch_dtype(dataset.dtype))
                out = tensor.numpy()
                gathered[name] = (out, tensor)
            else:
                out = np.empty(shape, dtype=dataset.dtype)
            if len(indices):
                dataset.gather_into(indices, out)
            arrays[name] = out
        if self.transform is not None:
            arrays = {name: _held(value, f"the transform's {self._label(name)}")
                      for name, value in self._transformed(arrays).items()}
        return {
            name: self._stream_tensor(name, value, gathered, shared)
            for name, value in arrays.items()
        }

    def _transformed(self, arrays: dict[str, Any]) -> dict[str, Any]:
        """transform applied to the arrays as the user sees them: the array itself for a
        single DenseDataset, else the dict."""
        assert self.transform is not None
        if self.single:
            return {SINGLE: self.transform(arrays[SINGLE])}
        result = self.transform(arrays)
        if not isinstance(result, Mapping):
            raise TypeError(
                f"the transform of a TorchDataset over a dict of streams must return a dict of "
                f"arrays, not {type(result).__name__}"
            )
        return dict(result)

    def _label(self, name: str) -> str:
        return "array" if self.single else f"stream {name!r}"

    def _shaped(self, tensors: TensorBatch) -> S:
        """What the caller gets for these tensors: the tensor of a single DenseDataset, else
        the dict."""
        return cast(S, tensors[SINGLE] if self.single else tensors)

    @staticmethod
    def _stream_tensor(
        name: str,
        value: Any,
        gathered: Mapping[str, tuple[npt.NDArray[Any], torch.Tensor]],
        shared: bool,
    ) -> torch.Tensor:
        """The tensor of one stream's array: the shared tensor it was gathered into when the
        transform passed that array on as it was, else _tensor (or its shared copy)."""
        if name in gathered and value is gathered[name][0]:
            return gathered[name][1]
        return _shared_tensor(value) if shared else _tensor(value)

    def __getitem__(self, index: SampleIndex) -> S:
        """One sample; index is an int, a NumPy integer or a 0-d integer tensor. In a worker
        process its tensors are made in shared memory (a DataLoader with batch_size=None sends
        samples to the main process as they are)."""
        if not is_scalar_index(index):
            raise TypeError(
                f"TorchDataset[i] takes one int index (or a 0-d integer tensor), not "
                f"{type(index).__name__}; __getitems__ takes a batch"
            )
        indices = normalize_index(index, self._length)
        return self._shaped(self._gathered(indices, scalar=True, shared=_in_worker()))

    def __getitems__(self, indices: BatchIndices) -> list[S] | S:
        """The samples at these indices (a sequence or an integer tensor), gathered in one
        native call per stream: a list of samples, or with collated=True the batch itself."""
        positions = normalize_index(_batch_index(indices), self._length)
        if not self.collated:
            # torch's default collate copies the samples into its batch (in shared memory in a
            # worker), so the gather itself needs no shared memory.
            tensors = self._gathered(positions, scalar=False, shared=False)
            return cast(list[S], _samples(tensors, len(positions), self.single))
        tensors = self._gathered(positions, scalar=False, shared=_in_worker())
        return self._shaped(tensors if self.single else CollatedBatch(tensors))

    def loader(self, batch_size: int, **options: Any) -> torch.utils.data.DataLoader[S]:
        """torch's DataLoader over this dataset with the collate_fn its batches need:
        loaderx.torch.collate with collated=True, torch's default collate otherwise (or the
        collate_fn you pass).

        Any other torch DataLoader option (shuffle, num_workers, multiprocessing_context,
        drop_last, generator, ...) passes through.
        """
        if self.collated:
            if "collate_fn" in options:
                raise TypeError(
                    "TorchDataset.loader sets collate_fn itself when collated=True (batches "
                    "come collated); for your own collate_fn make the TorchDataset without "
                    "collated=True"
                )
            options["collate_fn"] = collate
        return torch.utils.data.DataLoader(self, batch_size=batch_size, **options)

    def __repr__(self) -> str:
        names = ", ".join(self.streams)
        return (f"TorchDataset(streams=[{names}], length={self._length}, "
                f"collated={self.collated})")


class _PinnedRing:
    """Page-locked buffers per stream, reused in rotation: batch k is copied into slot k % size.

    With `fresh`, every batch gets new buffers instead. That is the ring of a loader that moves
    each batch to a device with non_blocking=True: the copy runs when the device's stream
    reaches it, which may be after `size` more batches were staged, so a reused buffer could
    be overwritten before it was read. torch's caching host allocator, which fresh buffers come
    from, reuses a block only once the copies recorded on it are done (what torch's own
    pin_memory relies on)."""

    def __init__(self, size: int, pin: bool, fresh: bool = False) -> None:
        self._size = size
        self._pin = pin
        self._fresh = fresh
        self._slots: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
        self._next = 0

    def stage(self, batch: Mapping[str, Any]) -> TensorBatch:
        slot = {} if self._fresh else self._slots[self._next]
        self._next = (self._next + 1) % self._size
        staged: TensorBatch = {}
        for name, value in batch.items():
            array = np.asarray(value)
            dtype = _torch_dtype(array.dtype)
            buffer = slot.get(name)
            if buffer is None or buffer.shape != array.shape or buffer.dtype != dtype:
                buffer = torch.empty(array.shape, dtype=dtype, pin_memory=self._pin)
                slot[name] = buffer
            if array.dtype.isnative and _shareable(array):
                buffer.copy_(torch.from_numpy(array))
            else:  # swapped or flipped on its way into the buffer: still one copy
                np.copyto(buffer.numpy(), array)
            staged[name] = buffer
        return staged


class TorchLoader:
    """Iterates a loaderx DataLoader as dicts of torch tensors; see the module docstring.

    Without pin_memory the tensors share the loader's arrays (torch.from_numpy, no copy). With
    pin_memory=True each batch is copied into page-locked memory reused across ``ring`` steps;
    this needs an accelerator backend (CUDA, ROCm, XPU...), and asking for it without one
    raises RuntimeError at construction. ``device`` (e.g. "cuda") moves each batch there with
    non_blocking=True. state_dict, load_state_dict, steps_per_epoch and close go to the loader;
    len() is refused as the endless loader refuses it.
    ``copy`` is true when the loader has reuse_buffers set and pin_memory is off: each array is
    then copied (once), since the loader writes later steps into the arrays it handed out.
    A stream stored in non-native byte order comes out in native order (one copy per batch).
    """

    def __init__(
        self,
        loader: DataLoader,
        pin_memory: Flag = False,
        device: str | torch.device | None = None,
        ring: int = RING_DEFAULT,
    ) -> None:
        if not isinstance(loader, DataLoader):
            raise TypeError(f"loader must be a loaderx DataLoader, not {type(loader).__name__}")
        pin_memory = check_flag("pin_memory", pin_memory)
        if isinstance(ring, bool) or not isinstance(ring, int) or ring < 1:
            raise ValueError(f"ring must be an int >= 1, got {ring!r}")
        if pin_memory:
            try:
                torch.empty(1, pin_memory=True)
            except RuntimeError as error:
                raise RuntimeError(
                    "pin_memory=True needs an accelerator backend (CUDA, ROCm, XPU, MPS...); "
                    f"this torch {torch.__version__} has none: leave pin_memory off on CPU "
                    f"({error})"
                ) from None
        self.loader = loader
        self.pin_memory = pin_memory
        self.device = None if device is None else torch.device(device)
        # Moved to a device, a batch's buffers are fresh (_PinnedRing): its copy may still be
        # queued when the ring would come round to them again.
        self._ring = (
            _PinnedRing(ring, pin_memory, fresh=self.device is not None) if pin_memory else None
        )
        # The staging ring already copies each batch before the loader is asked for the next.
        self.copy: bool = loader.reuse_buffers and not pin_memory

    def __iter__(self) -> Iterator[TensorBatch]:
        return self

    def __len__(self) -> int:
        """Refused as the loader refuses it (endless), with its pointer to steps_per_epoch:
        torch users reach for len(loader) to size an epoch or a scheduler."""
        return len(self.loader)

    def __bool__(self) -> bool:
        """True, as the loader is: `if loader:` would otherwise meet len()'s refusal."""
        return True

    def __next__(self) -> TensorBatch:
        batch = {name: _held(value, f"the batch's {name!r}")
                 for name, value in next(self.loader).items()}
        if self._ring is not None:
            tensors = self._ring.stage(batch)
        else:
            tensors = {name: _tensor(v, self.copy) for name, v in batch.items()}
        if self.device is not None:
            tensors = {n: t.to(self.device, non_blocking=True) for n, t in tensors.items()}
        return tensors

    @property
    def step(self) -> int:
        return self.loader.step

    @property
    def steps_per_epoch(self) -> int:
        return self.loader.steps_per_epoch

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.loader.load_state_dict(state)

    def close(self) -> None:
        self.loader.close()

    def __enter__(self) -> TorchLoader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

