"""The scale layer: does a batch cost more as the store or the index space grows?

Gather: stores of 10^4, 10^5 and 10^6 records of 1 KiB (random bytes, raw codec), a random
batch of 256 each, loaderx against npy-mmap fancy indexing at every size. The batches are
spread over the whole store, so the bigger stores also touch more distinct pages.
Sampler: iid and cyclic batches of 1024 over index spaces from 10^4 to 10^9, against NumPy.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Callable, Final

import numpy as np

from . import data, report, sampler, stores, timing
from .report import Column, Report, Table

MIB = float(1 << 20)
RECORD_BYTES: Final = 1024
STORE_SIZES: Final = (10_000, 100_000, 1_000_000)
INDEX_SPACES: Final = (10_000, 1_000_000, 100_000_000, 1_000_000_000)
SAMPLER_BATCH: Final = 1024


def write_npy(path: Path, count: int) -> np.ndarray:
    """Random records straight into a .npy memmap, in blocks (never whole in memory)."""
    mapped = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8,
                                       shape=(count, RECORD_BYTES))
    rng = np.random.default_rng(count)
    block = max(1, (64 << 20) // RECORD_BYTES)
    for start in range(0, count, block):
        rows = mapped[start:start + block]
        rows[:] = np.frombuffer(rng.bytes(rows.nbytes), dtype=np.uint8).reshape(rows.shape)
    mapped.flush()
    return mapped


def gather_calls(folder: Path, count: int, batch: int) -> dict[str, Callable[[], object]]:
    npy = folder / f"scale-{count}.npy"
    source = write_npy(npy, count)
    batches = data.batches(count, batch, 64, seed=count)
    mapped = np.load(npy, mmap_mode="r")
    pool = itertools.cycle(batches)
    calls: dict[str, Callable[[], object]] = {f"npy-mmap {count:.0e}": lambda: mapped[next(pool)]}
    try:
        from loaderx.converter import from_numpy
        from loaderx.dataset import DenseDataset
    except Exception:  # noqa: BLE001 - reported by the store layer; this layer just omits it
        return calls
    path = folder / f"scale-{count}"
    stores.remove(path)
    from_numpy(str(path), source, codec="raw")
    dataset = DenseDataset(str(path))
    check = batches[0]
    if not np.array_equal(dataset[check], mapped[check]):
        raise AssertionError(f"loaderx returned wrong rows at {count} records")
    loaderx_pool = itertools.cycle(batches)
    calls[f"loaderx raw {count:.0e}"] = lambda: dataset[next(loaderx_pool)]
    return calls


def store_sizes(args: argparse.Namespace) -> tuple[int, ...]:
    return (1_000, 3_000, 10_000) if args.tiny else STORE_SIZES


def run_gather(args: argparse.Namespace, rep: Report, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    table = Table("scale", f"Scale: random gather of {args.batch} records of "
                  f"{RECORD_BYTES} B as the store grows", [
                      Column("store", "store"),
                      Column("records", "records"),
                      Column("seconds", "per batch", report.duration),
                      Column("gather_mib_s", "gather", report.mib_s),
                      Column("vs_npy", "vs npy-mmap", report.ratio),
                  ])
    for count in store_sizes(args):
        calls = gather_calls(folder, count, args.batch)
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block / 2)
        reference = timings[f"npy-mmap {count:.0e}"].median
        for name, t in timings.items():
            table.add(store=name.rsplit(" ", 1)[0], records=count, seconds=t.median,
                      gather_mib_s=args.batch * RECORD_BYTES / t.median / MIB,
                      vs_npy=reference / t.median)
        for path in folder.glob(f"scale-{count}*"):
            stores.remove(path)
    rep.emit(table)


def run_sampler(args: argparse.Namespace, rep: Report) -> None:
    table = Table("scale", f"Scale: one sampler batch of {SAMPLER_BATCH} as the index space "
                  "grows", [
                      Column("sampler", "sampler"),
                      Column("space", "index space"),
                      Column("seconds", "per batch", report.duration),
                      Column("vs_numpy", "vs default_rng", report.ratio),
                  ])
    for space in INDEX_SPACES:
        calls = sampler.contenders(space, SAMPLER_BATCH, ["loaderx-iid", "loaderx-cyclic"])
        calls.pop("loaderx iid fill", None)
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block / 4)
        reference = timings["numpy default_rng"].median
        for name, t in timings.items():
            table.add(sampler=name, space=f"{space:,}", seconds=t.median,
                      vs_numpy=reference / t.median)
    rep.emit(table)


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    run_gather(args, rep, workdir / "scale")
    run_sampler(args, rep)
