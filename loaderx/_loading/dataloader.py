"""Owns DataLoader: the endless, step-based, thread-prefetched loader over datasets.

Each step is a pure function of (seed, step): the sampler fills the step's indices, every stream
gathers those same indices in one native call into arrays made for that step, and the transform
(the collate step: a batch dict in, a batch dict out) runs on the result. Steps are computed
ahead on worker threads (loaderx._loading.prefetch), and without a transform also on the
consumer's own thread while it would otherwise wait for one (the workers then stand aside, so a
consumer that outruns them makes its steps into one or two warm arrays), and are delivered
strictly in step order, so ``loader.step`` (the next step to be yielded) and the seed are a
complete checkpoint: ``DataLoader(..., seed=seed, start_step=step)`` yields bit-identical
batches for any prefetch depth or worker count.

Batch lifetime: by default a batch's arrays belong to the consumer for good, exactly as if each
step allocated new ones: an array is written again only once nothing references it any more (no
variable, view, memoryview, torch.from_numpy tensor or weak reference), and is then recycled
for a later step instead of going back to malloc. Recycling matters: with several worker
threads, glibc hands the freed memory of multi-megabyte batches back to the kernel, and fresh
arrays then cost a page fault per 4 KiB on every step. With ``reuse_buffers=True`` the arrays
are recycled without that check: a batch is then valid only until the next call to ``next()``
on the loader (after which a later step may be written into it), so a consumer that keeps
batches must copy them. On a free-threaded build the reference count is as reliable for this
as on a GIL build: once the ring holds the only reference, no other thread can reach the array.

Compiled with mypyc: Final constants, plain classes with annotated attributes, no dynamic tricks.
"""

from __future__ import annotations

import difflib
import weakref
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, Final, Never, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._data.dataset_base import DatasetBase
from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._loading.loader_arguments import as_int, check_count, worker_settings
from loaderx._loading.loader_shell import Batch, LoaderShell
from loaderx._loading.look_ahead import start_look_ahead
from loaderx._loading.prefetch import (
    DEPTH_MAX,
    WORKERS_MAX,
    Prefetcher,
    WeakProducer,
    close_when_collected,
    default_workers,
)
from loaderx._loading.process_workers import (
    ProcessSteps,
    StepRecipe,
    default_start_method,
    refuse_fork_over_urls,
)
from loaderx._loading.ragged_layout import Layout, Padding, ragged_layouts
from loaderx._loading.sampler import Mode, Sampler, check_mode
from loaderx._loading.step_maker import StepMaker, Transform
from loaderx._native.calls import mypyc_attr
from loaderx._store.flags import Flag, check_flag

__all__ = ["DataLoader", "Batch", "Padding", "Transform"]


BATCH_SIZE_DEFAULT: Final = 256
PREFETCH_DEFAULT: Final = 4


def _check_streams(streams: object) -> int:
    """Validates the stream dict and returns the common length of its datasets.

    streams is taken as a plain object so that the compiled module reaches these checks (and
    their messages) instead of refusing a wrongly typed item at the call boundary.
    """
    if not isinstance(streams, Mapping):
        kind = type(streams).__name__
        raise TypeError(
            f"streams must be a dict of name -> DenseDataset or RaggedDataset, not {kind}"
        )
    if len(streams) == 0:
        raise ValueError("a DataLoader needs at least one stream")
    lengths: dict[str, int] = {}
    for name, dataset in streams.items():
        if not isinstance(name, str):
            raise TypeError(f"stream names must be str, got {name!r}")
        if not isinstance(dataset, (DenseDataset, RaggedDataset)):
            raise TypeError(
                f"stream {name!r} must be a DenseDataset or RaggedDataset, not "
                f"{type(dataset).__name__}"
            )
        lengths[name] = len(dataset)
    distinct = set(lengths.values())
    if len(distinct) != 1:
        listed = ", ".join(f"{name}={length}" for name, length in lengths.items())
        raise ValueError(f"all streams must have the same length, got {listed}")
    length = distinct.pop()
    if length == 0:
        raise ValueError("the streams are empty: there is nothing to load")
    return length


# Keywords that users of other loaders reach for, and what loaderx calls (or does instead of) them.
_KEYWORD_HINTS: Final[dict[str, str]] = {
    "num_workers": 'workers= (threads; with worker_type="process", processes)',
    "prefetch_factor": "prefetch= (steps computed ahead, in total)",
    "collate_fn": "transform= (a batch dict in, a batch dict out)",
    "shuffle": 'mode= ("cyclic" shuffles without replacement, "iid" with, "sequential" not)',
    "sampler": 'mode= and seed= (the sampler is built in: "sequential", "iid" or "cyclic")',
    "batch_sampler": 'mode= and seed= (the sampler is built in: "sequential", "iid" or "cyclic")',
    "generator": "seed=",
    "drop_last": "nothing: the loader is endless and every batch is full",
    "pin_memory": "loaderx.torch.TorchLoader(loader, pin_memory=True)",
    "persistent_workers": "nothing: worker threads live as long as the loader",
    "pad_to": "ragged=Padding(length) (loaderx.dataloader.Padding)",
    "padding": "ragged=Padding(...) (loaderx.dataloader.Padding)",
    "buckets": "ragged=Padding(buckets=...) (loaderx.dataloader.Padding)",
    "epochs": "nothing: the loader is endless; loader.steps_per_epoch converts epochs to steps",
    "num_epochs": "nothing: the loader is endless; loader.steps_per_epoch converts epochs to steps",
    "buffer_size": "prefetch=",
    "start": "start_step=",
    "step": "start_step=",
}
_PARAMETERS: Final = (
    "streams", "batch_size", "transform", "mode", "seed", "start_step", "prefetch", "workers",
    "shard", "reuse_buffers", "worker_type", "start_method", "ragged",
)


def _refuse_keywords(unknown: Mapping[str, object]) -> None:
    """TypeError for keywords DataLoader does not take, naming the loaderx equivalent."""
    for name in unknown:
        hint = _KEYWORD_HINTS.get(name)
        if hint is None:
            close = difflib.get_close_matches(name, _PARAMETERS, n=1)
            hint = f"{close[0]}=" if close else ""
        text = f"DataLoader got an unexpected keyword argument {name!r}"
        if hint:
            text += f"; use {hint}"
        raise TypeError(text)


# Users subclass the loader (a __next__ that adds to each batch, attributes of their own):
# compiled without this, such a class could be defined but not made, while the interpreted
# build allowed it.
@mypyc_attr(allow_interpreted_subclasses=True)
class DataLoader(LoaderShell):
    """Endless iteration over dict batches {name: (batch_size, *item_shape) array}.

    streams: name -> DenseDataset or RaggedDataset, all of the same length; every stream is
    gathered at the same indices, so record i lines up across them. A ragged stream gives two
    keys (loaderx._loading.ragged_batch): by default packed, `name` (every record back to back)
    and `name.cu_seqlens` (int32 row offsets); with ragged=Padding(...) (or a dict name ->
    "packed" or Padding) padded, `name` (batch_size, L, *item_shape) and `name.mask`. mode, seed and shard=(index, count) go to the
    Sampler (sequential, iid or cyclic; with a shard, batch_size is this host's part of a global
    batch of batch_size * count). transform runs on the worker threads. prefetch bounds how
    many steps are computed ahead of the consumer; workers is the thread count (at most
    prefetch are used; default min(4, CPUs), one fewer without a transform, when the consumer
    makes steps itself while it would otherwise wait). reuse_buffers trades the batch lifetime
    for fewer allocations (module docstring). worker_type="process" runs gather and transform
    in `workers` processes instead of threads, started with start_method (default forkserver,
    else spawn): see loaderx._loading.process_workers.

    An exception raised while making a step (a read or the transform) is raised by the next()
    that would have returned that step, with its original traceback; the step counts as taken,
    so iterating again continues with the following one. close() (or leaving a with block)
    stops and joins the threads, after which iteration ends (StopIteration); it does not close
    the datasets, which stay the caller's. A loader dropped without close() is closed when it
    is collected, and at interpreter exit.
    """

    def __init__(
        self,
        streams: Mapping[str, DatasetBase],
        batch_size: SupportsIndex = BATCH_SIZE_DEFAULT,
        transform: Transform | None = None,
        mode: Mode | np.str_ = "cyclic",
        seed: SupportsIndex = 0,
        start_step: SupportsIndex = 0,
        prefetch: SupportsIndex = PREFETCH_DEFAULT,
        workers: SupportsIndex | None = None,
        shard: Sequence[SupportsIndex] | None = None,
        reuse_buffers: Flag = False,
        worker_type: str | np.str_ = "thread",
        start_method: str | np.str_ | None = None,
        ragged: object = None,
        # Collected to be refused: without *extra, the compiled loader (mypyc's argument
        # parsing of a signature with **unknown) dropped a 14th positional argument silently.
        *extra: Never,
        **unknown: Never,
    ) -> None:
        if extra:
            raise TypeError(
                f"DataLoader takes at most {len(_PARAMETERS)} positional arguments (streams and "
                f"{len(_PARAMETERS) - 1} settings), but {len(_PARAMETERS) + len(extra)} were "
                "given; pass the settings by name"
            )
        _refuse_keywords(unknown)
        # reuse_buffers, mode, worker_type and start_method are annotated so that mypyc lets
        # any value reach the checks and their messages (loaderx._store.flags says how).
        reuse = check_flag("reuse_buffers", reuse_buffers)
        self._worker_type, self._start_method = worker_settings(worker_type, start_method)
        length = _check_streams(streams)
        self._layouts: dict[str, Layout] = ragged_layouts(streams, ragged)
        if self._layouts and worker_type == "process":
            raise ValueError(
                "worker_type='process' needs batches of fixed shapes, and ragged streams change "
                "shape from batch to batch: use worker_type='thread' for them"
            )
        if worker_type == "process":
            refuse_fork_over_urls(self._start_method, streams.values())
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable or None, not {type(transform).__name__}")
        # Without a transform a step is native reads only, which the consumer may make itself
        # while it would wait (loaderx._loading.prefetch); a user's transform runs on workers only.
        self._consumer_helps: bool = transform is None
        depth = check_count("prefetch", prefetch, DEPTH_MAX)
        threads = (
            default_workers(self._consumer_helps and worker_type == "thread")
            if workers is None
            else check_count("workers", workers, WORKERS_MAX)
        )
        self._length: int = length
        self._identities: dict[str, str] | None = None
        # The sampler checks and converts batch_size, seed and shard (naming each).
        self._sampler: Sampler = Sampler(length, batch_size, mode=mode, seed=seed, shard=shard)
        first_step = as_int("start_step", start_step, got="got")
        self._streams: dict[str, DatasetBase] = dict(streams)
        self._batch_size = self._sampler.batch_size
        self._mode: Mode = check_mode(self._sampler.mode)  # checked: a plain str
        self._seed: int = self._sampler.seed
        self._shard: tuple[int, int] | None = None if shard is None else self._sampler.shard
        self._prefetch = depth
        self._workers = threads
        self._reuse_buffers: bool = reuse
        self._transform: Transform | None = transform
        self._maker: StepMaker = StepMaker(
            self._sampler, self._streams, self._batch_size, transform, depth + 1, reuse,
            first_step, self._layouts,
        )
        self._produce: partial[Batch] = partial(self._maker.make)
        self._lifetime: set[int] = set()
        self._start(first_step)

    # The loader's settings are read-only: its threads, buffers and checkpoint were made from
    # them, so an assigned one would be ignored by the batches and believed by state_dict()
    # (torch's DataLoader likewise refuses batch_size or sampler once it is made).
    @property
    def streams(self) -> dict[str, DatasetBase]:
        """The streams by name (the datasets stay the caller's)."""
        return self._streams

    @property
    def sampler(self) -> Sampler:
        """The sampler of each step's indices (load_state_dict replaces it)."""
        return self._sampler

    @property
    def mode(self) -> Mode:
        """The sampler's mode: "sequential", "iid" or "cyclic"."""
        return self._mode

    @property
    def seed(self) -> int:
        """The seed of the batches (load_state_dict may change it)."""
        return self._seed

    @property
    def shard(self) -> tuple[int, int] | None:
        """(index, count) among the hosts, or None."""
        return self._shard

    @property
    def reuse_buffers(self) -> bool:
        """Whether a batch is valid only until the next next()."""
        return self._reuse_buffers

    def _restart(self, seed: int, step: int) -> None:
        """Stops the threads and starts over at (seed, step) (what load_state_dict does). The
        new sampler is made first: a seed it refuses leaves this loader running as it was."""
        sampler = Sampler(
            self._length, self._batch_size, mode=self._mode, seed=seed, shard=self._shard
        )
        self.close()
        self._sampler = sampler
        self._seed = seed
        self._maker = StepMaker(
            sampler, self._streams, self._batch_size, self._transform, self._prefetch + 1,
            self._reuse_buffers, step, self._layouts,
        )
        self._produce = partial(self._maker.make)
        self._lifetime = set()
        self._start(step)

    def _start(self, step: int) -> None:
        """Starts the worker threads (or processes) at `step`."""
        if self._worker_type == "process":
            # Only dense streams get here (ragged ones are refused with worker processes).
            dense = {n: d for n, d in self._streams.items() if isinstance(d, DenseDataset)}
            recipe = StepRecipe(
                dense, self._length, self._batch_size, self._mode, self._seed, self._shard,
                self._transform,
            )
            steps = ProcessSteps(
                recipe, step, self._prefetch, self._workers, self._reuse_buffers,
                self._start_method,
            )
            self._prefetcher = steps
            # The processes stop when the loader is collected (the ring's own finaliser).
            self._finalizer = weakref.finalize(self._lifetime, steps.close)
            # Datasets opened from a URL: this process fetches the steps ahead into the cache
            # the workers share (loaderx._loading.look_ahead).
            self._look_ahead = start_look_ahead(self._sampler, dense, steps)
            return
        # Only the loader holds its maker: the threads call it through a weak reference, so a
        # transform that references the loader's owner does not keep the loader alive.
        prefetcher = Prefetcher(
            WeakProducer(self._produce), step, self._prefetch, self._workers,
            name="loaderx-prefetch", consumer_helps=self._consumer_helps,
        )
        self._prefetcher = prefetcher
        self._maker.follow(prefetcher)
        # Datasets opened from a URL: their records for the steps ahead are fetched early.
        self._look_ahead = start_look_ahead(self._sampler, self._streams, prefetcher)
        # Native classes take no weak references, so the finaliser watches a set that only this
        # loader holds: when the loader is collected the set goes too, and the threads stop.
        self._finalizer = close_when_collected(self._lifetime, prefetcher)

    def _checkpoint_seed(self) -> int:
        return self._seed

    def fingerprint(self) -> dict[str, Any]:
        """What the index stream depends on besides (seed, step); see
        loaderx._loading.checkpoint."""
        return {
            # The length sampled from (fixed when the loader was made), not the datasets'
            # lengths now: a dataset that grew since would otherwise pass for the one sampled.
            "lengths": {name: self._length for name in self._streams},
            "global_batch_size": self._sampler.global_batch_size,
            "mode": self._mode,
            # What those records hold: a dataset rewritten with as many records is other data.
            "data": self._data_identities(),
        }

    def _data_identities(self) -> dict[str, str]:
        """Each stream's content identity over the records sampled from, read the first time
        it is asked for and kept: it reads 4 bytes a record, and state_dict() may run every
        step."""
        if self._identities is None:
            self._identities = {
                name: dataset.content_identity(self._length)
                for name, dataset in self._streams.items()
            }
        return dict(self._identities)

    @property
    def steps_per_epoch(self) -> int:
        """Steps per pass over the data: records // global batch size (at least 1).

        In cyclic mode this is exactly one cycle (every record once, length mod global batch
        left out, a different set each cycle); in sequential and iid mode it is the same count.
        """
        return max(1, self._length // self._sampler.global_batch_size)

    def __len__(self) -> int:
        raise TypeError(
            "a loaderx DataLoader is endless and has no len(); use loader.steps_per_epoch "
            f"({self.steps_per_epoch} steps here) to count steps per pass over the data"
        )

    @property
    def length(self) -> int:
        """The number of records in every stream."""
        return self._length

    def indices(self, step: SupportsIndex) -> npt.NDArray[np.int64]:
        """The record indices of any step's batch (what every stream is gathered at)."""
        return self._maker.indices(step)

    def __repr__(self) -> str:
        names = ", ".join(self._streams)
        return (
            f"DataLoader(streams=[{names}], batch_size={self._batch_size}, mode={self._mode!r}, "
            f"seed={self._seed}, step={self.step}, prefetch={self._prefetch}, "
            f"workers={self._workers})"
        )
