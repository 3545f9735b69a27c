"""MixtureLoader: an endless, prefetched loader over a weighted mixture of datasets.

Batch k is a pure function of (seed, k): MixtureSampler (loaderx._loading.mixture_sampler) says
which source and record each row reads, and the loader gathers them, one gather per source and
stream, on worker threads (loaderx._loading.prefetch). Rows of a batch come grouped by source,
in source order. A ragged stream's rows are packed (or padded) across sources as in DataLoader
(loaderx._loading.ragged_batch), one native gather per source.

Left interpreted: the per-step work is a handful of vectorised NumPy calls plus one gather per
source and stream.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._data.dataset_base import DatasetBase
from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._loading.look_ahead import start_mixture_look_ahead
from loaderx._loading.loader_arguments import as_int, check_count, worker_settings
from loaderx._loading.loader_shell import Batch, LoaderShell
from loaderx._loading.prefetch import (
    DEPTH_MAX,
    WORKERS_MAX,
    Prefetcher,
    WeakProducer,
    close_when_collected,
    default_workers,
)
from loaderx._loading.mixture_sampler import STEP_END_REASON, MixtureSampler
from loaderx._loading.process_workers import (
    ProcessSteps,
    refuse_fork_over_urls,
)
from loaderx._loading.ragged_batch import RaggedStream, longest_rows
from loaderx._loading.ragged_layout import Layout, extra_key, ragged_layouts

__all__ = ["MixtureLoader"]


# A source's streams: DenseDataset or RaggedDataset (their common base, for callers' dicts of
# both, which mypy types by that base).
Source = Mapping[str, DatasetBase]


def _check_sources(sources: Sequence[Source]) -> tuple[list[str], list[int]]:
    """Stream names and per-source lengths; every source has the same names, kinds (dense or
    ragged), dtypes and item shapes."""
    if isinstance(sources, Mapping) or not isinstance(sources, Sequence) or not sources:
        raise TypeError(
            "sources must be a non-empty list of dicts name -> DenseDataset or RaggedDataset"
        )
    first = sources[0]
    names = list(first)
    lengths = []
    for position, source in enumerate(sources):
        if not isinstance(source, Mapping) or sorted(source) != sorted(names):
            raise ValueError(
                f"source {position} must be a dict with the streams {sorted(names)}, got "
                f"{sorted(source) if isinstance(source, Mapping) else type(source).__name__}"
            )
        found = set()
        for name in names:
            dataset = source[name]
            if not isinstance(dataset, (DenseDataset, RaggedDataset)):
                raise TypeError(
                    f"source {position} stream {name!r} must be a DenseDataset or RaggedDataset"
                )
            reference = first[name]
            if type(dataset) is not type(reference):
                raise TypeError(
                    f"source {position} stream {name!r} is a {type(dataset).__name__}, source 0's "
                    f"is a {type(reference).__name__}"
                )
            if dataset.dtype != reference.dtype or dataset.item_shape != reference.item_shape:
                raise ValueError(
                    f"source {position} stream {name!r} holds {dataset.dtype} {dataset.item_shape}"
                    f", source 0 holds {reference.dtype} {reference.item_shape}"
                )
            found.add(len(dataset))
        if len(found) != 1:
            raise ValueError(f"the streams of source {position} differ in length: {sorted(found)}")
        lengths.append(found.pop())
    return names, lengths


class _MixtureMaker:
    """Computes one step's batch; shared by the worker threads of one MixtureLoader, or sent
    by pickling to each of its worker processes (the recipe of loaderx._loading.process_workers).
    """

    def __init__(self, loader: MixtureLoader) -> None:
        self.sampler = loader.sampler
        self.sources = loader.sources
        self.names = loader.names
        self.batch_size = loader.batch_size
        self.transform = loader.transform
        self.source_key = loader.source_key
        self.layouts = loader.layouts
        # With shard=, a padded stream whose length depends on the batch pads to the longest
        # record of the whole global batch (loaderx._loading.ragged_batch): its sampler, whose
        # rows are the hosts' rows in another order.
        sampler = self.sampler
        self.whole: MixtureSampler | None = None
        if sampler.shard[1] > 1 and any(
            layout is not None and layout.length is None for layout in self.layouts.values()
        ):
            self.whole = MixtureSampler(sampler.lengths, sampler.weights,
                                        sampler.global_batch_size, sampler.seed)

    def maker(self, first_step: int) -> _MixtureMaker:
        return self

    def make(self, step: int) -> Batch:
        sources, indices = self.sampler.batch(step)
        counts = np.bincount(sources, minlength=len(self.sources)).tolist()
        batch: dict[str, npt.NDArray[Any]] = {}
        everyone = None if self.whole is None else self.whole.batch(step)
        for name in self.names:
            reference = self.sources[0][name]
            if isinstance(reference, RaggedDataset):
                layout = self.layouts[name]
                longest = -1
                if everyone is not None and layout is not None and layout.length is None:
                    longest = self._longest(name, *everyone)
                self._gather_ragged(name, reference, counts, indices, batch, longest)
                continue
            out = np.empty((self.batch_size, *reference.item_shape), dtype=reference.dtype)
            row = 0
            for source, count in enumerate(counts):
                if count:  # one gather per source, straight into its rows of the batch
                    dataset = self.sources[source][name]
                    assert isinstance(dataset, DenseDataset)
                    dataset.gather_into(indices[row : row + count], out[row : row + count])
                    row += count
            batch[name] = out
        if self.source_key is not None:
            batch[self.source_key] = sources
        if self.transform is None:
            return batch
        result: object = self.transform(batch)
        if not isinstance(result, dict):
            raise TypeError(
                f"the transform must return a batch dict, it returned {type(result).__name__}"
            )
        return result

    def _longest(self, name: str, sources: npt.NDArray[Any],
                 indices: npt.NDArray[np.int64]) -> int:
        """The rows of the longest record of stream `name` among the global batch's rows."""
        longest = 0
        for source in np.unique(sources).tolist():
            dataset = self.sources[source][name]
            assert isinstance(dataset, RaggedDataset)
            longest = max(longest, longest_rows(dataset, indices[sources == source]))
        return longest

    def _gather_ragged(self, name: str, reference: RaggedDataset, counts: list[int],
                       indices: npt.NDArray[np.int64], batch: dict[str, Any],
                       longest: int) -> None:
        """Ragged stream `name` of a step: one gather per source into one packed buffer, in new
        arrays (the mixture's batches are always the consumer's)."""
        parts = []
        row = 0
        for source, count in enumerate(counts):
            if count:
                dataset = self.sources[source][name]
                assert isinstance(dataset, RaggedDataset)
                parts.append((dataset, indices[row : row + count]))
                row += count
        stream = RaggedStream(name, reference, self.layouts[name], self.batch_size, 1)
        stream.gather(parts, 0, False, batch, longest)


class MixtureLoader(LoaderShell):
    """An endless loader over a weighted mixture of sources; see loaderx._loading.mixture_sampler.

    sources: a list of dicts name -> DenseDataset or RaggedDataset, each with the same stream
    names, kinds, dtypes and item shapes; ragged= lays out the ragged streams as in DataLoader
    (packed by default, or a Padding). weights: one positive number per source (normalised). Batch k is a pure
    function of (seed, k); prefetch, workers, transform, shard, worker_type and start_method
    work as in DataLoader, and
    state_dict / load_state_dict checkpoint it. With source_key="source" each batch also holds
    the source of every row under that name (None, the default: no such stream; anything but
    a str or None is a TypeError).
    """

    def __init__(
        self,
        sources: Sequence[Source],
        weights: Sequence[float],
        batch_size: SupportsIndex = 256,
        transform: Callable[[dict[str, npt.NDArray[Any]]], Batch] | None = None,
        seed: SupportsIndex = 0,
        start_step: SupportsIndex = 0,
        prefetch: SupportsIndex = 4,
        workers: SupportsIndex | None = None,
        shard: tuple[SupportsIndex, SupportsIndex] | None = None,
        source_key: str | None = None,
        worker_type: str | np.str_ = "thread",
        start_method: str | np.str_ | None = None,
        ragged: object = None,
    ) -> None:
        self._worker_type, self._start_method = worker_settings(worker_type, start_method)
        names, lengths = _check_sources(sources)
        self._layouts: dict[str, Layout] = ragged_layouts(sources[0], ragged)
        if self._layouts and self._worker_type == "process":
            raise ValueError(
                "worker_type='process' needs batches of fixed shapes, and ragged streams change "
                "shape from batch to batch: use worker_type='thread' for them"
            )
        if self._worker_type == "process":
            refuse_fork_over_urls(self._start_method,
                                  [d for source in sources for d in source.values()])
        if source_key is not None:
            if not isinstance(source_key, str):
                raise TypeError(f"source_key must be a str or None, got {source_key!r}")
            source_key = str(source_key)  # a NumPy str as the plain str, as the batch's key
        if source_key is not None and source_key in names:
            raise ValueError(f"source_key {source_key!r} is also a stream name")
        # The sources are written last: a ragged stream's cu_seqlens or mask of the same key
        # would have been replaced by them without a word.
        for name, layout in self._layouts.items():
            if source_key == extra_key(name, layout):
                raise ValueError(
                    f"source_key {source_key!r} is also a key of the batch: ragged stream "
                    f"{name!r}'s {'cu_seqlens' if layout is None else 'mask'}"
                )
        self._sampler = MixtureSampler(lengths, weights, batch_size, seed, shard)
        self._sources = [dict(source) for source in sources]
        self._identities: list[dict[str, str]] | None = None
        self._names = names
        self._transform = transform
        self._source_key = source_key
        self._batch_size = self._sampler.batch_size
        self._prefetch = check_count("prefetch", prefetch, DEPTH_MAX)
        self._workers = (
            default_workers(transform is None and self._worker_type == "thread")
            if workers is None
            else check_count("workers", workers, WORKERS_MAX)
        )
        self._prefetcher = self._start(as_int("start_step", start_step, got="got"))

    def _start(self, step: int) -> Prefetcher[Batch] | ProcessSteps:
        if self._worker_type == "process":
            # reuse_buffers=False: the mixture loader's batches are always the consumer's.
            steps = ProcessSteps(
                _MixtureMaker(self), step, self._prefetch, self._workers, False, self._start_method
            )
            self._finalizer = weakref.finalize(self, steps.close)
            # Sources opened from a URL: this process fetches the steps ahead into the cache
            # the workers share (loaderx._loading.look_ahead).
            self._look_ahead = start_mixture_look_ahead(self._sampler, self._sources, steps)
            return steps
        # The threads hold a maker, not the loader, and only through a weak reference (the
        # maker holds the transform, which may reference the loader's owner), so a dropped
        # loader can be collected.
        self._produce: partial[Batch] = partial(_MixtureMaker(self).make)
        prefetcher: Prefetcher[Batch] = Prefetcher(
            WeakProducer(self._produce), step, self._prefetch, self._workers,
            name="loaderx-mixture", consumer_helps=self._transform is None,
            step_end=self._sampler.step_end, step_end_reason=STEP_END_REASON,
        )
        self._finalizer = close_when_collected(self, prefetcher)
        # Sources opened from a URL: their records for the steps ahead are fetched early.
        self._look_ahead = start_mixture_look_ahead(self._sampler, self._sources, prefetcher)
        return prefetcher

    # Read-only, as DataLoader's: the workers and the checkpoint were made from these.
    @property
    def sources(self) -> list[dict[str, DatasetBase]]:
        """The sources, each a dict name -> dataset (the datasets stay the caller's)."""
        return self._sources

    @property
    def names(self) -> list[str]:
        """The stream names every source has."""
        return self._names

    @property
    def sampler(self) -> MixtureSampler:
        """The sampler of each step's sources and indices (load_state_dict replaces it)."""
        return self._sampler

    @property
    def layouts(self) -> dict[str, Layout]:
        """How each ragged stream is laid out (packed or a Padding)."""
        return self._layouts

    @property
    def transform(self) -> Callable[[dict[str, npt.NDArray[Any]]], Batch] | None:
        """The transform run on each batch, or None."""
        return self._transform

    @property
    def source_key(self) -> str | None:
        """The batch key of each row's source, or None."""
        return self._source_key

    @property
    def seed(self) -> int:
        return self._sampler.seed

    @property
    def steps_per_epoch(self) -> int:
        """Steps per pass over all sources' records: total records // global batch (at least 1)."""
        return max(1, sum(self._sampler.lengths) // self._sampler.global_batch_size)

    def make(self, step: int) -> Batch:
        """The batch of any step (what the worker threads compute)."""
        return _MixtureMaker(self).make(step)

    def fingerprint(self) -> dict[str, Any]:
        return {
            # The lengths sampled from (fixed when the loader was made), not the datasets'
            # lengths now: a dataset that grew since would otherwise pass for the one sampled.
            "lengths": [
                {name: length for name in self._names} for length in self._sampler.lengths
            ],
            "shares": list(self._sampler.shares),
            "global_batch_size": self._sampler.global_batch_size,
            "mode": "mixture",
            # What those records hold: a source rewritten with as many records is other data.
            "data": self._data_identities(),
        }

    def _data_identities(self) -> list[dict[str, str]]:
        """Each source's streams' content identities over the records sampled from, read once
        (4 bytes a record) and kept, as DataLoader does."""
        if self._identities is None:
            self._identities = [
                {name: source[name].content_identity(length) for name in self._names}
                for source, length in zip(self._sources, self._sampler.lengths)
            ]
        return [dict(identities) for identities in self._identities]

    def _checkpoint_seed(self) -> int:
        return self.seed

    def _restart(self, seed: int, step: int) -> None:
        sampler = self._sampler
        # Made first: a state it refuses leaves this loader running as it was.
        restarted = MixtureSampler(
            sampler.lengths, sampler.weights, sampler.batch_size, seed, sampler.shard
        )
        if step > restarted.step_end:
            raise ValueError(
                f"the state's step must be in [0, {restarted.step_end}] ({STEP_END_REASON}), "
                f"got {step}"
            )
        self.close()
        self._sampler = restarted
        self._prefetcher = self._start(step)

    def __len__(self) -> int:
        raise TypeError(
            "a MixtureLoader is endless and has no len(); use steps_per_epoch "
            f"({self.steps_per_epoch} steps here)"
        )
