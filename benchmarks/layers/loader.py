"""The loader layer: batches per second of the whole loop (sample, fetch, collate, hand over).

Same records as the store layer's mildly compressible set. loaderx reads its own stores (raw
and zstd); torch and grain read a .npy memmap, the array layout they are built for. Every
iterator stays alive for the whole table and gets one block of batches per round, round-robin,
so epoch restarts and worker start-up of torch are paid as a training loop pays them. After
each block the next contender waits briefly, untimed, so the previous one's background
prefetch (threads or worker processes) does not steal its cores. References in the same run:
the bare gather (sampler + one gather into a reused array on this thread) for loaderx, and
torch's best per-sample configuration for everyone. loaderx runs in its default cyclic mode
(every record once per cycle, a new order each cycle), the counterpart of torch's shuffle=True.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

import numpy as np

from . import data, headroom, loaders, report, select, stores, timing
from .report import Column, Report, Table

MIB = float(1 << 20)
SETTLE_SECONDS = 0.15


def build_stores(args: argparse.Namespace, folder: Path) -> tuple[np.ndarray, dict[str, Path]]:
    array = data.generate("mild", args.records, args.shape, seed=0)
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    npy = folder / "data.npy"
    stores.NpyMmap().write(npy, array)
    paths["npy"] = npy
    try:
        from loaderx.converter import from_numpy
    except Exception as error:  # noqa: BLE001
        print(f"skipped loaderx stores: {type(error).__name__}: {error}")
        return array, paths
    for codec in ("raw", "zstd"):
        stores.remove(folder / codec)
        from_numpy(str(folder / codec), array, codec=codec)
        paths[codec] = folder / codec
    # The second stream of a training loop: one int64 label per record.
    stores.remove(folder / "labels")
    from_numpy(str(folder / "labels"), np.arange(len(array), dtype=np.int64), codec="raw")
    paths["labels"] = folder / "labels"
    return array, paths


# The --transform choices: augment holds the GIL (Python loops), release lets it go (NumPy).
TRANSFORMS: dict[str, loaders.Transform] = {"augment": loaders.augment, "release": loaders.release}


def contenders(args: argparse.Namespace, paths: dict[str, Path], rep: Report
               ) -> dict[str, tuple[dict[str, object], loaders.Next, Callable[[], None]]]:
    transform = TRANSFORMS.get(args.transform)
    made: dict[str, tuple[dict[str, object], loaders.Next, Callable[[], None]]] = {}

    def add(name: str, info: dict[str, object], heavy: bool, factory: Callable[[], tuple[
            loaders.Next, Callable[[], None]]]) -> None:
        if not select.wanted(name, heavy, args.only, info["kind"] == "reference"):
            return
        try:
            step, close = factory()
        except Exception as error:  # noqa: BLE001 - a missing or broken peer is skipped
            rep.skip(name, f"{type(error).__name__}: {error}")
            return
        made[name] = (info, step, close)

    for codec in ("raw", "zstd"):
        if codec in paths:
            add(f"loaderx bare-gather {codec}", {"kind": "reference", "codec": codec}, False,
                lambda c=codec: loaders.bare_gather(paths[c], args.batch))  # type: ignore[misc]
            add(f"loaderx {codec}", {"kind": "loaderx", "codec": codec}, False,
                lambda c=codec: loaders.loaderx_loop(paths[c], args.batch, transform))  # type: ignore[misc]
            add(f"loaderx {codec} reuse", {"kind": "loaderx", "codec": codec}, False,
                lambda c=codec: loaders.loaderx_loop(  # type: ignore[misc]
                    paths[c], args.batch, transform, reuse=True))
    for workers in args.workers:
        if "raw" in paths and workers > 0:
            add(f"loaderx raw processes w{workers}",
                {"kind": "loaderx processes", "codec": "raw", "workers": workers}, False,
                lambda w=workers: loaders.loaderx_loop(  # type: ignore[misc]
                    paths["raw"], args.batch, transform, workers=w, processes=True))
    for codec in ("raw",):
        for workers in args.workers:
            if codec in paths:
                add(f"loaderx.torch adapter {codec} w{workers}",
                    {"kind": "loaderx.torch", "codec": codec, "workers": workers}, False,
                    lambda c=codec, w=workers: loaders.torch_adapter_loop(  # type: ignore[misc]
                        paths[c], args.batch, w, transform))
    if "raw" in paths and "labels" in paths:
        add("loaderx raw + labels", {"kind": "loaderx", "codec": "raw"}, False,
            lambda: loaders.loaderx_loop(paths["raw"], args.batch, transform,
                                         labels=paths["labels"]))
    for whole in (False, True):
        for workers in args.workers:
            label = "batch" if whole else "per-sample"
            add(f"torch {label} w{workers}", {"kind": f"torch {label}", "workers": workers},
                False, lambda w=workers, b=whole: loaders.torch_loop(  # type: ignore[misc]
                    paths["npy"], args.batch, w, b, transform))
    for workers in args.workers:
        add(f"grain w{workers}", {"kind": "grain", "workers": workers}, True,
            lambda w=workers: loaders.grain_loop(paths["npy"], args.batch, w, transform))  # type: ignore[misc]
    return made


def settle(name: str) -> None:
    if "bare-gather" in name or name.endswith("w0"):
        return
    time.sleep(SETTLE_SECONDS)


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    folder = workdir / "loader"
    array, paths = build_stores(args, folder)
    made = contenders(args, paths, rep)
    if not made:
        rep.skip("loader layer", "no contender could be built")
        stores.remove(folder)
        return
    calls = {name: step for name, (_, step, _) in made.items()}
    try:
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block * 2.5,
                                    settle=settle)
    finally:
        for _, _, close in made.values():
            close()
    batch_bytes = args.batch * array[0].nbytes
    table = Table("loader", f"Loader: batches of {args.batch} x {array[0].nbytes / 1024:g} KiB "
                  f"from {args.records} records, transform {args.transform}", [
                      Column("loader", "loader"),
                      Column("batches_s", "batches/s", report.per_second),
                      Column("mib_s", "MiB/s", report.mib_s),
                      Column("vs_torch_sample", "vs torch per-sample best", report.ratio),
                      Column("vs_bare", "vs bare gather", report.ratio),
                  ])
    rates = {name: 1.0 / t.median for name, t in timings.items()}
    per_sample = [r for n, r in rates.items() if n.startswith("torch per-sample")]
    torch_any = [r for n, r in rates.items() if n.startswith("torch")]
    best_sample = max(per_sample) if per_sample else None
    for name, rate in rates.items():
        info = made[name][0]
        bare = rates.get(f"loaderx bare-gather {info.get('codec')}")
        table.add(loader=name, batches_s=rate, mib_s=rate * batch_bytes / MIB,
                  vs_torch_sample=rate / best_sample if best_sample else None,
                  vs_bare=rate / bare if bare and info["kind"] == "loaderx" else None,
                  timing=timings[name].as_json(), **info)
    table.notes.append(f"median of {args.rounds} interleaved rounds; torch and grain read a "
                       ".npy memmap; torch w>0 uses persistent workers, prefetch_factor 2")
    if any(name.startswith("grain w") and not name.endswith("w0") for name in rates):
        table.notes.append("grain's worker processes keep prefetching between blocks, so with "
                           "grain in the run the other rows lose some CPU")
    if args.transform == "augment":
        table.notes.append("augment: mirrors every other row of each sample in a Python loop "
                           "(GIL-bound); bare gather rows run without it")
    if args.transform == "release":
        table.notes.append("release: six rounds of square root and scaling over a float32 copy "
                           "of the whole batch, NumPy calls that release the GIL; bare gather "
                           "rows run without it")
    gain = None
    transform = TRANSFORMS.get(args.transform)
    if transform is not None and "loaderx raw processes w2" in rates:
        gain = headroom.two_process_gain(transform, array[:args.batch], rounds=5)
        share = rates["loaderx raw processes w2"] / rates["loaderx raw"] / gain
        table.notes.append(
            f"this run's headroom: {args.transform} alone (no loader) ran {gain:.2f}x as fast in "
            f"two processes as in one; processes/threads above is {share:.2f} of that")
        if "raw" in paths:
            part = headroom.worker_share(str(paths["raw"]), transform, args.records, args.batch,
                                         rounds=3)
            table.notes.append(
                f"a worker's step: the transform is {part:.3f} of gather + transform + copy into "
                "its slot, timed in one process (a thread loader gathers on its other thread "
                "while the transform runs)")
    rep.emit(table)
    loader_targets(rates, best_sample, max(torch_any) if torch_any else None, rep, args)
    stores.remove(folder)


def process_targets(rates: dict[str, float], rep: Report) -> None:
    """Issue 38: with the GIL-bound transform, worker processes against threads and peers."""
    procs = rates.get("loaderx raw processes w2")
    if not procs:
        return
    peers = [("loaderx raw", "threads", 1.8), ("torch per-sample w2", "torch per-sample w2", 1.2),
             ("grain w2", "grain w2", 2.0)]
    for name, label, goal in peers:
        if rates.get(name):
            rep.target("issue 38", f"loaderx processes w2 vs {label}, transform augment",
                       procs / rates[name], goal)
    best = max((r for n, r in rates.items() if n.startswith("torch") and n.endswith("w2")),
               default=None)
    if best:
        rep.target("issue 38", "loaderx processes w2 vs torch's best w2, transform augment",
                   procs / best, 1.2)


def release_targets(rates: dict[str, float], rep: Report) -> None:
    """Issue 38: with a transform that releases the GIL, threads stay the faster choice."""
    threads, procs = rates.get("loaderx raw"), rates.get("loaderx raw processes w2")
    if threads and procs:
        rep.target("issue 38", "loaderx threads vs processes w2, transform release (GIL "
                   "released)", threads / procs, 1.0)


def loader_targets(rates: dict[str, float], best_sample: float | None, best_torch: float | None,
                   rep: Report, args: argparse.Namespace) -> None:
    if args.transform == "augment":
        process_targets(rates, rep)
    if args.transform == "release":
        release_targets(rates, rep)
    if args.transform != "none":
        return
    for codec in ("raw", "zstd"):
        bare = rates.get(f"loaderx bare-gather {codec}")
        for variant in ("", " reuse"):
            loop = rates.get(f"loaderx {codec}{variant}")
            if loop and bare:
                rep.target("issue 5", f"loader {codec}{variant} vs bare {codec} gather",
                           loop / bare, 0.85)
    bare = rates.get("loaderx bare-gather raw")
    two = rates.get("loaderx raw + labels")
    if two and bare:
        rep.target("issue 11", "loader with two streams (records + int64 labels) vs bare gather "
                   "of the records alone", two / bare, 0.9)
    raw = rates.get("loaderx raw")
    if args.only:
        return  # torch's best of each kind is only known when every torch row ran
    if raw and best_sample:
        rep.target("issue 5", "loader raw vs torch per-sample best", raw / best_sample, 5.0)
    if raw and best_torch:
        rep.target("issue 5", "loader raw vs torch best of any kind", raw / best_torch, 1.3)
