"""The record-size sweep (part of the store layer): small records must be as fast as large ones.

For each record size from 8 B to 1 MiB, one data set of `--sweep-mib` MiB of random bytes
(fewer records at 8 B, where a store's 2^24-record limit caps it) is held twice: as a .npy file
read through a NumPy memmap and as a raw loaderx DenseDataset. Both are far larger than the CPU
caches, and the page cache is warm. Every contender gathers the same random batches of
`--batch` records (with replacement), round-robin in the same run. There are enough distinct
batches for one pass through them to touch 256 MiB of records (at most 32768 batches), so the
records of small sizes do not simply stay in the CPU caches from one pass to the next:

- `numpy a[idx]`: fancy indexing on the memmap, a fresh result: the reference of `ds[idx]`;
- `np.take raise`: `np.take(a, idx, axis=0, out=out)` with the default mode='raise', which
  checks every index and leaves `out` untouched on a bad one (NumPy buffers `out` for that),
  the same guarantees as loaderx's: the reference of `gather_into`;
- `np.take clip`: the same with mode='clip' (no check, no buffering), shown for information;
- loaderx `ds[idx]` and `ds.gather_into(idx, out)`.

A second table gives the Python time per call above the native call: the median time of
`ds.gather_into` and of `ds[idx]` (minus a bare `np.empty` of the result) less the median
time of the native call the fast path makes (`lx_store_gather_arrays`, see
loaderx/array_fields.py) called straight through ctypes with its arguments prepared, for the
same batches of 8-byte records.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Callable

import numpy as np

from . import report, stores, timing
from .report import Column, Report, Table

MIB = float(1 << 20)
SIZES = (8, 64, 256, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)
TINY_SIZES = (8, 4 << 10)
RECORD_COUNT_MAX = 1 << 24
BATCH_COUNT_MIN, BATCH_COUNT_MAX = 64, 32768
TOUCHED_BYTES = 256 << 20  # records one pass through the batches reads
FANCY, TAKE, CLIP, READ, INTO = ("numpy a[idx]", "np.take raise", "np.take clip",
                                 "loaderx ds[idx]", "loaderx gather_into")


def columns() -> list[Column]:
    return [
        Column("size", "record", report.text),
        Column("records", "records", report.text),
        Column(FANCY, FANCY, report.duration),
        Column(READ, "ds[idx]", report.duration),
        Column("read_vs_fancy", "vs a[idx]", report.ratio),
        Column(TAKE, TAKE, report.duration),
        Column(INTO, "gather_into", report.duration),
        Column("into_vs_take", "vs take", report.ratio),
        Column(CLIP, CLIP, report.duration),
    ]


def size_name(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def base_file(folder: Path, total: int) -> Path:
    """One .npy of `total` random bytes; every record size reads it with its own shape."""
    path = folder / "base.npy"
    base = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(total,))
    rng = np.random.default_rng(0)
    step = 64 << 20
    for start in range(0, total, step):
        stop = min(total, start + step)
        base[start:stop] = rng.integers(0, 256, size=stop - start, dtype=np.uint8)
    base.flush()
    del base
    return path


def cycling(call: Callable[[np.ndarray], object], batches: list[np.ndarray]) -> timing.Call:
    pool = itertools.cycle(batches)
    return lambda: call(next(pool))


def one_size(size: int, base: np.ndarray, folder: Path, args: argparse.Namespace,
             ) -> tuple[dict[str, object], dict[str, timing.Timing] | None]:
    from loaderx.dataset import DenseDataset

    count = min(RECORD_COUNT_MAX, base.shape[0] // size)
    array = base[: count * size].reshape(count, size)
    path = folder / f"loaderx-{size}"
    stores.remove(path)
    dataset = DenseDataset(str(path), dtype=np.uint8, item_shape=(size,), codec="raw")
    step = max(1, (64 << 20) // size)
    for start in range(0, count, step):
        dataset.append(np.asarray(array[start : start + step]))
    rng = np.random.default_rng(1)
    wanted = -(-TOUCHED_BYTES // (args.batch * size))
    batch_count = min(BATCH_COUNT_MAX, max(BATCH_COUNT_MIN, wanted))
    batches = [rng.integers(0, count, args.batch) for _ in range(batch_count)]
    plain = np.asarray(array)  # np.take on the memmap's plain ndarray view
    out = np.empty((args.batch, size), dtype=np.uint8)
    for batch in batches[:2]:
        if not np.array_equal(dataset[batch], array[batch]):
            raise AssertionError(f"loaderx returned other bytes than the .npy at {size} B")
    calls = {
        FANCY: cycling(lambda i: array[i], batches),
        TAKE: cycling(lambda i: np.take(plain, i, axis=0, out=out), batches),
        CLIP: cycling(lambda i: np.take(plain, i, axis=0, out=out, mode="clip"), batches),
        READ: cycling(lambda i: dataset[i], batches),
        INTO: cycling(lambda i: dataset.gather_into(i, out), batches),
    }
    overhead = overhead_calls(dataset, batches, out) if size == SIZES[0] else {}
    timings = timing.interleave({**calls, **overhead}, rounds=args.rounds,
                                block_seconds=args.block)
    dataset.close()
    stores.remove(path)
    row: dict[str, object] = {"size": size_name(size), "size_bytes": size, "records": count}
    for name in calls:
        row[name] = timings[name].median
        row[f"{name} timing"] = timings[name].as_json()
    row["read_vs_fancy"] = timings[FANCY].median / timings[READ].median
    row["into_vs_take"] = timings[TAKE].median / timings[INTO].median
    return row, (timings if overhead else None)


def overhead_calls(dataset: object, batches: list[np.ndarray], out: np.ndarray
                   ) -> dict[str, timing.Call]:
    """The native call the fast path makes, its arguments prepared, and an empty result, for
    the overhead table."""
    from loaderx._native import library as _native
    from loaderx._native import array_fields
    from loaderx._native import calls as native_calls

    store = dataset.store  # type: ignore[attr-defined]
    handle = store._handle  # noqa: SLF001 - the bench reaches past the API
    size = int(out.shape[1])
    count = len(batches[0])
    if native_calls.ARRAY_CALLS:
        native = _native.lib.lx_store_gather_arrays
        low = array_fields.LOW
        out_at = array_fields.fields_address(out)
        arguments = [(handle & low, handle >> 32, at & low, at >> 32, out_at & low, out_at >> 32,
                      size, 0) for at in map(array_fields.fields_address, batches)]
    else:
        native = _native.lib.lx_store_gather_fixed
        out_address = int(out.ctypes.data)
        arguments = [(handle, int(batch.ctypes.data), count, out_address, size)
                     for batch in batches]
    pool = itertools.cycle(arguments)
    return {
        "native call": lambda: native(*next(pool)),
        "np.empty result": lambda: np.empty((count, size), dtype=np.uint8),
    }


def overhead_table(timings: dict[str, timing.Timing], batch: int, rep: Report) -> None:
    native = timings["native call"].median
    table = Table("sweep-overhead", f"Python time per call above the native gather "
                  f"({batch} records of 8 B, int64 indices in range)", [
                      Column("call", "call"),
                      Column("median_s", "per call", report.duration),
                      Column("above_s", "above the native call", report.duration),
                  ])
    table.add(call="the fast path's native call through ctypes, arguments prepared",
              median_s=native)
    into = timings[INTO].median
    table.add(call="ds.gather_into(idx, out)", median_s=into, above_s=into - native)
    read = timings[READ].median
    empty = timings["np.empty result"].median
    table.add(call="ds[idx] (less np.empty of its result)", median_s=read,
              above_s=read - empty - native)
    table.notes.append("medians of interleaved rounds; the native call (lx_store_gather_arrays, "
                       "or lx_store_gather_fixed where the arrays' fields cannot be used) "
                       "includes ctypes' own cost of passing its arguments and releasing the GIL")
    rep.emit(table)
    rep.target("issue 11", "Python time per gather_into call above the native call (ns)",
               (into - native) * 1e9, 1000.0, lower_is_better=True)


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    sizes = TINY_SIZES if args.tiny else SIZES
    total = (1 << 20) * (4 if args.tiny else args.sweep_mib)
    folder = workdir / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        base = np.load(base_file(folder, total), mmap_mode="r")
        table = Table("sweep", f"Record-size sweep: random gather of {args.batch} records from "
                      f"{total / MIB:g} MiB per size (raw codec; page cache warm, data out of "
                      "the CPU caches)", columns())
        overhead_timings: dict[str, timing.Timing] = {}
        for size in sizes:
            row, overhead = one_size(size, base, folder, args)
            table.add(**row)
            if overhead is not None:
                overhead_timings = overhead
        table.notes.append(f"median of {args.rounds} interleaved rounds per size; "
                           "np.take raise is the fair reference of gather_into (it checks "
                           "indices and never writes out on a bad one), clip is for information")
        if any(int(r["records"]) * int(r["size_bytes"]) < total for r in table.rows):  # type: ignore[call-overload]
            table.notes.append("at 8 B the data set holds 2^24 records (the store's limit)")
        rep.emit(table)
        overhead_table(overhead_timings, args.batch, rep)
        targets(table, rep)
    finally:
        stores.remove(folder)


def targets(table: Table, rep: Report) -> None:
    for row in table.rows:
        size = int(row["size_bytes"])  # type: ignore[call-overload]
        wanted = 1.5 if size >= 4 << 10 else 1.0
        rep.target("issue 11", f"ds[idx] vs numpy a[idx] at {row['size']}",
                   float(row["read_vs_fancy"]), wanted)  # type: ignore[arg-type]
        rep.target("issue 11", f"gather_into vs np.take(out=, mode='raise') at {row['size']}",
                   float(row["into_vs_take"]), 1.0)  # type: ignore[arg-type]
