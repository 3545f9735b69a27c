"""Weighted mixtures of datasets as pure functions of (seed, step): MixtureSampler, MixtureLoader.

The records of all steps form one endless stream of positions p = 0, 1, 2, ...; step k's global
batch is positions [k * G, (k + 1) * G) for a global batch of G, and a host with
shard=(index, count) takes the contiguous slice of batch_size positions at index * batch_size,
exactly as the plain Sampler does.

Which source a position reads from: the weights become integer shares n_i of N = 2^24 slots
(largest remainder, every source at least one slot), and position p reads from the source whose
slot range holds r(p) = (A * p + offset(seed)) mod N, where A / N is close to the golden ratio.
That rotation spreads each source evenly over the stream (three-distance theorem), so:

- over every N consecutive positions, source i gets exactly n_i of them, and so the long-run
  share is exactly n_i / N (the weight, rounded to 2^-24);
- in every batch, source i's count stays within a few records of G * w_i (3 up to G = 168,
  2 + log2(G) / 2 beyond; not only in expectation): tests/test_mixture.py checks the deviation
  bound over every step and weight, and that a source whose
  weight gives it less than one record per batch still appears at regular intervals.

How many positions of source i come before p has a closed form (a floor sum, below), so the
t-th record drawn from source i, and so any step, is computed without replaying earlier steps:
resume is exact at any step, on any number of hosts. Within a source, record t reads index
perm_c(t mod L) of cycle c = t // L: every cycle visits each of the source's L records once,
in a fresh order keyed by (seed, source, c), like the cyclic Sampler.

Rows of a batch come grouped by source, in source order (each group is one gather straight into
the batch); shuffle rows yourself if a model cares about order within a batch.

Left interpreted: the per-step work is a handful of vectorised NumPy calls plus one gather per
source and stream.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._loading.loader_arguments import as_int, check_count
from loaderx._loading.loader_shell import Batch, LoaderShell
from loaderx._loading.prefetch import (
    DEPTH_MAX,
    WORKERS_MAX,
    Prefetcher,
    WeakProducer,
    close_when_collected,
    default_workers,
)
from loaderx._loading.sampler import LENGTH_MAX, check_integer, check_shard, check_step

__all__ = ["MixtureLoader", "MixtureSampler", "shares"]

SLOTS_BITS: Final = 24
SLOTS: Final = 1 << SLOTS_BITS
# Odd, and SLOTS * (sqrt(5) - 1) / 2 rounded: the rotation step closest to the golden ratio.
_ROTATION: Final = round(SLOTS * (math.sqrt(5.0) - 1.0) / 2.0) | 1
_U64: Final = (1 << 64) - 1
# Record positions (step * global batch + row) are int64 in the vectorised sampling.
_POSITION_LIMIT: Final = 1 << 63
STEP_END_REASON: Final = "step * global batch size must stay below 2**63"
_ROUNDS: Final = 4
_MULTIPLIERS: Final = (
    0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, 0xD6E8FEB86659FD93
)



def _mix64(value: int) -> int:
    """SplitMix64's finaliser: a well-spread 64-bit hash of an integer."""
    value = (value + 0x9E3779B97F4A7C15) & _U64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _U64
    return value ^ (value >> 31)


def _floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a * i + b) / m) for i in range(n)) for n, a, b >= 0 and m >= 1, in O(log m).

    Whole quotients of a and b are summed directly; what remains is the same sum with the roles
    of a and m exchanged (counting lattice points under the line from the other axis).
    """
    total = 0
    while n > 0:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            break
        n, b = divmod(top, m)
        m, a = a, m
    return total


def _weight(weight: object, position: int) -> float:
    """One weight as a float: TypeError for a str, bytes or bool (float() would take "2", b"2"
    and True without a word), ValueError for a number too large for a float."""
    if isinstance(weight, (str, bytes, bytearray, bool, np.bool_)):
        raise TypeError(f"weights[{position}] must be a number, not {type(weight).__name__}")
    try:
        return float(weight)  # type: ignore[arg-type]
    except OverflowError:
        raise ValueError(
            f"weights[{position}] ({type(weight).__name__}) is too large for a float; weights "
            f"must be finite, > 0 and at most {sys.float_info.max:.4g} (only their ratios count: "
            "scale them down)"
        ) from None
    except TypeError:
        raise TypeError(
            f"weights[{position}] must be a number, not {type(weight).__name__}"
        ) from None


def _float_weights(weights: Sequence[float]) -> list[float]:
    """The weights as floats, each checked (_weight)."""
    return [_weight(weight, position) for position, weight in enumerate(weights)]


def shares(weights: Sequence[float]) -> list[int]:
    """The weights as integer slot counts summing to 2^24; each source gets at least one slot."""
    values = _float_weights(weights)
    if not values:
        raise ValueError("a mixture needs at least one source")
    for position, weight in enumerate(values):
        if not math.isfinite(weight) or weight <= 0.0:
            raise ValueError(
                f"weights[{position}] is {weights[position]!r}; weights must be finite and > 0 "
                "(leave a source out rather than giving it weight 0)"
            )
    total = sum(values)
    if not math.isfinite(total):
        # Finite weights near the float maximum overflow their sum (the shares would then not
        # fill the slots): scale them down first. Sums that do not overflow keep their exact
        # shares, which states already saved name.
        largest = max(values)
        values = [w / largest for w in values]
        total = sum(values)
    quotas = [w / total * SLOTS for w in values]
    result = [max(1, int(q)) for q in quotas]
    # Largest remainder: the slots still free go to the largest fractional parts.
    order = sorted(range(len(values)), key=lambda i: quotas[i] - int(quotas[i]), reverse=True)
    spare = SLOTS - sum(result)
    for i in order[: max(0, spare)]:
        result[i] += 1
    while sum(result) > SLOTS:  # tiny weights were raised to one slot: take back from the largest
        result[max(range(len(result)), key=lambda i: result[i])] -= 1
    return result


class MixtureSampler:
    """(source ids, record indices) of each step's batch over sources of the given lengths.

    batch(step) returns two int64 arrays of batch_size: the source of each row (ascending) and
    the record index within that source. A pure function of (lengths, weights, batch_size *
    shard count, seed, step) and the shard index.
    """

    def __init__(
        self,
        lengths: Sequence[SupportsIndex],
        weights: Sequence[float],
        batch_size: SupportsIndex,
        seed: SupportsIndex = 0,
        shard: tuple[SupportsIndex, SupportsIndex] | None = None,
    ) -> None:
        if len(lengths) != len(weights):
            raise ValueError(f"{len(lengths)} sources but {len(weights)} weights")
        # NumPy integers too (an array of lengths), converted so that states hold plain ints.
        records = [
            check_integer(length, f"source {position}'s length")
            for position, length in enumerate(lengths)
        ]
        for position, length in enumerate(records):
            if not 1 <= length <= LENGTH_MAX:
                raise ValueError(
                    f"source {position} has {length!r} records; each needs >= 1 and <= 2**63"
                )
        # Python and NumPy integers alike, converted and named as DataLoader's Sampler does.
        size = check_integer(batch_size, "batch_size")
        if size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {size!r}")
        key = check_integer(seed, "seed")
        if not 0 <= key <= _U64:
            raise ValueError(f"seed must be an int in [0, 2**64), got {key!r}")
        index, count = check_shard(shard)
        self.lengths = records
        self.weights = _float_weights(weights)
        self.shares = shares(weights)
        self.batch_size = size
        self.seed = key
        self.shard = (index, count)
        self.global_batch_size = size * count
        # Record positions are int64: steps from here on would reach past 2**63 - 1.
        self.step_end = _POSITION_LIMIT // self.global_batch_size
        self._bounds = np.cumsum([0, *self.shares], dtype=np.int64)
        self._offset = _mix64(key) % SLOTS

    def _before(self, position: int, source: int) -> int:
        """How many of positions [0, position) read from source (the floor-sum closed form)."""
        return self._count_below(position, int(self._bounds[source + 1])) - self._count_below(
            position, int(self._bounds[source])
        )

    def _count_below(self, n: int, cut: int) -> int:
        """#{p < n : r(p) < cut}, using
        [r >= cut] = floor((A p + off + N - cut) / N) - floor((A p + off) / N)."""
        at_or_above = _floor_sum(n, SLOTS, _ROTATION, self._offset + SLOTS - cut) - _floor_sum(
            n, SLOTS, _ROTATION, self._offset
        )
        return n - at_or_above

    def _slots(self, first: int) -> npt.NDArray[np.int64]:
        steps = (first % SLOTS + np.arange(self.batch_size, dtype=np.int64)) % SLOTS
        return (steps * _ROTATION + self._offset) % SLOTS

    def _first_position(self, step: int) -> int:
        # The plain Sampler's checks and errors (TypeError for a float or bool, as everywhere
        # a count is taken), then the mixture's own end.
        value = check_step(step)
        if value >= self.step_end:
            raise ValueError(f"step must be < {self.step_end} ({STEP_END_REASON}), got {value}")
        return value * self.global_batch_size + self.shard[0] * self.batch_size

    def counts(self, step: int) -> npt.NDArray[np.int64]:
        """How many rows of this host's batch at step come from each source."""
        slots = self._slots(self._first_position(step))
        sources = np.searchsorted(self._bounds, slots, "right") - 1
        return np.bincount(sources, minlength=len(self.lengths)).astype(np.int64)

    def batch(self, step: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(sources, indices) of this host's rows at step, grouped by source in source order."""
        first = self._first_position(step)
        sources = np.searchsorted(self._bounds, self._slots(first), side="right") - 1
        sources = sources.astype(np.int64)
        counts = np.bincount(sources, minlength=len(self.lengths))
        out_sources = np.repeat(np.arange(len(self.lengths), dtype=np.int64), counts)
        indices = np.empty(self.batch_size, dtype=np.int64)
        row = 0
        for source, count in enumerate(counts.tolist()):
            if count:
                start = self._before(first, source)
                ordinals = np.arange(start, start + count, dtype=np.int64)
                indices[row : row + count] = self._permute(source, ordinals)
                row += count
        return out_sources, indices

    def _permute(self, source: int, ordinals: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Record ordinals -> indices: cycle c = t // L is a keyed permutation of [0, L)."""
        length = self.lengths[source]
        # In uint64: a length of 2**63 does not fit an int64 operand (ordinals are >= 0).
        unsigned = ordinals.astype(np.uint64)
        cycles = unsigned // np.uint64(length)
        values = unsigned % np.uint64(length)
        bits = max(1, (length - 1).bit_length())
        base = _mix64(self.seed ^ _mix64(source + 1))
        keys = _keys(np.uint64(base), cycles)
        values = _bijection(values, keys, bits)
        outside = values >= length
        while outside.any():  # cycle-walking: apply again until the value lands in [0, L)
            values[outside] = _bijection(values[outside], keys[outside], bits)
            outside = values >= length
        return values.astype(np.int64)

    def __reduce__(self) -> tuple[Any, ...]:
        return MixtureSampler, (self.lengths, self.weights, self.batch_size, self.seed, self.shard)


def _keys(base: np.uint64, cycles: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit key per element from (base, cycle): SplitMix64 of their combination."""
    with np.errstate(over="ignore"):
        value = cycles * np.uint64(0x9E3779B97F4A7C15) + base
        value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return value ^ (value >> np.uint64(31))


def _bijection(
    values: npt.NDArray[np.uint64], keys: npt.NDArray[np.uint64], bits: int
) -> npt.NDArray[np.uint64]:
    """A keyed bijection of [0, 2^bits): rounds of odd multiply, key xor and xorshift, each
    invertible modulo 2^bits."""
    mask = np.uint64((1 << bits) - 1)
    shift = np.uint64(max(1, bits // 2))
    x = values.copy()
    with np.errstate(over="ignore"):
        for round_index in range(_ROUNDS):
            x = (x * np.uint64(_MULTIPLIERS[round_index])) & mask
            x ^= (keys >> np.uint64(round_index * 16)) & mask
            x ^= x >> shift
    return x


def _check_sources(sources: Sequence[Mapping[str, DenseDataset]]) -> tuple[list[str], list[int]]:
    """Stream names and per-source lengths; every source has the same names, dtypes and shapes."""
    if isinstance(sources, Mapping) or not isinstance(sources, Sequence) or not sources:
        raise TypeError("sources must be a non-empty list of dicts name -> DenseDataset")
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
            if not isinstance(dataset, DenseDataset):
                raise TypeError(f"source {position} stream {name!r} must be a DenseDataset")
            reference = first[name]
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
    """Computes one step's batch; shared by the worker threads of one MixtureLoader."""

    def __init__(self, loader: MixtureLoader) -> None:
        self.sampler = loader.sampler
        self.sources = loader.sources
        self.names = loader.names
        self.batch_size = loader.batch_size
        self.transform = loader.transform
        self.source_key = loader.source_key

    def make(self, step: int) -> Batch:
        sources, indices = self.sampler.batch(step)
        counts = np.bincount(sources, minlength=len(self.sources)).tolist()
        batch: dict[str, npt.NDArray[Any]] = {}
        for name in self.names:
            reference = self.sources[0][name]
            out = np.empty((self.batch_size, *reference.item_shape), dtype=reference.dtype)
            row = 0
            for source, count in enumerate(counts):
                if count:  # one gather per source, straight into its rows of the batch
                    self.sources[source][name].gather_into(
                        indices[row : row + count], out[row : row + count]
                    )
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


class MixtureLoader(LoaderShell):
    """An endless loader over a weighted mixture of sources; see the module docstring.

    sources: a list of dicts name -> DenseDataset, each with the same stream names, dtypes and
    item shapes. weights: one positive number per source (normalised). Batch k is a pure
    function of (seed, k); prefetch, workers, transform and shard work as in DataLoader, and
    state_dict / load_state_dict checkpoint it. With source_key="source" each batch also holds
    the source of every row under that name.
    """

    def __init__(
        self,
        sources: Sequence[Mapping[str, DenseDataset]],
        weights: Sequence[float],
        batch_size: SupportsIndex = 256,
        transform: Callable[[dict[str, npt.NDArray[Any]]], Batch] | None = None,
        seed: SupportsIndex = 0,
        start_step: SupportsIndex = 0,
        prefetch: SupportsIndex = 4,
        workers: SupportsIndex | None = None,
        shard: tuple[SupportsIndex, SupportsIndex] | None = None,
        source_key: str | None = None,
    ) -> None:
        names, lengths = _check_sources(sources)
        if source_key is not None and source_key in names:
            raise ValueError(f"source_key {source_key!r} is also a stream name")
        self.sampler = MixtureSampler(lengths, weights, batch_size, seed, shard)
        self.sources = [dict(source) for source in sources]
        self.names = names
        self.transform = transform
        self.source_key = source_key
        self.batch_size = self.sampler.batch_size
        self.prefetch = check_count("prefetch", prefetch, DEPTH_MAX)
        self.workers = (
            default_workers(transform is None)
            if workers is None
            else check_count("workers", workers, WORKERS_MAX)
        )
        self._prefetcher = self._start(as_int("start_step", start_step, got="got"))

    def _start(self, step: int) -> Prefetcher[Batch]:
        # The threads hold a maker, not the loader, and only through a weak reference (the
        # maker holds the transform, which may reference the loader's owner), so a dropped
        # loader can be collected.
        self._produce: partial[Batch] = partial(_MixtureMaker(self).make)
        prefetcher: Prefetcher[Batch] = Prefetcher(
            WeakProducer(self._produce), step, self.prefetch, self.workers,
            name="loaderx-mixture", consumer_helps=self.transform is None,
            step_end=self.sampler.step_end, step_end_reason=STEP_END_REASON,
        )
        self._finalizer = close_when_collected(self, prefetcher)
        return prefetcher

    @property
    def seed(self) -> int:
        return self.sampler.seed

    @property
    def steps_per_epoch(self) -> int:
        """Steps per pass over all sources' records: total records // global batch (at least 1)."""
        return max(1, sum(self.sampler.lengths) // self.sampler.global_batch_size)

    def make(self, step: int) -> Batch:
        """The batch of any step (what the worker threads compute)."""
        return _MixtureMaker(self).make(step)

    def fingerprint(self) -> dict[str, Any]:
        return {
            # The lengths sampled from (fixed when the loader was made), not the datasets'
            # lengths now: a dataset that grew since would otherwise pass for the one sampled.
            "lengths": [
                {name: length for name in self.names} for length in self.sampler.lengths
            ],
            "shares": list(self.sampler.shares),
            "global_batch_size": self.sampler.global_batch_size,
            "mode": "mixture",
        }

    def _checkpoint_seed(self) -> int:
        return self.seed

    def _restart(self, seed: int, step: int) -> None:
        sampler = self.sampler
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
        self.sampler = restarted
        self._prefetcher = self._start(step)

    def __len__(self) -> int:
        raise TypeError(
            "a MixtureLoader is endless and has no len(); use steps_per_epoch "
            f"({self.steps_per_epoch} steps here)"
        )
