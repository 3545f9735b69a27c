"""The shards layer: what reading a sharded dataset costs against the same records in one store.

Gather: the store layer's mildly compressible set (64 x --shard-records records of --shape,
12 KiB by default) written twice, once as one store and once as 64 shards; random batches of
--batch through gather_into and ds[idx], raw and zstd. Loader: the default DataLoader loop over
each. Shards hold 1024 records (12 MiB) by default: a shard file smaller than a huge page (2 MiB)
cannot be mapped with huge pages, while one large store file can, so a comparison with tiny
shards measures the kernel's TLB reach more than loaderx (--shard-records 157 shows it).
Lookup: 8-byte records (int64) at 10^4 and at --lookup-records (10^8 by default, in shards of
2^22 records), ds[idx] against NumPy fancy indexing of a memory-mapped .npy holding the same
values. The ratio of the two is taken at each size; loaderx's routing and table lookup must not
make it fall as the count grows (both sides pay the same cache misses on the data).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Final

import numpy as np

from . import data, report, stores, timing
from .report import Column, Report, Table

if TYPE_CHECKING:
    from loaderx.dataset import DenseDataset

MIB = float(1 << 20)
SHARD_COUNT: Final = 64
LOOKUP_SMALL: Final = 10_000
LOOKUP_SHARD_RECORDS: Final = 1 << 22
LOOKUP_BLOCK: Final = 1 << 22  # records per from_numpy block and per .npy write


def write_sharded(path: Path, array: np.ndarray, codec: str, shard_records: int) -> None:
    """array as a dataset whose shards hold shard_records records each (appends roll over)."""
    from loaderx.dataset import DenseDataset

    stores.remove(path)
    with DenseDataset(str(path), dtype=array.dtype, item_shape=array.shape[1:], codec=codec,
                      shard_records=shard_records) as ds:
        for start in range(0, array.shape[0], shard_records):
            ds.append(array[start:start + shard_records])


def gather_table(args: argparse.Namespace, rep: Report, folder: Path) -> None:
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    per_shard = args.shard_records
    records = SHARD_COUNT * per_shard
    array = data.generate("mild", records, args.shape, seed=0)
    batches = data.batches(records, args.batch, 64, seed=5)
    calls: dict[str, Callable[[], object]] = {}
    opened: list[DenseDataset] = []
    for codec in ("raw", "zstd"):
        single_path, sharded_path = folder / f"one-{codec}", folder / f"shards-{codec}"
        stores.remove(single_path)
        from_numpy(str(single_path), array, codec=codec)
        write_sharded(sharded_path, array, codec, per_shard)
        for label, path in (("1 store", single_path), (f"{SHARD_COUNT} shards", sharded_path)):
            ds = open_checked(path, array, batches, opened)
            calls[f"{codec} gather_into, {label}"] = gather_into_call(ds, batches)
            pool = itertools.cycle(batches)
            calls[f"{codec} ds[idx], {label}"] = lambda d=ds, p=pool: d[next(p)]  # type: ignore[misc]
    # The control: the 1-store raw records through a second handle of the same folder, timed
    # like the others. Its distance from 1.00x is what this run's noise alone does to a ratio.
    again = open_checked(folder / "one-raw", array, batches, opened)
    calls[SAME_STORE] = gather_into_call(again, batches)
    # The second control: the same records written again as one store, the same way, read
    # through its own handle. Its distance from 1.00x is what writing a store again (other
    # pages, another handle's advisors) does to a ratio here; the shards are written apart too.
    copy_path = folder / "copy-raw"
    stores.remove(copy_path)
    from_numpy(str(copy_path), array, codec="raw")
    calls[SECOND_COPY] = gather_into_call(open_checked(copy_path, array, batches, opened), batches)
    view = routing_only_view(opened[0], args, batches, calls)
    try:
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
        paired = paired_ratios(calls, timings, args.rounds)
    finally:
        view.close()
        for ds in opened:
            ds.close()
    table = Table("shards", f"Shards: random gather of {args.batch} x "
                  f"{array[0].nbytes / 1024:g} KiB from {records} records, one store vs "
                  f"{SHARD_COUNT} shards", [
                      Column("read", "read"),
                      Column("seconds", "per batch", report.duration),
                      Column("mib_s", "gather", report.mib_s),
                      Column("vs_single", "vs 1 store", report.ratio),
                      Column("paired", "in pairs", report.ratio),
                  ])
    for name, t in timings.items():
        single = timings[reference_of(name)].median
        pairs = paired.get(name)
        table.add(read=name, seconds=t.median,
                  mib_s=args.batch * array[0].nbytes / t.median / MIB,
                  vs_single=single / t.median,
                  paired=None if pairs is None else statistics.median(pairs),
                  pair_ratios=pairs, timing=t.as_json())
        if name.endswith("shards") and pairs is not None:
            rep.target("issue 14", f"{name.rsplit(',', 1)[0]} from {SHARD_COUNT} shards vs 1 store"
                       " (in pairs)", statistics.median(pairs), 0.95)
    rep.target("issue 41 §2, control", "the same store through a second handle vs the first "
               "(in pairs)", statistics.median(paired[SAME_STORE]), 0.95)
    table.notes.append(f"median of {args.rounds} interleaved rounds; shards of {per_shard} records")
    table.notes.append("in pairs: the median over pairs of short blocks, each read timed right "
                       "beside its 1-store read (timing.paired); the targets use it")
    table.notes.append(f"{SAME_STORE}: the same folder opened a second time, the run's "
                       "control: its distance from 1.00x is the noise in every ratio above")
    table.notes.append(f"{SECOND_COPY}: the same records written again as one store, the "
                       "same way: the same code on other pages, so its distance from 1.00x is "
                       "what writing a store again does to a ratio here")
    table.notes.append(f"{ROUTING_ONLY}: the 1-store records through a view of that store "
                       f"{SHARD_COUNT} times (the same bytes, {SHARD_COUNT}-way routing): "
                       "what routing costs apart from where the shards' pages lie")
    rep.emit(table)


ROUTING_ONLY: Final = f"raw gather_into, {SHARD_COUNT}-way view of 1 store"
SAME_STORE: Final = "raw gather_into, 1 store again"
SECOND_COPY: Final = "raw gather_into, 1 store, a second copy"
# Timed in pairs, each pair's two blocks about this many calls long (at least PAIRED_BLOCK_MIN
# seconds), for about PAIRED_SECONDS_PER_ROUND seconds of pairs per --rounds round.
PAIRED_CALLS_PER_BLOCK: Final = 8
PAIRED_BLOCK_MIN: Final = 0.01
PAIRED_SECONDS_PER_ROUND: Final = 0.4


def open_checked(path: Path, array: np.ndarray, batches: list[np.ndarray],
                 opened: list[DenseDataset]) -> DenseDataset:
    """The dataset at path, added to `opened`, once its first batch reads array's records."""
    from loaderx.dataset import DenseDataset

    ds = DenseDataset(str(path))
    opened.append(ds)
    if not np.array_equal(ds[batches[0]], array[batches[0]]):
        raise AssertionError(f"{path} returned wrong records")
    return ds


def gather_into_call(ds: DenseDataset, batches: list[np.ndarray]) -> Callable[[], object]:
    """ds.gather_into over the batches in turn, into one array of its own."""
    out = np.empty_like(ds[batches[0]])
    pool = itertools.cycle(batches)
    return lambda: ds.gather_into(next(pool), out)


def reference_of(name: str) -> str:
    """The 1-store read (or loader) a row of the gather (or loader) table is compared with."""
    if name in (SAME_STORE, SECOND_COPY, ROUTING_ONLY):
        return "raw gather_into, 1 store"
    return name.rsplit(", ", 1)[0] + ", 1 store"


def paired_ratios(calls: dict[str, Callable[[], object]], timings: dict[str, timing.Timing],
                  rounds: int) -> dict[str, list[float]]:
    """Each 64-shard read and the control timed in pairs with its 1-store read
    (timing.paired): the 1-store read's time over theirs, once per pair."""
    ratios: dict[str, list[float]] = {}
    for name in calls:
        if not (name.endswith("shards") or name in (SAME_STORE, SECOND_COPY)):
            continue
        reference = reference_of(name)
        per_call = max(timings[name].median, timings[reference].median)
        block = max(PAIRED_BLOCK_MIN, PAIRED_CALLS_PER_BLOCK * per_call)
        pairs = max(2, round(rounds * PAIRED_SECONDS_PER_ROUND / (2 * block)))
        ratios[name] = timing.paired(calls[reference], calls[name], pairs=pairs,
                                     block_seconds=block)
    return ratios


def routing_only_view(single: object, args: argparse.Namespace, batches: list[np.ndarray],
                      calls: dict[str, Callable[[], object]]) -> object:
    """Adds the ROUTING_ONLY call over `single` (the raw 1-store dataset); returns the view."""
    from loaderx._store.view import View

    store = single.store  # type: ignore[attr-defined]
    view = View([store] * SHARD_COUNT, "routing only")
    rng = np.random.default_rng(9)
    spread = [b + len(store) * rng.integers(0, SHARD_COUNT, len(b)) for b in batches]
    record_size = int(np.prod(args.shape))
    check = np.empty((args.batch, *args.shape), dtype=np.uint8)
    view.gather_into(spread[0], check, record_size)
    if not np.array_equal(check, single[batches[0]]):  # type: ignore[index]
        raise AssertionError("the routing-only view returned wrong records")
    out = np.empty_like(check)
    pool = itertools.cycle(spread)
    calls[ROUTING_ONLY] = lambda: view.gather_into(next(pool), out, record_size)
    return view


def loader_table(args: argparse.Namespace, rep: Report, folder: Path) -> None:
    from loaderx.dataloader import DataLoader
    from loaderx.dataset import DenseDataset

    calls: dict[str, Callable[[], object]] = {}
    loaders: list[DataLoader] = []
    opened: list[DenseDataset] = []
    for codec in ("raw", "zstd"):
        for label, name in (("1 store", f"one-{codec}"), (f"{SHARD_COUNT} shards", f"shards-{codec}")):
            ds = DenseDataset(str(folder / name))
            opened.append(ds)
            loader = DataLoader({"x": ds}, batch_size=args.batch, seed=0)
            loaders.append(loader)
            calls[f"loader {codec}, {label}"] = loader.__next__
    try:
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block * 2.5,
                                    settle=lambda _name: time.sleep(LOADER_SETTLE))
        # Each 64-shard loader also in pairs with its 1-store loader (timing.paired), the ring
        # refilled after every block: a loader prefetches while the other one is timed, so its
        # blocks are long, and the few batches its ring holds are a fraction of a percent of one.
        paired = {name: timing.paired(calls[reference_of(name)], calls[name],
                                      pairs=2 * args.rounds, block_seconds=args.block,
                                      settle=lambda: time.sleep(LOADER_SETTLE))
                  for name in calls if name.endswith("shards")}
    finally:
        for loader in loaders:
            loader.close()
        for ds in opened:
            ds.close()
    table = Table("shards", f"Shards: DataLoader batches of {args.batch} from one store vs "
                  f"{SHARD_COUNT} shards", [
                      Column("loader", "loader"),
                      Column("batches_s", "batches/s", report.per_second),
                      Column("vs_single", "vs 1 store", report.ratio),
                      Column("paired", "in pairs", report.ratio),
                  ])
    for name, t in timings.items():
        single = timings[reference_of(name)].median
        pairs = paired.get(name)
        table.add(loader=name, batches_s=1.0 / t.median, vs_single=single / t.median,
                  paired=None if pairs is None else statistics.median(pairs),
                  pair_ratios=pairs, timing=t.as_json())
        if pairs is not None:
            rep.target("issue 14", f"{name.rsplit(',', 1)[0]} from {SHARD_COUNT} shards vs 1 store"
                       " (in pairs)", statistics.median(pairs), 0.95)
    table.notes.append(f"in pairs: as in the gather table, blocks of {args.block:g} s, the ring "
                       f"refilled ({LOADER_SETTLE:g} s) after each; the targets use it")
    rep.emit(table)


# Seconds a loader is left to refill its ring after each timed block.
LOADER_SETTLE: Final = 0.1


def lookup_calls(folder: Path, count: int, batch: int) -> tuple[dict[str, Callable[[], object]],
                                                                   float, object]:
    """ds[idx] and memmap fancy indexing over `count` int64 records; returns the calls, the
    seconds the loaderx dataset took to build, and the dataset (to close)."""
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    npy = folder / f"lookup-{count}.npy"
    mapped = np.lib.format.open_memmap(npy, mode="w+", dtype=np.int64, shape=(count,))
    for start in range(0, count, LOOKUP_BLOCK):
        stop = min(count, start + LOOKUP_BLOCK)
        mapped[start:stop] = np.arange(start, stop, dtype=np.int64)
    mapped.flush()
    del mapped
    source = np.load(npy, mmap_mode="r")
    path = folder / f"lookup-{count}"
    stores.remove(path)
    started = time.perf_counter()
    if count > LOOKUP_SHARD_RECORDS:
        with DenseDataset(str(path), dtype=np.int64, codec="raw",
                          shard_records=LOOKUP_SHARD_RECORDS) as ds:
            for start in range(0, count, LOOKUP_BLOCK):
                ds.append(np.ascontiguousarray(source[start:start + LOOKUP_BLOCK]))
    else:
        from_numpy(str(path), source, codec="raw")
    build_seconds = time.perf_counter() - started
    dataset = DenseDataset(str(path))
    batches = data.batches(count, batch, 64, seed=count)
    if not np.array_equal(dataset[batches[0]], batches[0]):
        raise AssertionError(f"loaderx returned wrong records at {count}")
    for picks in batches:  # first touches (page faults of both mappings) stay out of the timing
        source[picks]
        dataset[picks]
    pool_npy, pool_lx = itertools.cycle(batches), itertools.cycle(batches)
    calls: dict[str, Callable[[], object]] = {
        f"npy-mmap {count}": lambda: source[next(pool_npy)],
        f"loaderx {count}": lambda: dataset[next(pool_lx)],
    }
    return calls, build_seconds, dataset


def lookup_table(args: argparse.Namespace, rep: Report, folder: Path) -> None:
    large = 30_000 if args.tiny else args.lookup_records
    table = Table("shards", f"Shards: lookup cost, ds[idx] of {args.batch} int64 records vs "
                  "NumPy memmap fancy indexing, as the record count grows", [
                      Column("records", "records"),
                      Column("shards", "shards"),
                      Column("build", "build", report.duration),
                      Column("npy", "npy-mmap", report.duration),
                      Column("loaderx", "loaderx ds[idx]", report.duration),
                      Column("ratio", "npy / loaderx", report.ratio),
                  ])
    ratios: dict[int, float] = {}
    for count in (LOOKUP_SMALL, large):
        calls, build_seconds, dataset = lookup_calls(folder, count, args.batch)
        try:
            shards = len(dataset.shard_stats())  # type: ignore[attr-defined]
            timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
        finally:
            dataset.close()  # type: ignore[attr-defined]
        npy, lx = timings[f"npy-mmap {count}"].median, timings[f"loaderx {count}"].median
        ratios[count] = npy / lx
        table.add(records=f"{count:,}", shards=shards, build=build_seconds, npy=npy, loaderx=lx,
                  ratio=npy / lx)
        for path in folder.glob(f"lookup-{count}*"):
            stores.remove(path)
    table.notes.append(f"shards of {LOOKUP_SHARD_RECORDS} records above that count; "
                       f"--lookup-records sets the large count")
    rep.emit(table)
    rep.target("issue 14", f"lookup ratio at {large:,} records vs at {LOOKUP_SMALL:,}",
               ratios[large] / ratios[LOOKUP_SMALL], 0.8)


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    folder = workdir / "shards"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        from loaderx._data.dense import DenseDataset  # noqa: F401
    except Exception as error:  # noqa: BLE001
        rep.skip("shards layer", f"{type(error).__name__}: {error}")
        return
    gather_table(args, rep, folder)
    loader_table(args, rep, folder)
    lookup_table(args, rep, folder)
    stores.remove(folder)
