"""The bench command: a dense dataset's random-gather speed beside a NumPy memmap of its records."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any, Final, TextIO

import numpy as np
import numpy.typing as npt

from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx.cli.exits import EXIT_OK, Problem
from loaderx.cli.sizes import size_text
from loaderx.cli.stores import open_store

BENCH_RECORDS_MAX: Final = 20_000


def rate_mib_s(run: Callable[[], object], batch_bytes: int, seconds: float) -> float:
    """MiB/s of run() repeated for about `seconds` (after one warm-up call)."""
    run()
    calls = 0
    started = time.perf_counter()
    while True:
        run()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return calls * batch_bytes / elapsed / (1 << 20)


def cmd_bench(args: argparse.Namespace, out: TextIO) -> int:
    """Times the dense dataset at args.path against a NumPy memmap copy of its records."""
    opened = open_store(args.path)
    if not isinstance(opened, DenseDataset):
        kind = "ragged dataset" if isinstance(opened, RaggedDataset) else "bare Zrecord store"
        opened.close()
        raise Problem(f"{args.path}: bench compares a dense dataset with a NumPy memmap; "
                      f"this is a {kind}")
    try:
        return bench_dense(opened, args, out)
    finally:
        opened.close()


def bench_dense(ds: DenseDataset, args: argparse.Namespace, out: TextIO) -> int:
    """The contenders timed round-robin on the same random batches; the medians printed."""
    count = min(len(ds), args.records)
    if count == 0:
        raise Problem(f"{args.path}: the dataset is empty")
    batch = min(args.batch, count)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, count, batch, dtype=np.int64) for _ in range(64)]
    out_array = np.empty((batch, *ds.item_shape), dtype=ds.dtype)
    with tempfile.TemporaryDirectory(prefix="loaderx-bench-", dir=args.tmp) as folder:
        npy = os.path.join(folder, "records.npy")
        copy = np.lib.format.open_memmap(npy, mode="w+", dtype=ds.dtype,
                                         shape=(count, *ds.item_shape))
        step = max(1, (64 << 20) // max(1, ds.record_size))
        for start in range(0, count, step):
            copy[start : start + step] = ds[start : min(count, start + step)]
        copy.flush()
        del copy
        memmap: npt.NDArray[Any] = np.load(npy, mmap_mode="r")
        turn = [0]

        def next_indices() -> npt.NDArray[np.int64]:
            turn[0] = (turn[0] + 1) % len(batches)
            chosen: npt.NDArray[np.int64] = batches[turn[0]]
            return chosen

        contenders: dict[str, Callable[[], object]] = {
            "loaderx gather_into": lambda: ds.gather_into(next_indices(), out_array),
            "loaderx ds[idx]": lambda: ds[next_indices()],
            "numpy memmap a[idx]": lambda: memmap[next_indices()],
        }
        batch_bytes = batch * ds.record_size
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.rounds):  # round-robin, so that load on the machine hits all alike
            for name, run in contenders.items():
                rates[name].append(rate_mib_s(run, batch_bytes, args.seconds))
        del memmap
    medians = {name: float(np.median(values)) for name, values in rates.items()}
    reference = medians["numpy memmap a[idx]"]
    result = {
        "path": args.path, "records": count, "batch": batch, "record_bytes": ds.record_size,
        "codec": ds.codec, "rounds": args.rounds,
        "mib_s": {name: round(value, 1) for name, value in medians.items()},
        "vs_memmap": {name: round(value / reference, 3) for name, value in medians.items()},
    }
    if args.json:
        json.dump(result, out, indent=2)
        print(file=out)
        return EXIT_OK
    print(f"{args.path}: random batches of {batch} from {count:,} records of "
          f"{size_text(ds.record_size)}, codec {ds.codec}, median of {args.rounds} rounds "
          "(warm page cache)", file=out)
    for name, value in medians.items():
        print(f"  {name:<22} {value:>10,.0f} MiB/s  {value / reference:6.2f}x", file=out)
    return EXIT_OK
