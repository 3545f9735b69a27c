"""The bench's paired timing (benchmarks/layers/timing.py): each pair times the two calls back
to back, alternating which goes first, and gives the reference's time per call over the
contender's. A fake clock makes every figure exact."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.layers import timing  # noqa: E402


class FakeClock:
    """perf_counter for timing: each call advances it by its own cost."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_pairs_alternate_and_give_the_reference_over_the_contender(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)  # what timing.run_block reads
    order: list[str] = []
    unit = 1 / 1024  # binary fractions: every sum below is exact

    def reference() -> None:
        order.append("r")
        clock.now += 2 * unit

    def contender() -> None:
        order.append("c")
        # Twice as slow as the reference in the first three pairs, then twice as fast.
        clock.now += 4 * unit if len(order) <= 18 else unit

    ratios = timing.paired(reference, contender, pairs=4, block_seconds=8 * unit)
    # Each block runs whole calls until its 8 units passed: 4 of the reference, 2 of the slow
    # contender, 8 of the fast one; the first call of the pair alternates.
    assert "".join(order) == "rrrrcc" "ccrrrr" "rrrrcc" "cccccccc" "rrrr"
    assert ratios == [0.5, 0.5, 0.5, 2.0]


def test_settle_runs_after_every_block_and_is_not_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    order: list[str] = []
    unit = 1 / 1024

    def reference() -> None:
        order.append("r")
        clock.now += unit

    def contender() -> None:
        order.append("c")
        clock.now += 2 * unit

    def settle() -> None:  # a loader refilling its ring: time passes, untimed
        order.append("|")
        clock.now += 100 * unit

    ratios = timing.paired(reference, contender, pairs=2, block_seconds=4 * unit, settle=settle)
    assert "".join(order) == "rrrr|cc|" "cc|rrrr|"
    assert ratios == [0.5, 0.5]
