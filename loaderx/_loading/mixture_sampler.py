"""MixtureSampler: which source and record each row of a mixture's step reads, from (seed, step).

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
  2 + log2(G) / 2 beyond; not only in expectation): tests/loading/test_mixture.py checks the deviation
  bound over every step and weight, and that a source whose
  weight gives it less than one record per batch still appears at regular intervals.

How many positions of source i come before p has a closed form (a floor sum, below), so the
t-th record drawn from source i, and so any step, is computed without replaying earlier steps:
resume is exact at any step, on any number of hosts. Within a source, record t reads index
perm_c(t mod L) of cycle c = t // L: every cycle visits each of the source's L records once,
in a fresh order keyed by (seed, source, c), like the cyclic Sampler.

Rows of a batch come grouped by source, in source order (each group is one gather straight into
the batch); shuffle rows yourself if a model cares about order within a batch.

Left interpreted: the per-step work is a handful of vectorised NumPy calls.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt

from loaderx._loading.sampler import LENGTH_MAX, check_integer, check_shard, check_step

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
    if isinstance(weights, (str, bytes, bytearray)):
        # Sequences too, of characters or of ints: bytes would pass as numbers byte by byte.
        raise TypeError(
            f"weights must be a sequence of numbers, one per source, not {type(weights).__name__}"
        )
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


__all__ = ["SLOTS", "STEP_END_REASON", "MixtureSampler", "shares"]
