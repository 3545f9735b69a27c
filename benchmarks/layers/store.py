"""The store layer: random batch gather of `batch` records out of `records`, every contender.

For each data set (mildly compressible, smooth images) every selected store is written once
from the same array (write MiB/s, bytes on disk as allocated blocks, compression ratio =
logical bytes / bytes on disk), checked to return exactly the array's rows for two batches,
then all gathers are timed round-robin over the same list of random batches. The reference is
npy-mmap fancy indexing. A decode-only row, zstd level 3 on one thread through the zstandard
package over the same records, gives the single-core decompression rate that bounds any
zstd store on this machine. Two copy rows, NumPy copying one batch's bytes from the records on
one thread and on two, give the copy limit any raw gather works under. Every peer's first batches
must equal loaderx raw's byte for byte before it is timed. MosaicML Streaming and LitData run in
their own venv (store_peers.py) with the same records and batches.
"""

from __future__ import annotations

import argparse
import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np

from . import data, report, select, store_peers, stores, sweep, timing
from .report import Column, Report, Table

MIB = float(1 << 20)
BATCH_COUNT = 64  # distinct random batches cycled through by every contender


def columns() -> list[Column]:
    return [
        Column("store", "store"),
        Column("write_mib_s", "write", report.mib_s),
        Column("gather_mib_s", "gather", report.mib_s),
        Column("vs_npy", "vs npy-mmap", report.ratio),
        Column("disk_bytes", "on disk", report.mib),
        Column("ratio", "compression", report.ratio),
    ]


def cycling(gather: stores.Gather, batches: list[np.ndarray]) -> Callable[[], object]:
    pool = itertools.cycle(batches)
    return lambda: gather(next(pool))


def single_core_zstd(array: np.ndarray, batches: list[np.ndarray]) -> Callable[[], object] | None:
    """Decodes one batch's records one after another on this thread (zstandard, level 3)."""
    try:
        import zstandard
    except ImportError:
        return None
    cctx = zstandard.ZstdCompressor(level=3)
    frames = [[cctx.compress(array[i].tobytes()) for i in batch.tolist()] for batch in batches[:8]]
    dctx = zstandard.ZstdDecompressor()
    record_bytes = array[0].nbytes
    pool = itertools.cycle(frames)

    def decode() -> object:
        return [dctx.decompress(f, max_output_size=record_bytes) for f in next(pool)]

    return decode


def copy_rows(array: np.ndarray, batch: int) -> tuple[dict[str, Callable[[], object]],
                                                   Callable[[], None]]:
    """The copy limit: one batch's bytes (contiguous records, a different stretch each call, so
    out of the caches as a gather's are) copied by NumPy into a reused array, on this thread
    alone and split in halves between this thread and a helper (the two-core limit, which a
    busy second core pulls below the one-thread row). Returns the calls and a closer."""
    source = array.reshape(len(array), -1)
    out = np.empty((batch, source.shape[1]), dtype=source.dtype)
    half = batch // 2
    starts = itertools.cycle(range(0, len(source) - batch + 1, batch))
    helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-copy")

    def one_thread() -> object:
        start = next(starts)
        np.copyto(out, source[start:start + batch])
        return out

    def two_threads() -> object:
        start = next(starts)
        other = helper.submit(np.copyto, out[half:], source[start + half:start + batch])
        np.copyto(out[:half], source[start:start + half])
        other.result()
        return out

    return {"memcpy 1-thread": one_thread, "memcpy 2-thread": two_threads}, helper.shutdown


def reference_batches(calls: dict[str, stores.Gather], array: np.ndarray,
                      batches: list[np.ndarray]) -> list[np.ndarray]:
    """What every contender must return for the first two batches: loaderx raw's result (itself
    checked against the array), or the array's rows when loaderx raw did not run."""
    ours = calls.get("loaderx raw")
    return [np.array(ours(batch) if ours else array[batch]) for batch in batches[:2]]


def prepare(store: stores.Store, folder: Path, array: np.ndarray, batches: list[np.ndarray],
            table: Table, rep: Report, expected: list[np.ndarray]) -> stores.Gather | None:
    """Writes, measures and verifies one store; None (with a printed reason) when it fails."""
    path = folder / select.slug(store.name)
    stores.remove(path)
    try:
        seconds = timing.time_once(lambda: store.write(path, array))
        gather = store.open(path, array.shape[1:])
        for batch, want in zip(batches[:2], expected):
            got = np.asarray(gather(batch))
            if got.shape != want.shape or got.tobytes() != want.tobytes():
                raise AssertionError("its batch differs from loaderx raw's (and the array's)")
    except Exception as error:  # noqa: BLE001 - a failing peer is skipped, not fatal
        rep.skip(f"{store.name} ({table.title.split(':')[0]})",
                 f"{type(error).__name__}: {error}")
        store.close()
        return None
    on_disk = stores.disk_bytes(path)
    table.add(store=store.name, write_mib_s=array.nbytes / seconds / MIB, disk_bytes=on_disk,
              ratio=array.nbytes / on_disk if on_disk else None)
    return gather


def payload_ratio(opened: list[stores.Store], array: np.ndarray) -> str:
    for store in opened:
        if isinstance(store, stores.Loaderx) and store.codec == "zstd":
            live = store.compressed_bytes()
            if live:
                return f"per-record zstd-3 ratio {array.nbytes / live:.2f} (loaderx zstd payload)"
    try:
        import zstandard
    except ImportError:
        return "per-record zstd ratio not measured (neither loaderx zstd nor zstandard here)"
    cctx = zstandard.ZstdCompressor(level=3)
    sample = array[:: max(1, len(array) // 512)]
    packed = sum(len(cctx.compress(record.tobytes())) for record in sample)
    return f"per-record zstd-3 ratio {sample.nbytes / packed:.2f} (zstandard, {len(sample)} records)"


def run_kind(kind: str, args: argparse.Namespace, rep: Report, folder: Path) -> None:
    shape = args.shape
    array = data.generate(kind, args.records, shape, seed=0)
    batches = data.batches(args.records, args.batch, BATCH_COUNT)
    record_kib = array[0].nbytes / 1024
    title = (f"Store ({kind}): random gather of {len(batches[0])} of {args.records} records, "
             f"{record_kib:g} KiB each ({'x'.join(map(str, shape))} uint8)")
    table = Table("store", title, columns())
    folder.mkdir(parents=True, exist_ok=True)
    calls: dict[str, Callable[[], object]] = {}
    gathers: dict[str, stores.Gather] = {}
    opened: list[stores.Store] = []
    left_out: list[str] = []
    for store in stores.contenders(args.dict_tiers):
        if not select.wanted(store.name, store.heavy, args.only, store.name == "npy-mmap"):
            if store.heavy and not args.only:
                left_out.append(select.slug(store.name))
            continue
        why = store.missing()
        if why is not None:
            rep.skip(store.name, why)
            continue
        expected = reference_batches(gathers, array, batches)
        gather = prepare(store, folder, array, batches, table, rep, expected)
        if gather is not None:
            gathers[store.name] = gather
            calls[store.name] = cycling(gather, batches)
            opened.append(store)
            if isinstance(store, stores.Loaderx) and store.codec in ("raw", "zstd"):
                # The same store through gather_into: no result allocation (the loader's path).
                name = f"{store.name} gather_into"
                into = store.into_reused(len(batches[0]))
                if np.array_equal(into(batches[2]), array[batches[2]]):
                    calls[name] = cycling(into, batches)
                    table.add(store=name)
                else:
                    rep.skip(name, "gathered rows differ from the written array")
    decode = single_core_zstd(array, batches)
    if decode is not None:
        calls["zstd decode, 1 thread"] = decode
        table.add(store="zstd decode, 1 thread")
    copies, stop_copy = copy_rows(array, len(batches[0]))
    for name, copy in copies.items():
        if select.wanted(name, False, args.only):
            calls[name] = copy
            table.add(store=name)
    try:
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
    finally:
        stop_copy()
    batch_bytes = len(batches[0]) * array[0].nbytes
    fill_gather(table, timings, batch_bytes)
    side = store_peers.wanted(args)
    if side:
        loaderx_raw = folder / select.slug("loaderx raw") if "loaderx raw" in gathers else None
        figures = store_peers.measure(args, rep, array, batches,
                                      reference_batches(gathers, array, batches), loaderx_raw,
                                      folder)
        if figures is not None:
            store_peers.add_rows(table, rep, figures, side, batch_bytes, array.nbytes)
    table.notes.append(f"data set {kind}: {payload_ratio(opened, array)}")
    table.notes.append("write is one timed pass; gather is the median of "
                       f"{args.rounds} interleaved rounds; on disk = allocated blocks")
    if left_out:
        table.notes.append(f"heavy, not in the default run (add --only NAME): "
                           f"{', '.join(left_out)}")
    for store in opened:
        store.close()
    rep.emit(table)
    zstd_targets(kind, table, rep)


def fill_gather(table: Table, timings: dict[str, timing.Timing], batch_bytes: int) -> None:
    npy = timings.get("npy-mmap")
    for row in table.rows:
        t = timings.get(str(row["store"]))
        if t is None:
            continue
        row["gather_mib_s"] = batch_bytes / t.median / MIB
        row["gather_best_mib_s"] = batch_bytes / t.best / MIB
        row["gather_s"] = t.as_json()
        if npy is not None:
            row["vs_npy"] = npy.median / t.median


def zstd_targets(kind: str, table: Table, rep: Report) -> None:
    rows = {str(r["store"]): r for r in table.rows}
    # Raw: ds[idx] allocates its result like numpy's fancy indexing does, so they pair up.
    raw = rows.get("loaderx raw", {}).get("vs_npy")
    if raw is not None:
        rep.target("issue 2", f"loaderx raw ds[idx] vs npy-mmap ({kind})", float(raw), 1.5)  # type: ignore[arg-type]
    # zstd: decompression speed is the question, so the allocation-free call is compared.
    one_core = rows.get("zstd decode, 1 thread", {}).get("gather_mib_s")
    zstd = rows.get("loaderx zstd gather_into", {}).get("gather_mib_s")
    if one_core and zstd:
        rep.target("issue 2", f"loaderx zstd gather_into vs two cores of one-thread zstd decode "
                   f"({kind})", float(zstd) / (2 * float(one_core)), 0.9)  # type: ignore[arg-type]


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    """The two data sets' tables, then the record-size sweep (`--only sweep`: the sweep alone)."""
    only = args.only or []
    if only != ["sweep"]:
        for kind in data.KINDS:
            folder = workdir / f"store-{kind}"
            run_kind(kind, args, rep, folder)
            stores.remove(folder)
    if not args.no_sweep and (not only or "sweep" in only or select.matches("loaderx raw", only)):
        sweep.run(args, rep, workdir)
