"""The loader's look-ahead for datasets opened from a URL: fetch what the next steps read
before the workers get to them.

Batch k is a pure function of (seed, k), so the loader knows every future step's records. A
thread follows the consumer's position (the next_step of the thread Prefetcher, or of the worker
processes' ProcessSteps) and keeps the records of the steps ahead of it in the cache: as many
steps as fit in a byte bound (window_bytes), each fetched with the requests of several steps in
flight at once. The records of a fetched step stay pinned until the consumer has passed it, so
eviction never drops what a step ahead still needs; the steps after the window are handed to
eviction as the known future (Belady's rule, loaderx._remote.eviction).

A failed fetch (the server down past its retry budget) is not the look-ahead's to report: the
worker that makes that step fetches it again and raises in next(). The look-ahead waits and
tries again, so training that resumes after an outage finds it working.

Worker processes (worker_type="process") each open the dataset again, with the same cache
folder, so the records this thread fetches in the consumer's process are present for them: the
cache is one set of files for every process on the host. The thread runs in the consumer, not
in a worker, because only the consumer knows where the steps stand (next_step); it covers the
steps the workers were already sent as well as those after them. Pins and the known future live
in the memory of the process that made them, while eviction runs in whichever process needs
room: a worker whose fetch finds the cache full would drop records in index order, the window
pinned here included, and fetch them again a step later. So the fetcher publishes the pins and
future given with set_future to every process of the cache folder
(loaderx._remote.shared_hints), and any process's eviction keeps what this thread holds and
ranks the rest by its future. A worker's own pins (a gather in progress) stay its own: the
steps the workers make are pinned here too, as far as the window reaches, and a record dropped
between a worker's fetch and its gather is fetched again by that gather (never read as zeros).

The thread stops once the prefetcher is closed (by the loader's close(), which also waits a
moment for it, or by its finaliser), or once one of its datasets is closed, and withdraws what
it published. Left interpreted: it runs
once per few steps.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from loaderx._data.dataset_base import DatasetBase
from loaderx._loading.mixture_sampler import MixtureSampler
from loaderx._loading.sampler import Sampler
from loaderx._os.event_flag import EventFlag
from loaderx._remote.remote_source import RemoteSource

# What one step reads from the remote datasets: (dataset's cache, global indices) pairs.
Reads: TypeAlias = list[tuple[RemoteSource, npt.NDArray[np.int64]]]

# The look-ahead holds at most this many bytes of cache (or half the smallest cache bound).
WINDOW_BYTES_DEFAULT: Final = 256 << 20
# Steps fetched by one call (their requests in flight together) and the most steps ahead.
STEPS_PER_FETCH: Final = 4
STEPS_AHEAD_MAX: Final = 256
# How often the thread looks at the consumer's position, and waits after a failed fetch.
POLL_SECONDS: Final = 0.002
SETTLED_POLL_SECONDS: Final = 0.05
RETRY_SECONDS: Final = 1.0
# How long close() waits for the thread (a fetch in flight may finish after that, unused).
JOIN_SECONDS: Final = 1.0


class Position(Protocol):
    """Where the consumer stands: the thread Prefetcher or ProcessSteps."""

    @property
    def next_step(self) -> int: ...

    @property
    def closed(self) -> bool: ...


def _remote_sources(streams: Mapping[str, DatasetBase]) -> list[RemoteSource]:
    found: list[RemoteSource] = []
    for dataset in streams.values():
        remote = dataset._remote
        if remote is not None and all(remote is not known for known in found):
            found.append(remote)
    return found


def _start(plan: Callable[[int], Reads], sources: list[RemoteSource],
           prefetcher: Position) -> LookAhead:
    window = min([WINDOW_BYTES_DEFAULT] + [source.cache_bytes // 2 for source in sources])
    ahead = LookAhead(plan, sources, prefetcher, max(1, window))
    ahead.start()
    return ahead


def start_look_ahead(
    sampler: Sampler, streams: Mapping[str, DatasetBase], prefetcher: Position
) -> LookAhead | None:
    """A running look-ahead for a DataLoader when a stream reads a remote dataset; else None."""
    sources = _remote_sources(streams)
    if not sources:
        return None

    def plan(step: int) -> Reads:
        indices = np.empty(sampler.batch_size, dtype=np.int64)
        sampler.fill(step, indices)
        return [(source, indices) for source in sources]

    return _start(plan, sources, prefetcher)


def start_mixture_look_ahead(
    sampler: MixtureSampler, sources: Sequence[Mapping[str, DatasetBase]],
    prefetcher: Position,
) -> LookAhead | None:
    """The same for a MixtureLoader: each step's rows go to their own source's datasets."""
    remote = [_remote_sources(streams) for streams in sources]
    if not any(remote):
        return None

    def plan(step: int) -> Reads:
        chosen, indices = sampler.batch(step)
        reads: Reads = []
        for number, caches in enumerate(remote):
            rows = indices[chosen == number]
            if caches and len(rows):
                reads += [(cache, np.ascontiguousarray(rows, dtype=np.int64)) for cache in caches]
        return reads

    return _start(plan, [cache for caches in remote for cache in caches], prefetcher)


class LookAhead:
    """The thread that keeps the steps ahead of the consumer cached (module doc)."""

    def __init__(
        self, plan: Callable[[int], Reads], sources: list[RemoteSource],
        prefetcher: Position, window_bytes: int,
    ) -> None:
        self._plan = plan
        self._sources = sources
        # Held strongly: the compiled Prefetcher takes no weak reference. It does not keep the
        # loader alive (it reaches the loader's maker weakly; ProcessSteps holds a recipe, not
        # the loader), and the loader's finaliser closes it, which ends this thread.
        self._prefetcher = prefetcher
        self._window_bytes = window_bytes
        self._held: dict[int, Reads] = {}  # fetched steps, their records pinned ...
        self._pins: dict[int, list[tuple[RemoteSource, int]]] = {}  # ... by these pins
        self._costs: dict[int, int] = {}
        self._stop = EventFlag()  # a Ctrl-C in close() never leaves it locked
        self._thread = threading.Thread(target=self._run, name="loaderx-look-ahead", daemon=True)
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread: at once when it waits, after its fetch when one is in flight
        (waited for up to JOIN_SECONDS)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_SECONDS)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _position(self) -> int | None:
        prefetcher = self._prefetcher
        if prefetcher.closed:
            return None
        return prefetcher.next_step

    def _run(self) -> None:
        try:
            while True:  # CPython gh-130279: tests/repo/test_interruptible_loops.py
                if self._stop.is_set():
                    break
                position = self._position()
                if position is None or any(source.fetcher.closed for source in self._sources):
                    # A closed dataset fetches nothing again, and the steps that read it
                    # raise in next(): the thread ends rather than poll it until close().
                    return
                self._release_before(position)
                if all(source.fetcher.settled() for source in self._sources):
                    # Everything is cached and nothing was evicted: no step needs fetching,
                    # and nothing held needs a pin. Look again now and then.
                    self._release_before(None)
                    self._stop.wait(SETTLED_POLL_SECONDS)
                    continue
                steps = self._next_steps(position)
                if not steps:
                    self._stop.wait(POLL_SECONDS)
                    continue
                if not self._fetch(steps):
                    self._stop.wait(RETRY_SECONDS)
        finally:
            self._release_before(None)
            nothing = np.empty(0, np.int64)
            for source in self._sources:
                source.fetcher.set_future(nothing, nothing)  # withdraws the published hints

    def _release_before(self, position: int | None) -> None:
        """Unpins the steps the consumer has passed (every step when position is None)."""
        for step in [s for s in self._held if position is None or s < position]:
            self._costs.pop(step, None)
            del self._held[step]
            for source, token in self._pins.pop(step, []):
                source.fetcher.unpin(token)

    def _next_steps(self, position: int) -> list[tuple[int, Reads]]:
        """The next steps to fetch: after the last held one, while the window has room."""
        step = max(max(self._held) + 1, position) if self._held else position
        used = sum(self._costs.values())
        chosen: list[tuple[int, Reads]] = []
        while len(chosen) < STEPS_PER_FETCH and step < position + STEPS_AHEAD_MAX:
            reads = self._plan(step)
            cost = sum(source.fetcher.cost(indices) for source, indices in reads)
            if used + cost > self._window_bytes and (self._held or chosen):
                break
            chosen.append((step, reads))
            self._costs[step] = cost
            used += cost
            step += 1
        return chosen

    def _fetch(self, steps: list[tuple[int, Reads]]) -> bool:
        """Pins and fetches the steps' records; False after a failure (retried later)."""
        wanted: dict[int, tuple[RemoteSource, list[npt.NDArray[np.int64]]]] = {}
        for step, reads in steps:
            self._held[step] = reads
            self._pins[step] = [(source, source.fetcher.pin(indices)) for source, indices in reads]
            for source, indices in reads:
                wanted.setdefault(id(source), (source, []))[1].append(indices)
        self._tell_future()
        try:
            for source, parts in wanted.values():
                source.prefetch(np.concatenate(parts))
        except Exception:
            self.failures += 1
            return False
        return True

    def _tell_future(self) -> None:
        """Gives eviction the steps known ahead: the held window and as many steps past it."""
        if not self._held:
            return
        first, last = min(self._held), max(self._held)
        future: dict[int, tuple[RemoteSource, list[npt.NDArray[np.int64]], list[int]]] = {}
        for step in range(first, last + 1 + (last - first + 1)):
            reads = self._held[step] if step in self._held else self._plan(step)
            for source, indices in reads:
                entry = future.setdefault(id(source), (source, [], []))
                entry[1].append(indices)
                entry[2].append(step)
        for source, parts, steps in future.values():
            numbers = np.repeat(np.asarray(steps, dtype=np.int64), [len(p) for p in parts])
            source.fetcher.set_future(np.concatenate(parts), numbers)


__all__ = ["LookAhead", "Position", "start_look_ahead", "start_mixture_look_ahead"]
