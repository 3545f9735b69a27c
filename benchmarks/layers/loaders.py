"""The loader contenders: endless iterators of batches over the same records.

Each factory returns a zero-argument callable handing over the next batch, built the way that
loader's users build it: loaderx's DataLoader over DenseDatasets; torch's DataLoader over a
map-style Dataset reading a NumPy memmap, per sample (default collate) or per batch (a
BatchSampler feeding whole index lists to __getitem__); torch's DataLoader over loaderx's own
adapter (loaderx.torch.TorchDataset, whose __getitems__ gathers a batch at once); grain's DataLoader over a random
access source. `augment` is the Python-bound per-sample transform used by --transform augment,
`release` the GIL-releasing one of --transform release; a contender that transforms one sample
at a time runs the per-sample form of the same transform (`per_sample`).
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

Next = Callable[[], object]
Transform = Callable[[np.ndarray], np.ndarray] | None


def augment_sample(sample: np.ndarray) -> np.ndarray:
    """Mirrors every other row of one sample, one row per Python iteration (GIL-bound)."""
    rows = sample.reshape(sample.shape[0], -1) if sample.ndim > 1 else sample.reshape(1, -1)
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        out[r] = rows[r, ::-1] if r & 1 else rows[r]
    return out.reshape(sample.shape)


def augment(batch: np.ndarray) -> np.ndarray:
    return np.stack([augment_sample(sample) for sample in batch])


def release(batch: np.ndarray) -> np.ndarray:
    """The GIL-releasing kind: a few whole-batch NumPy calls (ufunc loops over a float32 copy,
    which NumPy runs with the GIL released), about as costly per sample as `augment`."""
    values = batch.astype(np.float32)
    for _ in range(RELEASE_ROUNDS):
        np.sqrt(values, out=values)
        np.multiply(values, 15.9, out=values)
    return values.astype(batch.dtype)


# Rounds of `release`: chosen so that a 12 KiB sample costs about what `augment` costs.
RELEASE_ROUNDS = 6


def per_sample(transform: Transform) -> Transform:
    """The per-sample form of a batch transform, for contenders that transform one sample at a
    time: `augment_sample` for `augment`; `release` works element by element, so it is its own."""
    return augment_sample if transform is augment else transform


# --- loaderx ---------------------------------------------------------------------------------


class StreamTransform:
    """A per-array transform applied to every stream of a batch dict; a class at module level,
    not a closure, so that worker processes (worker_type="process") can unpickle it."""

    def __init__(self, transform: Callable[[np.ndarray], np.ndarray]) -> None:
        self.transform = transform

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: self.transform(values) for name, values in batch.items()}


def loaderx_loop(path: Path, batch: int, transform: Transform, reuse: bool = False,
                 labels: Path | None = None, workers: int | None = None,
                 processes: bool = False) -> tuple[Next, Callable[[], None]]:
    """The DataLoader over the records ("x") and, with `labels`, a second stream ("y");
    `workers` None is the loader's default; `processes` runs them as worker processes."""
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    dataset = DenseDataset(str(path))
    streams = {"x": dataset}
    if labels is not None:
        streams["y"] = DenseDataset(str(labels))
    stream_transform = None if transform is None else StreamTransform(transform)
    extra: dict[str, Any] = {"reuse_buffers": True} if reuse else {}
    if processes:
        extra["worker_type"] = "process"
    if workers is not None:
        extra["workers"] = workers
    loader = DataLoader(streams, batch_size=batch, transform=stream_transform,
                        mode="cyclic", seed=0, **extra)
    iterator = iter(loader)

    def close() -> None:
        loader.close()
        for stream in streams.values():
            stream.close()

    return (lambda: next(iterator)), close


def bare_gather(path: Path, batch: int, buffers: int = 1) -> tuple[Next, Callable[[], None]]:
    """Sampler plus one gather into a reused array, on this thread: what the loop wraps. With
    `buffers` > 1, step s goes to array s % buffers (the loader's ring, without its threads)."""
    from loaderx.dataset import DenseDataset
    from loaderx.sampler import Sampler

    dataset = DenseDataset(str(path))
    sampler = Sampler(len(dataset), batch, mode="cyclic", seed=0)
    indices = np.empty(batch, dtype=np.int64)
    outs = [np.empty((batch, *dataset.item_shape), dtype=dataset.dtype) for _ in range(buffers)]
    steps = itertools.count()

    def step() -> object:
        s = next(steps)
        out = outs[s % buffers]
        sampler.fill(s, indices)
        dataset.gather_into(indices, out)
        return out

    return step, dataset.close


# --- torch -----------------------------------------------------------------------------------


class MemmapSamples:
    """torch map-style Dataset: one sample per __getitem__, from a NumPy memmap."""

    def __init__(self, npy: Path, transform: Transform) -> None:
        self.npy = npy
        self.array = np.load(npy, mmap_mode="r")
        self.transform = per_sample(transform)
        self.batch_transform = transform

    def __len__(self) -> int:
        return int(self.array.shape[0])

    def __getitem__(self, index: int) -> Any:
        import torch

        sample = np.array(self.array[index])  # a writable copy, as torch wants
        if self.transform is not None:
            sample = self.transform(sample)
        return torch.from_numpy(sample)


class MemmapBatches(MemmapSamples):
    """torch map-style Dataset whose __getitem__ takes a whole list of indices."""

    def __getitem__(self, indices: Any) -> Any:
        import torch

        rows = self.array[np.asarray(indices, dtype=np.int64)]
        if self.batch_transform is not None:
            rows = self.batch_transform(rows)
        return torch.from_numpy(rows)


def endless(make: Callable[[], Iterator[object]]) -> Next:
    """Restarts the iterator at each epoch's end, as a training loop over epochs does."""
    state = {"it": make()}

    def step() -> object:
        try:
            return next(state["it"])
        except StopIteration:
            state["it"] = make()
            return next(state["it"])

    return step


def torch_loop(npy: Path, batch: int, workers: int, whole_batch: bool,
               transform: Transform) -> tuple[Next, Callable[[], None]]:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    # torch warns when workers outnumber cores; 4 workers on 2 cores is asked for on purpose.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    generator = torch.Generator().manual_seed(0)
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": 2}
    if whole_batch:
        dataset: Any = MemmapBatches(npy, transform)
        sampler = BatchSampler(RandomSampler(dataset, generator=generator), batch,
                               drop_last=True)
        loader = DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=workers,
                            **extra)
    else:
        dataset = MemmapSamples(npy, transform)
        loader = DataLoader(dataset, batch_size=batch, shuffle=True, drop_last=True,
                            num_workers=workers, generator=generator, **extra)
    step = endless(lambda: iter(loader))

    def close() -> None:
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()

    return step, close


def torch_adapter_loop(path: Path, batch: int, workers: int,
                       transform: Transform) -> tuple[Next, Callable[[], None]]:
    """torch's DataLoader over loaderx.torch.TorchDataset(collated=True): one gather per batch
    (__getitems__), handed over as it is (the zero-copy path the docs recommend)."""
    import torch

    from loaderx.dataset import DenseDataset
    from loaderx.torch import TorchDataset

    warnings.filterwarnings("ignore", message="This DataLoader will create")
    dataset = DenseDataset(str(path))
    extra: dict[str, Any] = {}
    if workers > 0:
        extra = {"persistent_workers": True, "prefetch_factor": 2}
    # A single DenseDataset: the transform takes the batch array itself.
    loader = TorchDataset(dataset, transform=transform, collated=True).loader(
        batch, shuffle=True, drop_last=True, num_workers=workers,
        generator=torch.Generator().manual_seed(0), **extra)
    step = endless(lambda: iter(loader))

    def close() -> None:
        iterator = getattr(loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
        dataset.close()

    return step, close


# --- grain -----------------------------------------------------------------------------------


class GrainSource:
    """A random-access source for grain: opens the memmap lazily so it pickles small."""

    def __init__(self, npy: Path, transform: Transform) -> None:
        self.npy = str(npy)
        self.length = int(np.load(npy, mmap_mode="r").shape[0])
        self.array: np.ndarray | None = None
        # A module-level function: it pickles by name into grain's worker processes.
        self.transform = per_sample(transform)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> np.ndarray:
        if self.array is None:
            self.array = np.load(self.npy, mmap_mode="r")
        sample = np.array(self.array[index])
        return self.transform(sample) if self.transform is not None else sample

    def __getstate__(self) -> dict[str, object]:
        return {"npy": self.npy, "length": self.length, "array": None,
                "transform": self.transform}


def grain_loop(npy: Path, batch: int, workers: int,
               transform: Transform) -> tuple[Next, Callable[[], None]]:
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # "no jax profiler" is not news here
    import grain.python as gp

    source = GrainSource(npy, transform)
    sampler = gp.IndexSampler(num_records=len(source), shuffle=True, seed=0, num_epochs=None,
                              shard_options=gp.NoSharding())
    loader = gp.DataLoader(data_source=source, sampler=sampler,
                           operations=[gp.Batch(batch, drop_remainder=True)],
                           worker_count=workers)
    iterator = iter(loader)
    return (lambda: next(iterator)), (lambda: None)
