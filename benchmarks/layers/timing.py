"""Interleaved timing: every contender of a table is measured round-robin in the same run.

A round gives each contender one block of back-to-back calls lasting about `block_seconds`;
the order rotates from round to round so no contender always runs first (or right after a
noisy neighbour). A contender's figure is the median of its per-call times over the rounds,
so one round disturbed by the other jobs on this shared machine moves nothing; the best
round is kept as well for the JSON. All calls go through the contender's client binding.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Final

Call = Callable[[], object]

BLOCK_SECONDS: Final = 0.2
ROUNDS: Final = 5
# Untimed calls of each contender before the rounds: besides first-touch costs, a store spends
# its first 24 to 32 large gathers trying each way of running them (with or without the pool's
# helpers, with streaming or cached stores, fetching its records non-temporally or not;
# zig/src/os/pool_advice.zig). The tables report the steady state a training run lives in.
WARMUP_CALLS: Final = 40


@dataclass
class Timing:
    """Per-call seconds of one contender, one sample per round."""

    name: str
    samples: list[float] = field(default_factory=list)
    calls: int = 0

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    def as_json(self) -> dict[str, object]:
        return {"median_s": self.median, "best_s": self.best, "rounds": len(self.samples),
                "calls": self.calls, "per_round_s": list(self.samples)}


def run_block(call: Call, block_seconds: float) -> tuple[float, int]:
    """Calls `call` until block_seconds passed (at least once); returns (elapsed, calls)."""
    count = 0
    clock = time.perf_counter
    started = clock()
    deadline = started + block_seconds
    now = started
    while count == 0 or now < deadline:
        call()
        count += 1
        now = clock()
    return now - started, count


def interleave(calls: dict[str, Call], *, rounds: int = ROUNDS,
               block_seconds: float = BLOCK_SECONDS,
               settle: Callable[[str], None] | None = None) -> dict[str, Timing]:
    """Times every call round-robin; `settle(name)` runs after each block, untimed."""
    names = list(calls)
    timings = {name: Timing(name) for name in names}
    if not names:
        return timings
    for name in names:  # warm-up: first-touch costs, lazy imports, caches, the advisors
        for _ in range(WARMUP_CALLS):
            calls[name]()
        if settle is not None:
            settle(name)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            elapsed, count = run_block(calls[name], block_seconds)
            timings[name].samples.append(elapsed / count)
            timings[name].calls += count
            if settle is not None:
                settle(name)
    return timings


def paired(reference: Call, contender: Call, *, pairs: int, block_seconds: float,
           settle: Callable[[], None] | None = None) -> list[float]:
    """The reference's seconds per call over the contender's, once per pair of short blocks
    timed back to back (reference first in even pairs, contender first in odd ones).

    Why: a shared machine's speed drifts over seconds, so two medians taken from blocks a
    few seconds apart differ by more than a small gap between the contenders (the shards
    bench's control, a second handle of the same store, read 0.91x to 1.07x of the first in
    interleaved rounds). Blocks a few milliseconds apart see the same machine, and the median
    of many such ratios keeps that drift out. Both calls must be warm. `settle()` runs after
    each block, untimed (a loader's ring refills there, so each block starts as full).
    """
    def per_call(call: Call) -> float:
        elapsed, count = run_block(call, block_seconds)
        if settle is not None:
            settle()
        return elapsed / count

    ratios: list[float] = []
    for index in range(pairs):
        if index % 2 == 0:
            first = per_call(reference)
            ratios.append(first / per_call(contender))
        else:
            first = per_call(contender)
            ratios.append(per_call(reference) / first)
    return ratios


def time_once(call: Call) -> float:
    """Seconds for one call (used for one-time costs such as writing a store)."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started
