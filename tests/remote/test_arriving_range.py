"""A range settled while it arrives (loaderx/_remote/arriving_range.py): fed in pieces of any
size, its steps write exactly the records' bytes, each once, never a gap; each record is
completed once, by the first step that has all its bytes; steps end at aligned offsets of the
file, so a whole aligned stretch of touching records is one write; with rewrite, a completed
record is written from its own start."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._remote.arriving_range import ArrivingRange  # the module under test

ALIGN = 64


def layout(rng: np.random.Generator, count: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64], int]:
    """Records in offset order with gaps of 0..30 bytes (mostly touching), lengths 0..150."""
    lengths = rng.integers(0, 150, count)
    gaps = np.where(rng.random(count) < 0.7, 0, rng.integers(1, 30, count))
    offsets = np.cumsum(gaps + np.concatenate(([0], lengths[:-1])))
    size = int(offsets[-1] + lengths[-1] + rng.integers(0, 20))
    return offsets.astype(np.uint64), lengths.astype(np.uint64), size


def feed(arriving: ArrivingRange, data: bytes, cuts: list[int], bad: set[int],
         image: npt.NDArray[np.int64]) -> tuple[list[int], list[tuple[int, int]], dict[int, int]]:
    """Feeds data cut at `cuts`, settling every step as the fetcher does (records in `bad`
    fail their check); image counts the writes of each byte. Returns the steps' stops, every
    span written, and the stop that completed each record."""
    stops: list[int] = []
    spans: list[tuple[int, int]] = []
    completed_at: dict[int, int] = {}
    for first, last in zip([0, *cuts], [*cuts, len(data)]):
        arriving.add(memoryview(data)[first:last])
        stop = arriving.next_stop()
        if stop is None:
            continue
        assert stop <= arriving.received
        completing = arriving.completed_by(stop)
        for record in completing.tolist():
            assert record not in completed_at
            completed_at[record] = stop
        good = np.array([r for r in completing.tolist() if r not in bad], dtype=np.int64)
        step_spans = arriving.spans(stop, good, rewrite=False)
        for start, end in step_spans:
            assert arriving.settled <= start < end <= stop
            assert bytes(arriving.buffer[start:end]) == data[start:end]
            image[start:end] += 1
        spans += step_spans
        arriving.settle(stop, completing)
        stops.append(stop)
    return stops, spans, completed_at


@pytest.mark.parametrize("seed", range(40))
def test_pieces_of_any_size_write_every_record_once_and_no_gap(seed: int) -> None:
    rng = np.random.default_rng(seed)
    offsets, lengths, size = layout(rng, int(rng.integers(1, 40)))
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    start = int(rng.integers(0, 3 * ALIGN))  # where the range lies in its chunk file
    cuts = sorted(set(rng.integers(1, max(2, size), int(rng.integers(0, 12))).tolist()) - {size})
    bad = set(rng.choice(len(offsets), min(len(offsets), int(rng.integers(0, 3))), replace=False).tolist())
    arriving = ArrivingRange(start, size, offsets, lengths, align=ALIGN)
    image = np.zeros(size, dtype=np.int64)
    stops, spans, completed_at = feed(arriving, data, cuts, bad, image)

    ends = (offsets + lengths).astype(np.int64)
    assert sorted(completed_at) == list(range(len(offsets)))  # every record, once
    for record, stop in completed_at.items():
        # By the first step that had all its bytes: no earlier step reached its end.
        assert ends[record] <= stop
        assert all(s < ends[record] for s in stops[:stops.index(stop)])
    assert stops[-1] == size and stops == sorted(stops)
    assert all((start + stop) % ALIGN == 0 for stop in stops[:-1])  # aligned, but the last
    # Every byte of a record that passed is written exactly once; nothing else twice; no gap.
    inside = np.zeros(size, dtype=bool)
    for offset, end in zip(offsets.astype(np.int64).tolist(), ends.tolist()):
        inside[offset:end] = True
    assert image.max(initial=0) <= 1 and not image[~inside].any()
    for record in set(range(len(offsets))) - bad:
        assert image[int(offsets[record]):int(ends[record])].all()
    # A span starts at a step's start or where records start after a gap, and ends at a
    # step's end or where they stop: an aligned stretch of touching records is one write.
    edges = {0, *stops} | {int(o) for o in offsets} | set(ends.tolist())
    assert all(s in edges and e in edges for s, e in spans)


def test_an_aligned_stretch_of_touching_records_is_one_write() -> None:
    # Records of 48 bytes touching each other from offset 0 of the file, fed 10 bytes at a time.
    offsets = np.arange(0, 480, 48, dtype=np.uint64)
    lengths = np.full(10, 48, dtype=np.uint64)
    data = bytes(range(256)) + bytes(224)
    arriving = ArrivingRange(0, 480, offsets, lengths, align=ALIGN)
    image = np.zeros(480, dtype=np.int64)
    stops, spans, _ = feed(arriving, data, list(range(10, 480, 10)), set(), image)
    assert stops == [64, 128, 192, 256, 320, 384, 448, 480]
    assert spans == [(0, 64), (64, 128), (128, 192), (192, 256), (256, 320), (320, 384),
                     (384, 448), (448, 480)]


def test_a_record_crossing_a_step_is_written_in_part_then_completed() -> None:
    offsets = np.array([0, 40], dtype=np.uint64)
    lengths = np.array([40, 60], dtype=np.uint64)  # the second crosses 64
    arriving = ArrivingRange(0, 100, offsets, lengths, align=ALIGN)
    arriving.add(memoryview(bytes(70)))
    assert arriving.next_stop() == 64
    assert arriving.completed_by(64).tolist() == [0]
    assert arriving.spans(64, np.array([0]), rewrite=False) == [(0, 64)]  # the crossing head too
    arriving.settle(64, np.array([0]))
    assert arriving.next_stop() is None  # 70 bytes reach no further boundary
    arriving.add(memoryview(bytes(30)))
    assert arriving.next_stop() == 100
    assert arriving.completed_by(100).tolist() == [1]
    assert arriving.spans(100, np.array([1]), rewrite=False) == [(64, 100)]
    # After an eviction between the steps (which may have punched the head), it is written
    # whole again.
    assert arriving.spans(100, np.array([1]), rewrite=True) == [(40, 100)]


def test_a_record_that_fails_is_not_written_at_its_step() -> None:
    offsets = np.array([0, 10, 20], dtype=np.uint64)
    lengths = np.array([10, 10, 10], dtype=np.uint64)
    arriving = ArrivingRange(0, 30, offsets, lengths, align=ALIGN)
    arriving.add(memoryview(bytes(30)))
    assert arriving.next_stop() == 30
    assert arriving.completed_by(30).tolist() == [0, 1, 2]
    assert arriving.spans(30, np.array([0, 2]), rewrite=False) == [(0, 10), (20, 30)]


def test_empty_records_and_an_empty_range_complete_at_once() -> None:
    arriving = ArrivingRange(7, 0, np.array([0, 0], np.uint64), np.array([0, 0], np.uint64))
    assert arriving.next_stop() == 0
    assert arriving.completed_by(0).tolist() == [0, 1]
    assert arriving.spans(0, np.array([0, 1]), rewrite=False) == []
    arriving.settle(0, np.array([0, 1]))
    assert arriving.next_stop() is None


def test_more_bytes_than_the_range_or_a_record_outside_it_is_refused() -> None:
    arriving = ArrivingRange(0, 4, np.array([0], np.uint64), np.array([4], np.uint64))
    with pytest.raises(ValueError, match="5 bytes for a range of 4"):
        arriving.add(memoryview(bytes(5)))
    with pytest.raises(ValueError, match="outside the range"):
        ArrivingRange(0, 4, np.array([2], np.uint64), np.array([4], np.uint64))
