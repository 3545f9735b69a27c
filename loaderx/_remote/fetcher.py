"""Bringing records into the cache: coalesced range reads, many in flight, each record checked
against its checksum before any reader may use it; and eviction when the cache is full.

What is cached: byte ranges of records, in sparse copies of the chunk files (replica.py), not
whole chunks. A chunk is up to 4 GiB and a random batch touches a few hundred records across
it, so whole chunks would fetch and hold mostly bytes nobody asked for; records cost exactly
what training reads. Neighbouring records are fetched in one request (gaps up to GAP_BYTES
are read and thrown away), so a sequential pass still reads large ranges.

Each store of the dataset has a state file, one byte per record (1: its bytes are in the chunk
copy and matched their checksum), shared through the page cache by every process using the
cache folder. The files are mapped by state_maps.py and unmapped by close(): every use of
them holds its lock and checks that the fetcher is not closed. A record becomes present only after its bytes are written; it stops being present
before its blocks are punched; both under the cache gate (cache_gate.py), which a gather holds
shared while it checks presence and copies. Downloads of one store are claimed with an flock
(`<n>.fetch.lock`), so two processes never download the same record: the second waits, then
finds it present.

Pins and the known future are per process, but eviction runs in whichever process needs room;
those a loader's look-ahead gives (set_future) are published to every process of the cache
folder (shared_hints.py), so a worker process that evicts keeps what the consumer's look-ahead
holds, and evicts by its known future.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Final

import numpy as np
# np.unique (missing(), below) imports numpy.ma at its first call. Imported with the fetcher,
# a forked child's first read imports nothing: an import lock that a thread of the parent held
# at the fork stays held in the child for ever.
import numpy.ma  # noqa: F401
import numpy.typing as npt

from loaderx._native.record_sums import record_sums
from loaderx._os.fork_safe_lock import ForkSafeLock
from loaderx._os.lock_descriptors import close_descriptor, open_descriptor
from loaderx._remote.cache_gate import CacheGate
from loaderx._remote.chunk_writers import ChunkWriters
from loaderx._remote.fetch_claims import StoreClaims
from loaderx._remote.eviction import StoreHoles, choose_victims, next_uses, punch_hole
from loaderx._remote.object_store import ObjectStore
from loaderx._remote.arriving_range import ArrivingRange
from loaderx._remote.range_plan import GAP_BYTES, Range as _Range, plan_ranges
from loaderx._remote.range_writes import write_all
from loaderx._remote.record_map import RecordMap, StoreRecords
from loaderx._remote.settings import count_setting
from loaderx._remote.replica import Replica
from loaderx._remote.shared_hints import Hints, SharedHints
from loaderx._remote.state_maps import StateMaps
from loaderx.errors import CorruptStoreError, RemoteError

# With a cache that holds the whole dataset, records this close are fetched together and
# every record the range holds is kept: a pass over the data then costs few large requests
# (a request costs a server far more than its bytes), and no byte is read twice.
ABSORB_GAP_BYTES: Final = 1 << 20
# Requests in flight at once per dataset: enough to fill a link whose latency is far longer
# than one record's transfer (50 MB/s and 20 ms per request need ~80 for 12 KiB records).
REQUESTS_ENV: Final = "LOADERX_REMOTE_REQUESTS"
REQUESTS_IN_FLIGHT: Final = 96
# A range's bytes are handed over in pieces of at least this as they arrive (arriving_range.py).
STREAM_PIECE_BYTES: Final = 256 << 10
# Eviction frees down to this share of the cache, so that it runs once per many fetches.
LOW_WATER: Final = 0.9


# How often begin() looks whether every record is present (a scan of the state files).
_COMPLETE_CHECK_EVERY: Final = 256


class Fetcher:
    """The records of one replica: presence, fetching, pins and eviction (module doc)."""

    def __init__(
        self, objects: ObjectStore, replica: Replica, records: RecordMap, cache_bytes: int
    ) -> None:
        self._objects = objects
        self._replica = replica
        self._map = records
        self._budget = cache_bytes
        self._requests = count_setting(REQUESTS_ENV, REQUESTS_IN_FLIGHT, minimum=1)  # at open
        self._costs = [store.blocks() for store in records.stores]
        self.total_cost = int(sum(int(cost.sum()) for cost in self._costs))
        # The state files (presence, epoch, used count), unmapped by close(): every use holds
        # its lock and checks that it is not closed (state_maps.py).
        self._maps = StateMaps(replica.state, [store.length for store in records.stores])
        try:
            self._gate = CacheGate(os.path.join(replica.state, "gate.lock"))
        except BaseException:
            self._maps.close()
            raise
        # Set first by close(): no new pool, claim or request starts, streams stop.
        self._closing = False
        self._complete_at = -1  # the epoch at which every record was found present
        self._checks = 0
        self._holes: list[StoreHoles | None] = [None] * len(records.stores)
        self._lock = ForkSafeLock()  # guards pins, the future, the pool
        # Pinned index arrays by token (pin() gives one); eviction skips their union.
        self._pins: dict[int, npt.NDArray[np.int64]] = {}
        self._next_pin = 0
        self._future = (np.empty(0, np.int64), np.empty(0, np.int64))
        # The pins and future given with set_future, published to the other processes of the
        # cache folder (worker processes evict too), and theirs read before an eviction.
        self._hints = SharedHints(replica.state)
        self._claims = StoreClaims(replica.state, len(records.stores), self._refuse_if_closing)
        self._writers = ChunkWriters([store.folder for store in records.stores])
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = -1
        # What the present records cost, shared by every process of the cache folder: each
        # adds what it fetches, eviction sets it to its own count. Counting only this process's
        # fetches (from 0 at open) let processes sharing a cache, or one reopening a full one,
        # fill it to the sum of their bounds before any evicted. Counted again at open.
        self._used_lock = os.path.join(replica.state, "used.lock")
        self._absorb = cache_bytes >= self.total_cost
        # Figures for reports and tests: requests sent, bytes received, records fetched.
        self.requests = 0
        self.bytes_fetched = 0
        self.records_fetched = 0
        try:
            with self._maps.lock:
                repair = int(self._maps.epoch[0]) & 1
            if repair:
                self._repair_epoch()
            self._note_if_complete()  # a cache filled by an earlier run
            if cache_bytes < self.total_cost:
                with self._maps.lock:
                    self._maps.used[0] = self._cached_bytes()
        except BaseException:
            self._maps.close()  # a failed open keeps nothing mapped either
            self._gate.close()
            raise

    # --- presence ---------------------------------------------------------------------------

    def _closed_error(self) -> ValueError:
        return ValueError(f"dataset {self._objects.location.url!r} is closed")

    @property
    def closed(self) -> bool:
        """Whether close() has begun: no read or fetch will work again."""
        return self._closing or self._maps.closed

    def _refuse_if_closing(self) -> None:
        if self._closing:
            raise self._closed_error()

    def _check_open(self) -> None:
        """Refuses a use of the state maps once closed (hold their lock)."""
        if self._maps.closed:
            raise self._closed_error()

    def _absent(self, number: int, local: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The records of local (local indices of store number) that are not present."""
        with self._maps.lock:
            self._check_open()
            absent: npt.NDArray[np.int64] = local[self._maps.present[number][local] == 0]
            return absent

    def _valid(self, indices: npt.NDArray[np.int64]) -> bool:
        """Whether every index is in range (otherwise the gather itself refuses them)."""
        return len(indices) == 0 or (int(indices.min()) >= 0 and int(indices.max()) < self._map.length)

    def missing(self, indices: npt.NDArray[np.int64]) -> dict[int, npt.NDArray[np.int64]]:
        """The local indices of `indices` (global, valid) that are not present, by store."""
        with self._maps.lock:
            self._check_open()
            return self._missing(indices)

    def _missing(self, indices: npt.NDArray[np.int64]) -> dict[int, npt.NDArray[np.int64]]:
        """missing(), holding the maps' lock."""
        stores = self._map.stores
        present = self._maps.present
        if len(stores) == 1:
            local = indices[present[0][indices] == 0]
            return {0: np.unique(local)} if len(local) else {}
        found: dict[int, npt.NDArray[np.int64]] = {}
        route = self._map.route(indices)
        for number in np.unique(route).tolist():
            local = indices[route == number] - self._map.starts[number]
            absent = local[present[number][local] == 0]
            if len(absent):
                found[number] = np.unique(absent)
        return found

    # --- the warm path: reads without a lock ----------------------------------------------
    #
    # Eviction bumps a shared counter (state/epoch) to an odd value before it marks a record
    # absent and punches its blocks, and to an even one when it is done. A read that finds the
    # counter even and its records present, gathers, and then finds the counter unchanged, read
    # records that were present the whole time (a seqlock): no flock, no reader count. When the
    # counter moved, the read is done again the careful way (reading()). The native call in
    # between releases and takes back the interpreter's thread state, atomic operations that
    # order the two loads of the counter around the copy on every platform.

    def begin(self, indices: npt.NDArray[np.int64]) -> int:
        """A token for a read of indices without the gate, or -1 when it must take reading()."""
        maps = self._maps
        with maps.lock:
            if maps.closed:
                return -1  # reading() raises
            epoch = int(maps.epoch[0])
            if epoch & 1:
                return -1
            if self._complete_at == epoch:
                return epoch
            try:
                if len(maps.present) == 1:
                    if not maps.present[0][indices].all():
                        return -1
                elif not self._valid(indices) or self._missing(indices):
                    return -1
            except IndexError:
                return -1  # reading() leaves the refusal to the gather
        self._checks += 1
        if self._checks % _COMPLETE_CHECK_EVERY == 0:
            self._note_if_complete()
        return epoch

    def _note_if_complete(self) -> None:
        """Remembers the epoch at which every record is present: begin() then checks nothing
        until an eviction moves the epoch (another process may share the cache)."""
        maps = self._maps
        with maps.lock:
            if maps.closed:
                return
            epoch = int(maps.epoch[0])
            if not epoch & 1 and all(bool(present.all()) for present in maps.present):
                self._complete_at = epoch

    def unchanged(self, token: int) -> bool:
        """Whether no eviction started since begin() gave token (the read stands)."""
        maps = self._maps
        with maps.lock:
            return not maps.closed and int(maps.epoch[0]) == token

    @contextmanager
    def reading(self, indices: npt.NDArray[np.int64]) -> Iterator[None]:
        """Holds the gate shared with every record of indices present, fetching what is not."""
        if self._maps.closed:
            raise self._closed_error()  # before the gate: a closed one opens nothing again
        if not self._valid(indices):
            yield  # the gather refuses the indices itself, before reading a byte
            return
        token = -1
        try:
            while True:
                with self._gate.shared():
                    if not self.missing(indices):
                        yield
                        return
                if token < 0:
                    # The token is ours before the pin is made, so an interrupt as pin()
                    # returns cannot leave a pin that nothing unpins (never evicted again).
                    token = self.new_pin_token()
                    self.pin(indices, token)
                self.fetch(indices)
        finally:
            if token >= 0:
                self.unpin(token)

    # --- pins and the known future ----------------------------------------------------------

    def new_pin_token(self) -> int:
        """A token no pin has used (a number only: dropping it leaves nothing held)."""
        with self._lock:
            token = self._next_pin
            self._next_pin += 1
            return token

    def pin(self, indices: npt.NDArray[np.int64], token: int | None = None) -> int:
        """Keeps the records of indices from eviction until unpin(token); token, when given,
        is one new_pin_token() made."""
        if token is None:
            token = self.new_pin_token()
        with self._lock:
            self._pins[token] = indices
        return token

    def unpin(self, token: int) -> None:
        with self._lock:
            self._pins.pop(token, None)

    def settled(self) -> bool:
        """Whether every record is cached and nothing was evicted since that was seen (the
        look-ahead then has nothing to do)."""
        maps = self._maps
        with maps.lock:
            return maps.closed or self._complete_at == int(maps.epoch[0])

    def cost(self, indices: npt.NDArray[np.int64]) -> int:
        """What the records of indices (global, valid) take in the cache (repeats counted once
        per appearance: an upper bound)."""
        if len(self._costs) == 1:
            return int(self._costs[0][indices].sum())
        route = self._map.route(indices)
        return sum(
            int(self._costs[n][indices[route == n] - self._map.starts[n]].sum())
            for n in np.unique(route).tolist()
        )

    def set_future(self, indices: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]) -> None:
        """What the loader will read: indices[k] at step steps[k] (eviction's next uses).
        Published with the pins held now to every process sharing the cache (shared_hints),
        unless this cache's bound holds the whole dataset (no process of this loader evicts);
        an empty future with no pins withdraws them."""
        with self._lock:
            self._future = (indices, steps)
            held = list(self._pins.values())
        if self._budget >= self.total_cost:
            return
        pinned = np.unique(np.concatenate(held)) if held else np.empty(0, np.int64)
        self._hints.publish(pinned, indices, steps)

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, indices: npt.NDArray[np.int64]) -> None:
        """Makes every record of indices (global, valid) present."""
        wanted = self.missing(indices)
        if not wanted:
            return
        try:
            self._claims.take(sorted(wanted))
            wanted = self.missing(indices)  # another thread or process may have fetched some
            if not wanted:
                return
            self._make_room(sum(int(self._costs[n][local].sum()) for n, local in wanted.items()))
            self._download(self._planned(wanted))
        finally:
            self._claims.drop(threading.get_ident())
        self._note_if_complete()

    def _planned(self, wanted: dict[int, npt.NDArray[np.int64]]) -> Iterator[_Range]:
        """The requests that fetch the wanted records (local indices by store), one store
        after another: the first ones leave while the later stores are planned. With a cache
        that holds the dataset, each range covers the absent records around and between the
        ones asked for (ranges are disjoint: one range's writes change no other's plan)."""
        gap = ABSORB_GAP_BYTES if self._absorb else GAP_BYTES
        for number, asked in wanted.items():
            local = self._neighbourhood(number, asked) if self._absorb else asked
            for piece in plan_ranges(number, self._map.stores[number], local, gap):
                yield self._whole(piece, asked) if self._absorb else piece

    def _neighbourhood(self, number: int, local: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """local and every absent record between them, or within ABSORB_GAP_BYTES of them, in
        each chunk they touch: the ranges then cover the stretch without holes, so no later
        request comes back for a record between two of them."""
        entries = self._map.stores[number].entries
        holes = self._store_holes(number)
        found = [local]
        chunks = entries["chunk"][local].astype(np.int64)
        for chunk in np.unique(chunks).tolist():
            mine = local[chunks == chunk]
            start = max(0, int(entries["offset"][mine].min()) - ABSORB_GAP_BYTES)
            end = int((entries["offset"][mine].astype(np.int64) + entries["stored"][mine]).max())
            inside = holes.within(chunk, start, end + ABSORB_GAP_BYTES)
            found.append(self._absent(number, inside))
        return np.unique(np.concatenate(found))

    def _whole(self, piece: _Range, asked: npt.NDArray[np.int64]) -> _Range:
        """piece with every absent record lying wholly inside its bytes (module doc); the ones
        not in asked are its extra records."""
        inside = self._store_holes(piece.store).within(piece.chunk, piece.start, piece.end)
        absent = self._absent(piece.store, inside)
        records = np.union1d(piece.records, absent)
        extra = np.setdiff1d(records, asked)
        return _Range(piece.store, piece.chunk, piece.start, piece.end, records, extra)

    def _store_holes(self, number: int) -> StoreHoles:
        holes = self._holes[number]
        if holes is None:
            holes = self._holes[number] = StoreHoles(self._map.stores[number])
        return holes

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            self._refuse_if_closing()
            if self._pool is None or self._pool_pid != os.getpid():
                self._pool = ThreadPoolExecutor(self._requests, thread_name_prefix="loaderx-fetch")
                self._pool_pid = os.getpid()
            return self._pool

    def _download(self, ranges: Iterable[_Range]) -> None:
        """Fetches the ranges, each sent as soon as it is planned and checked and written by a
        pool thread as it arrives; after a failure (or one planning them), waits for the
        ranges under way (the caller's claims cover their writes), drops those not started,
        and raises the first failure in the ranges' order."""
        pool = self._executor()
        futures: list[Future[None]] = []
        try:
            for piece in ranges:
                try:
                    futures.append(pool.submit(self._fetch_range, piece))
                except RuntimeError:
                    # close() shut the pool down while the later ranges were being planned:
                    # the pool refuses them ("cannot schedule new futures after shutdown"),
                    # which is the closed dataset's error for the read.
                    if self._closing:
                        raise self._closed_error() from None
                    raise
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            # A future cancel() stopped never runs, and wait() would not count it as done:
            # concurrent.futures tells waiters of a cancellation only when a pool thread
            # dequeues the item. Only the ones that could not be stopped are waited for.
            wait([future for future in futures if not future.cancel()])
        for future in futures:
            error = None if future.cancelled() else future.exception()
            if error is not None:
                raise error

    def _chunk_etag(self, name: str) -> str | None:
        found = self._replica.chunks.get(name)
        if found is None:
            raise CorruptStoreError(
                f"{self._objects.location.child(name)} is named by the dataset's table but was "
                "not listed when it was opened"
            )
        return found.etag

    def _fetch_range(self, piece: _Range) -> None:
        """Downloads a range, checking and writing its records while the rest of it arrives
        (arriving_range.py), each made present once checked and written."""
        self._refuse_if_closing()  # queued before close(): it sends no request
        store = self._map.stores[piece.store]
        name = store.chunk_object(piece.chunk)
        etag = self._chunk_etag(name)
        entries = store.entries[piece.records]
        arriving = ArrivingRange(piece.start, piece.end - piece.start,
                                 entries["offset"].astype(np.uint64) - np.uint64(piece.start),
                                 entries["stored"].astype(np.uint64))
        fd = self._writers.descriptor(piece.store, piece.chunk)
        first_epoch: int | None = None
        if arriving.size:
            for part in self._objects.stream_range(name, piece.start, piece.end, etag,
                                                   STREAM_PIECE_BYTES):
                self._refuse_if_closing()  # close() waits for this thread
                arriving.add(part)
                stop = arriving.next_stop()
                if stop is not None:
                    first_epoch = self._settle(piece, arriving, stop, fd, first_epoch)
        else:  # records of no bytes: nothing to ask the server for
            stop = arriving.next_stop()
            if stop is not None:
                self._settle(piece, arriving, stop, fd, first_epoch)
        with self._lock:
            self.requests += 1 if arriving.size else 0
            self.bytes_fetched += arriving.size

    def _settle(self, piece: _Range, arriving: ArrivingRange, stop: int, fd: int,
                first_epoch: int | None) -> int:
        """One step of an arriving range: checks the records it completes, writes its bytes
        and marks the records present. Returns the eviction counter at the range's first step
        (first_epoch: None before it): when it moved, an eviction may have punched bytes
        written by an earlier step, and completed records are written whole again."""
        store = self._map.stores[piece.store]
        completing = arriving.completed_by(stop)
        good = completing
        if store.sums is not None and len(completing):
            records = piece.records[completing]
            entries = store.entries[records]
            offsets = entries["offset"].astype(np.uint64) - np.uint64(piece.start)
            sums = record_sums(arriving.buffer.data, offsets, entries["stored"],
                               entries["logical"], entries["codec"])
            bad = sums != store.sums[records]
            if bad.any():
                # Absorbed records that fail are left out (a read of them fetches and reports).
                asked_bad = np.flatnonzero(bad & ~np.isin(records, piece.extra))
                if len(asked_bad):
                    index = int(records[asked_bad[0]])
                    raise RemoteError(
                        f"record {index} of {self._objects.location.child(store.chunk_object(piece.chunk))} "
                        f"does not match its checksum ({len(asked_bad)} of {len(piece.records)} "
                        f"records in bytes {piece.start}..{piece.end}); the object is damaged or "
                        "was changed"
                    )
                good = completing[~bad]
        view = arriving.buffer.data
        maps = self._maps
        with self._gate.shared():
            with maps.lock:
                self._check_open()
                epoch = int(maps.epoch[0])
            rewrite = first_epoch is not None and epoch != first_epoch
            try:
                for start, end in arriving.spans(stop, good, rewrite):
                    write_all(fd, view[start:end], piece.start + start)
            except OSError as exc:
                # A full disk said only "No space left on device": name the cache file.
                path = os.path.join(store.folder, f"{piece.chunk}.zr")
                raise OSError(exc.errno, f"{exc.strerror or exc} (writing fetched records into "
                              "the cache)", path) from exc
            with maps.lock:
                self._check_open()
                maps.present[piece.store][piece.records[good]] = 1
                if self._budget < self.total_cost:  # inside the gate: eviction sets the count
                    self._count_used(int(self._costs[piece.store][piece.records[good]].sum()))
        arriving.settle(stop, completing)
        with self._lock:
            self.records_fetched += len(good)
        return epoch if first_epoch is None else first_epoch

    def _count_used(self, cost: int) -> None:
        """Adds to the shared cost of the present records: an flock orders the read-modify-
        writes of the processes, the lock those of this process's threads. Holds the maps'
        lock."""
        with self._lock:
            fd = open_descriptor(self._used_lock, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._maps.used[0] += np.uint64(cost)
            finally:
                close_descriptor(fd)

    # --- verify ---------------------------------------------------------------------------

    def check_everything(self, window_bytes: int) -> tuple[int, list[int]]:
        """Downloads every record, window by window, and compares it with its checksum without
        keeping it (verify must not flush the cache of a training job). Returns how many
        records had a checksum to compare with, and the global indices that did not match."""
        checked = 0
        bad: list[int] = []
        for number, store in enumerate(self._map.stores):
            if store.sums is None or store.length == 0:
                continue
            checked += store.length
            everything = np.arange(store.length, dtype=np.int64)
            pending: list[_Range] = []
            pending_bytes = 0
            for piece in plan_ranges(number, store, everything):
                pending.append(piece)
                pending_bytes += piece.end - piece.start
                if pending_bytes >= window_bytes:
                    bad += self._check_ranges(pending)
                    pending, pending_bytes = [], 0
            bad += self._check_ranges(pending)
        return checked, sorted(bad)

    def _check_ranges(self, ranges: list[_Range]) -> list[int]:
        """One window's ranges. Interrupted (Ctrl-C, a failure), the ranges not started are
        cancelled (only this thread waits for them): they ran on, and close() waited for the
        whole window (with the store down, each request's retry budget in turn)."""
        pool = self._executor()
        futures = [(piece, pool.submit(self._verify_range, piece)) for piece in ranges]
        bad: list[int] = []
        try:
            for piece, future in futures:
                store = self._map.stores[piece.store]
                assert store.sums is not None
                entries = store.entries[piece.records]
                offsets = entries["offset"].astype(np.uint64) - np.uint64(piece.start)
                sums = record_sums(future.result(), offsets, entries["stored"],
                                   entries["logical"], entries["codec"])
                wrong = piece.records[sums != store.sums[piece.records]]
                bad += (wrong + int(self._map.starts[piece.store])).tolist()
        except BaseException:
            for _, future in futures:
                future.cancel()
            raise
        return bad

    def _verify_range(self, piece: _Range) -> bytes:
        self._refuse_if_closing()  # queued before close(): it sends no request (_fetch_range)
        name = self._map.stores[piece.store].chunk_object(piece.chunk)
        return self._objects.get_range(name, piece.start, piece.end, self._chunk_etag(name))

    # --- eviction ---------------------------------------------------------------------------

    def _make_room(self, incoming: int) -> None:
        """Frees cache space for `incoming` bytes by Belady's rule (eviction.py)."""
        maps = self._maps
        if self._budget >= self.total_cost:
            return
        with maps.lock:
            self._check_open()
            if int(maps.used[0]) + incoming <= self._budget:
                return
        with self._gate.exclusive():  # no fetch adds to the count meanwhile
            others = self._hints.others()
            with maps.lock:  # close() waits for the eviction: it leaves no half-punched record
                self._check_open()
                used = self._cached_bytes()
                if used + incoming <= self._budget:
                    maps.used[0] = used
                    return
                to_free = used + incoming - int(self._budget * LOW_WATER)
                with self._evicting():
                    freed = self._evict(to_free, others)
                maps.used[0] = used - freed

    @contextmanager
    def _evicting(self) -> Iterator[None]:
        """The epoch odd while records may disappear (begin()); only under the exclusive gate,
        holding the maps' lock. An odd epoch found here was left by an evictor that died: made
        even first."""
        epoch = self._maps.epoch
        if int(epoch[0]) & 1:
            epoch[0] += 1
        epoch[0] += 1
        try:
            yield
        finally:
            epoch[0] += 1

    def _repair_epoch(self) -> None:
        """An odd epoch with nobody evicting (the exclusive gate is ours): an evictor died
        mid-eviction; its records are absent or present as the state files say, and the
        epoch becomes even so that reads take the warm path again."""
        with self._gate.exclusive(), self._maps.lock:
            if not self._maps.closed and int(self._maps.epoch[0]) & 1:
                self._maps.epoch[0] += 1

    def _evict(self, to_free: int, others: Hints) -> int:
        """Drops records worth to_free bytes; others: the other processes' hints. Holds the
        maps' lock."""
        other_pinned, other_indices, other_ahead = others
        candidates, costs = self._candidates(other_pinned)
        if len(candidates) == 0:
            return 0
        with self._lock:
            future_indices, future_steps = self._future
        # Ours and the other processes' futures, each as steps ahead of its first step.
        if len(future_steps):
            future_steps = future_steps - int(future_steps.min())
        if len(other_indices):
            future_indices = np.concatenate([future_indices, other_indices])
            future_steps = np.concatenate([future_steps, other_ahead])
        uses = next_uses(candidates, future_indices, future_steps)
        victims = choose_victims(candidates, costs, uses, to_free)
        route = self._map.route(victims)
        freed = 0
        for number in np.unique(route).tolist():
            local = victims[route == number] - self._map.starts[number]
            self._maps.present[number][local] = 0
            freed += int(self._costs[number][local].sum())
            self._punch(number, local, self._maps.present[number])
        return freed

    def _candidates(
        self, other_pinned: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Present records nobody has pinned, here or in another process (global indices),
        and their costs."""
        with self._lock:
            held = list(self._pins.values())
        held.append(other_pinned)
        pinned = np.unique(np.concatenate(held))
        found: list[npt.NDArray[np.int64]] = []
        costs: list[npt.NDArray[np.int64]] = []
        for number in range(len(self._maps.present)):
            local = np.flatnonzero(self._maps.present[number]).astype(np.int64)
            found.append(local + self._map.starts[number])
            costs.append(self._costs[number][local])
        candidates = np.concatenate(found) if found else np.empty(0, np.int64)
        cost = np.concatenate(costs) if costs else np.empty(0, np.int64)
        free = ~np.isin(candidates, pinned)
        return candidates[free], cost[free]

    def _punch(self, number: int, local: npt.NDArray[np.int64], state: npt.NDArray[np.uint8]) -> None:
        for chunk, start, end in self._store_holes(number).freed(local, state):
            path = os.path.join(self._map.stores[number].folder, f"{chunk}.zr")
            punch_hole(self._writers.descriptor(number, chunk), start, end, path)

    def cached_bytes(self) -> int:
        """What the present records cost in the cache now (blocks, see record_map); 0 once
        closed."""
        with self._maps.lock:
            return 0 if self._maps.closed else self._cached_bytes()

    def _cached_bytes(self) -> int:
        """cached_bytes(), holding the maps' lock."""
        present = self._maps.present
        return sum(int(cost[present[n] != 0].sum()) for n, cost in enumerate(self._costs))

    def close(self) -> None:
        """Stops every fetch of this process and releases the cache folder's files: nothing
        stays mapped or open. A look-ahead still running finds the fetcher closed."""
        with self._lock:
            self._closing = True  # no new pool, claim or request; streams stop at a piece
            pool, self._pool = self._pool, None
        self._hints.close()
        if pool is not None and self._pool_pid == os.getpid():
            # Not cancel_futures: a future cancelled there never tells the thread waiting for
            # it in _download (concurrent.futures wakes waiters of a cancelled future only
            # from a pool thread), which then waits for ever. The queued ranges run instead
            # and each raises the closed error before its request (_fetch_range).
            pool.shutdown(wait=True)
        self._claims.wait_idle()  # the fetches holding claims (their flock descriptors)
        self._maps.close()
        self._writers.close()
        self._gate.close()

__all__ = ["Fetcher", "GAP_BYTES", "plan_ranges"]
