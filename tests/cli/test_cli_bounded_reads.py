"""The loaderx command reads in bounded pieces: head reads only the rows NumPy shows (dense)
or bounded blocks (ragged, bare stores), info and stats read record sizes in bounded windows,
and head counts with thousands separators."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.cli import EXIT_OK
from loaderx.converter import from_iterator, from_numpy

from cli_cases import run


def test_head_counts_with_thousands_separators(tmp_path: Path) -> None:
    """The count shown used to lack the separator its total has: (1500 of 2,000 records)."""
    values = np.arange(2000, dtype=np.int16)
    from_numpy(tmp_path / "ds", values, codec="raw")
    status, text = run("head", str(tmp_path / "ds"), "-n", "1500")
    assert status == EXIT_OK and text.endswith("\n(1,500 of 2,000 records)\n")
    assert text.startswith("array([   0,    1,    2, ..., 1497, 1498, 1499]")


def _gathered_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of records each native gather of a single store reads from now on."""
    from loaderx.zrecord import Zrecord

    counts: list[int] = []
    dense, ragged = Zrecord.gather_into, Zrecord._gather_ragged

    def gather_into(self: Zrecord, indices: Any, out: Any, record_size: int) -> None:
        counts.append(len(indices))
        dense(self, indices, out, record_size)

    def gather_ragged(self: Zrecord, handle: Any, index: Any) -> Any:
        data, offsets = ragged(self, handle, index)
        counts.append(len(offsets) - 1)
        return data, offsets

    # Zrecord, not the datasets: mypyc-compiled classes cannot be patched.
    monkeypatch.setattr(Zrecord, "gather_into", gather_into)
    monkeypatch.setattr(Zrecord, "_gather_ragged", gather_ragged)
    return counts


@pytest.mark.parametrize("shape, dtype", [
    ((2000,), np.int16), ((50, 28, 28), np.uint8), ((40, 5), np.float64), ((9, 6), np.uint32),
    ((30, 3), np.float32), ((20, 2), np.complex128), ((100, 9), np.bool_), ((7, 10), np.int8),
    ((100, 1), np.int64), ((12, 2, 40), np.float16), ((20, 4), ">i4"),
])
def test_a_dense_head_reads_only_the_rows_numpy_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], dtype: Any
) -> None:
    """`head -n N` gathered all N records to print the 6 that NumPy shows of them (a MemoryError
    for a large N of large records); it reads at most 7 now, and prints byte for byte what
    NumPy prints for the whole head: same columns, same "...", the whole head's shape."""
    rng = np.random.default_rng(3)
    values = (rng.standard_normal(shape) * 1000).astype(dtype)
    from_numpy(tmp_path / "ds", values, codec="raw")
    counts = _gathered_counts(monkeypatch)
    for n in (0, 1, 6, 7, 8, 13, 64, 65, shape[0], 10**9):
        head = values[: min(n, shape[0])]
        with np.printoptions(threshold=64, edgeitems=3, linewidth=100):
            expected = f"{head!r}\n({len(head):,} of {shape[0]:,} records)\n"
        counts.clear()
        assert run("head", str(tmp_path / "ds"), "-n", str(n)) == (EXIT_OK, expected)
        assert sum(counts) <= max(7, 64 // int(np.prod(shape[1:]))), (n, counts)


def test_ragged_and_bare_heads_read_in_bounded_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ragged or bare head gathered all N records at once; it reads about 16 MiB at a time
    now (64 bytes here), with the same output, for a sharded dataset too."""
    from loaderx.cli import stores
    from loaderx.zrecord import Zrecord

    rng = np.random.default_rng(4)
    records = [rng.integers(0, 9, (int(rng.integers(0, 5)), 2), dtype=np.int32)
               for _ in range(60)]
    from_iterator(tmp_path / "ragged", records)
    from_iterator(tmp_path / "sharded", [records[:25], records[25:]], workers=2,
                  shard_records=10)
    blobs = [bytes(rng.integers(0, 3, int(k), dtype=np.uint8)) for k in rng.integers(0, 60, 60)]
    with Zrecord(tmp_path / "bare", create=True, codec="zstd") as store:
        store.append(blobs)
    ragged_lines = [f"[{i}] shape {r.shape}: {np.array2string(r)}\n" for i, r in enumerate(records)]
    bare_lines = [f"[{i}] {b[:48]!r}" + (f"... ({len(b):,} bytes)" if len(b) > 48 else "") + "\n"
                  for i, b in enumerate(blobs)]
    monkeypatch.setattr(stores, "READ_BYTES", 64)
    counts = _gathered_counts(monkeypatch)
    for name, lines, sizes in (("ragged", ragged_lines, [r.nbytes for r in records]),
                               ("sharded", ragged_lines, [r.nbytes for r in records]),
                               ("bare", bare_lines, [len(b) for b in blobs])):
        for n in (0, 1, 59, 60, 10**9):
            shown = min(n, 60)
            counts.clear()
            assert run("head", str(tmp_path / name), "-n", str(n)) == (
                EXIT_OK, "".join(lines[:shown]) + f"({shown:,} of 60 records)\n")
            if name == "sharded":
                continue  # read through the view, not a single store's gathers
            assert sum(counts) == shown
            done = 0
            for count in counts:  # each block: one record, or records of at most 64 bytes
                assert count == 1 or sum(sizes[done : done + count]) <= 64, counts
                done += count


def test_info_and_stats_read_record_sizes_in_bounded_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """info and stats made an array of every record's size (8 bytes a record: 8 GiB for 2^30
    records, even for a dense dataset whose records all have one size); a dense dataset's
    sizes are its record size now, and the others' are read a window at a time."""
    import tracemalloc

    from loaderx.cli import stores
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "dense", np.zeros((1 << 20, 3), np.uint8), codec="raw")
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 4, 1 << 18)
    from_iterator(tmp_path / "ragged", (np.zeros((int(n), 2), np.int16) for n in lengths))
    with Zrecord(tmp_path / "bare", create=True, codec="raw") as store:
        store.append([b"x" * int(n) for n in lengths])
    monkeypatch.setattr(stores, "LENGTH_WINDOW", 1024)
    for name, sizes in (("dense", np.full(1 << 20, 3)), ("ragged", lengths * 4),
                        ("bare", lengths)):
        tracemalloc.start()
        try:
            info = json.loads(run("info", str(tmp_path / name), "--json")[1])
            stats = json.loads(run("stats", str(tmp_path / name), "--json")[1])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, (name, peak)  # 2 MiB and more before
        assert info["logical_bytes"] == int(sizes.sum())
        assert (stats["record_bytes_min"], stats["record_bytes_max"]) == (sizes.min(), sizes.max())
        assert stats["record_bytes_mean"] == round(float(sizes.mean()), 2)
