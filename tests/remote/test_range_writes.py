"""A fetched range's records reach the chunk file as one write per run of touching records, with
exactly their bytes: the gaps between runs stay holes (another record may live there)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from loaderx._remote.range_writes import adjacent_runs, write_all  # the module under test


def runs(offsets: list[int], lengths: list[int]) -> list[tuple[int, int]]:
    return list(adjacent_runs(np.array(offsets, np.uint64), np.array(lengths, np.uint64)))


def test_touching_records_make_one_run_and_gaps_split_runs() -> None:
    assert runs([0, 10, 25], [10, 15, 5]) == [(0, 30)]
    assert runs([0, 10, 40, 50], [10, 20, 10, 1]) == [(0, 30), (40, 51)]
    assert runs([0, 12], [10, 4]) == [(0, 10), (12, 16)]


def test_empty_records_and_no_records_write_nothing() -> None:
    assert runs([], []) == []
    assert runs([5, 5], [0, 0]) == []
    # An empty record between two touching ones neither splits nor extends their run.
    assert runs([0, 8, 8], [8, 0, 8]) == [(0, 16)]


def test_records_out_of_offset_order_are_each_written_once() -> None:
    spans = runs([20, 0, 10], [10, 10, 10])
    covered = sorted(b for start, stop in spans for b in range(start, stop))
    assert covered == list(range(30))


def test_the_runs_write_exactly_the_records_bytes_and_leave_the_gaps(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    offsets, lengths = [0, 100, 300, 400], [100, 50, 100, 24]
    path = tmp_path / "chunk"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 2048)
        for start, stop in runs(offsets, lengths):
            write_all(fd, memoryview(data)[start:stop], 1000 + start)
    finally:
        os.close(fd)
    got = path.read_bytes()
    want = bytearray(2048)
    for offset, length in zip(offsets, lengths):
        want[1000 + offset:1000 + offset + length] = data[offset:offset + length]
    assert got == bytes(want)
