"""The loader's look-ahead for datasets opened from a URL: fetch what the next steps read
before the workers get to them.

Batch k is a pure function of (seed, k), so the loader knows every future step's records. A
thread follows the consumer's position (the prefetcher's next_step) and keeps the records of
the steps ahead of it in the cache: as many steps as fit in a byte bound (window_bytes), each
fetched with the requests of several steps in flight at once. The records of a fetched step
stay pinned until the consumer has passed it, so eviction never drops what a step ahead still
needs; the steps after the window are handed to eviction as the known future (Belady's rule,
loaderx._remote.eviction).

A failed fetch (the server down past its retry budget) is not the look-ahead's to report: the
worker that makes that step fetches it again and raises in next(). The look-ahead waits and
tries again, so training that resumes after an outage finds it working.

The thread holds the prefetcher weakly and stops once it is closed or collected. Left
interpreted: it runs once per few steps.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._loading.prefetch import Prefetcher
from loaderx._loading.sampler import Sampler
from loaderx._remote.remote_source import RemoteSource

# The look-ahead holds at most this many bytes of cache (or half the smallest cache bound).
WINDOW_BYTES_DEFAULT: Final = 256 << 20
# Steps fetched by one call (their requests in flight together) and the most steps ahead.
STEPS_PER_FETCH: Final = 4
STEPS_AHEAD_MAX: Final = 256
# How often the thread looks at the consumer's position, and waits after a failed fetch.
POLL_SECONDS: Final = 0.002
RETRY_SECONDS: Final = 1.0


def _sources(streams: Mapping[str, DenseDataset]) -> list[RemoteSource]:
    found: list[RemoteSource] = []
    for dataset in streams.values():
        remote = dataset._remote
        if remote is not None and all(remote is not known for known in found):
            found.append(remote)
    return found


def start_look_ahead(
    sampler: Sampler, streams: Mapping[str, DenseDataset], prefetcher: Prefetcher[Any]
) -> LookAhead | None:
    """A running look-ahead when a stream reads a remote dataset; None otherwise."""
    sources = _sources(streams)
    if not sources:
        return None
    window = min([WINDOW_BYTES_DEFAULT] + [source.cache_bytes // 2 for source in sources])
    ahead = LookAhead(sampler, sources, prefetcher, max(1, window))
    ahead.start()
    return ahead


class LookAhead:
    """The thread that keeps the steps ahead of the consumer cached (module doc)."""

    def __init__(
        self, sampler: Sampler, sources: list[RemoteSource], prefetcher: Prefetcher[Any],
        window_bytes: int,
    ) -> None:
        self._sampler = sampler
        self._sources = sources
        self._prefetcher = weakref.ref(prefetcher)
        self._window_bytes = window_bytes
        self._held: dict[int, npt.NDArray[np.int64]] = {}  # fetched steps, pinned
        self._costs: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loaderx-look-ahead", daemon=True)
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _position(self) -> int | None:
        prefetcher = self._prefetcher()
        if prefetcher is None or prefetcher.closed:
            return None
        return prefetcher.next_step

    def _indices(self, step: int) -> npt.NDArray[np.int64]:
        out = np.empty(self._sampler.batch_size, dtype=np.int64)
        self._sampler.fill(step, out)
        return out

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                position = self._position()
                if position is None:
                    return
                self._release_before(position)
                steps = self._next_steps(position)
                if not steps:
                    self._stop.wait(POLL_SECONDS)
                    continue
                if not self._fetch(steps):
                    self._stop.wait(RETRY_SECONDS)
        finally:
            self._release_before(None)

    def _release_before(self, position: int | None) -> None:
        """Unpins the steps the consumer has passed (every step when position is None)."""
        for step in [s for s in self._held if position is None or s < position]:
            indices = self._held.pop(step)
            self._costs.pop(step, None)
            for source in self._sources:
                source.fetcher.unpin(indices)

    def _next_steps(self, position: int) -> list[tuple[int, npt.NDArray[np.int64]]]:
        """The next steps to fetch: after the last held one, while the window has room."""
        step = max(max(self._held) + 1, position) if self._held else position
        used = sum(self._costs.values())
        chosen: list[tuple[int, npt.NDArray[np.int64]]] = []
        while len(chosen) < STEPS_PER_FETCH and step < position + STEPS_AHEAD_MAX:
            indices = self._indices(step)
            cost = sum(source.fetcher.cost(indices) for source in self._sources)
            if used + cost > self._window_bytes and (self._held or chosen):
                break
            chosen.append((step, indices))
            self._costs[step] = cost
            used += cost
            step += 1
        return chosen

    def _fetch(self, steps: list[tuple[int, npt.NDArray[np.int64]]]) -> bool:
        """Pins and fetches the steps' records; False after a failure (retried later)."""
        for step, indices in steps:
            self._held[step] = indices
            for source in self._sources:
                source.fetcher.pin(indices)
        self._tell_future()
        wanted = np.concatenate([indices for _, indices in steps])
        try:
            for source in self._sources:
                source.prefetch(wanted)
        except Exception:
            self.failures += 1
            return False
        return True

    def _tell_future(self) -> None:
        """Gives eviction the steps known ahead: the held window and as many steps past it."""
        if not self._held:
            return
        first, last = min(self._held), max(self._held)
        steps = list(range(first, last + 1 + (last - first + 1)))
        indices = [self._held[s] if s in self._held else self._indices(s) for s in steps]
        flat = np.concatenate(indices)
        numbers = np.repeat(np.asarray(steps, dtype=np.int64), [len(i) for i in indices])
        for source in self._sources:
            source.fetcher.set_future(flat, numbers)


__all__ = ["LookAhead", "start_look_ahead"]
