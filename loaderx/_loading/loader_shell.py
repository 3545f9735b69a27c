"""What DataLoader and MixtureLoader share: iterating their prefetcher, close, with, checkpoints.

A loader hands out the steps its Prefetcher (loaderx._loading.prefetch) computes ahead, in step
order; `step` and the seed are a complete checkpoint (loaderx._loading.checkpoint). A subclass
says what its checkpoint depends on (fingerprint) and how it starts over at a saved step.

Compiled with mypyc (DataLoader subclasses it there); MixtureLoader, left interpreted, may
subclass it too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

from loaderx._loading.checkpoint import make_state, read_state
from loaderx._native.calls import mypyc_attr

Batch = dict[str, Any]
L = TypeVar("L", bound="LoaderShell")


class Steps(Protocol):
    """What a loader iterates: a thread Prefetcher (loaderx._loading.prefetch) or worker
    processes (loaderx._loading.process_workers.ProcessSteps)."""

    @property
    def next_step(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def __next__(self) -> Batch: ...

    def close(self) -> None: ...


class Stoppable(Protocol):
    """The look-ahead of a loader over datasets opened from a URL
    (loaderx._loading.look_ahead.LookAhead)."""

    def stop(self) -> None: ...


@mypyc_attr(allow_interpreted_subclasses=True)
class LoaderShell:
    """The iteration, close, context manager and state_dict of a loader over a Prefetcher."""

    # Threads by default; worker processes with worker_type="process".
    _prefetcher: Steps
    # Stops the prefetcher when the loader is collected without close().
    _finalizer: weakref.finalize[Any, Any]
    # Fetches the steps ahead into the cache of remote datasets, with threads or processes.
    _look_ahead: Stoppable | None = None
    # The settings every loader has, set by its __init__ and read-only to its users (the
    # threads, buffers and checkpoint were made from them).
    _batch_size: int
    _prefetch: int
    _workers: int
    _worker_type: str
    _start_method: str

    def _checkpoint_seed(self) -> int:
        """The seed the loader's checkpoint holds (its seed now)."""
        raise NotImplementedError

    def fingerprint(self) -> dict[str, Any]:
        """What the index stream depends on besides (seed, step); see
        loaderx._loading.checkpoint."""
        raise NotImplementedError

    def _restart(self, seed: int, step: int) -> None:
        """Stops the threads and starts over at (seed, step), or raises with nothing changed."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """(seed, step) and the fingerprint, as plain data: save it beside the model.

        The step is the next one the loader would yield, so a loader given this state with
        load_state_dict (or a new loader made with seed=s, start_step=step) continues the
        stream exactly where this one stands.
        """
        return make_state(self._checkpoint_seed(), self.step, self.fingerprint())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continues from a state_dict(): same seed, next batch at its step.

        Raises StateMismatchError, before anything changes, when the state was saved for other
        data (another record count, other records, global batch size or mode). Batches already
        prefetched are dropped and the worker threads restart at the saved step.
        """
        seed, step = read_state(state, self.fingerprint())
        self._restart(seed, step)

    @property
    def batch_size(self) -> int:
        """This host's batch size."""
        return self._batch_size

    @property
    def prefetch(self) -> int:
        """How many steps are made ahead of the consumer."""
        return self._prefetch

    @property
    def workers(self) -> int:
        """How many worker threads (or processes) make steps."""
        return self._workers

    @property
    def worker_type(self) -> str:
        """"thread" or "process"."""
        return self._worker_type

    @property
    def start_method(self) -> str:
        """How worker processes are started (with worker_type="process")."""
        return self._start_method

    @property
    def step(self) -> int:
        """The step of the next batch to be yielded: with seed, a complete checkpoint."""
        return self._prefetcher.next_step

    @property
    def closed(self) -> bool:
        return self._prefetcher.closed

    def __iter__(self: L) -> L:
        return self

    def __next__(self) -> Batch:
        """The next step's batch; StopIteration only once the loader is closed."""
        # In a forked child the prefetcher refuses (its threads are the parent's), naming the
        # step to restart from.
        return next(self._prefetcher)

    def close(self) -> None:
        """Stops and joins every worker thread (or process) and the look-ahead; idempotent.
        The datasets stay open."""
        self._finalizer.detach()
        self._prefetcher.close()
        look_ahead = self._look_ahead
        if look_ahead is not None:
            self._look_ahead = None
            look_ahead.stop()

    def __bool__(self) -> bool:
        """True: an endless loader refuses len() (DataLoader.__len__), and `if loader:` would
        otherwise raise that refusal."""
        return True

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError(self._not_copied())

    def __copy__(self) -> Any:
        raise TypeError(self._not_copied())

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        raise TypeError(self._not_copied())

    def _not_copied(self) -> str:
        # Before, pickle failed on a ctypes pointer or a weakref deep inside, and copy.copy
        # gave an interpreted loader sharing the original's threads and buffers.
        return (
            f"a loaderx {type(self).__name__} cannot be pickled or copied: it owns threads "
            "(or worker processes) and buffers. Pickle its datasets (they pickle by path) and "
            "its state_dict() instead, then make a loader with the same arguments and call "
            "load_state_dict()"
        )

    def __enter__(self: L) -> L:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


__all__ = ["Batch", "LoaderShell", "Steps", "Stoppable"]
