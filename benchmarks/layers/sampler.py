"""The sampler layer: one batch of indices per call, loaderx's modes against NumPy.

The reference is NumPy's modern generator drawing with replacement,
`np.random.default_rng(0).integers(0, N, size=B)`, over the same index space (N = 1,000,000).
loaderx is called as a client calls it: `Sampler.batch(step)` returns a fresh int64 array, the
step advancing on every call; the `fill` row writes into a caller's array as the loader does.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Callable, Final

import numpy as np

from . import report, select, timing
from .report import Column, Report, Table

INDEX_SPACE: Final = 1_000_000
BATCHES: Final = (256, 1024, 8192)


def numpy_draw(length: int, batch: int) -> Callable[[], object]:
    rng = np.random.default_rng(0)
    return lambda: rng.integers(0, length, size=batch)


def loaderx_batch(length: int, batch: int, mode: str) -> Callable[[], object]:
    from loaderx.sampler import Sampler

    sampler = Sampler(length, batch, mode=mode, seed=0)
    steps = itertools.count()
    return lambda: sampler.batch(next(steps))


def loaderx_fill(length: int, batch: int, mode: str) -> Callable[[], object]:
    from loaderx.sampler import Sampler

    sampler = Sampler(length, batch, mode=mode, seed=0)
    out = np.empty(batch, dtype=np.int64)
    steps = itertools.count()

    def fill() -> object:
        sampler.fill(next(steps), out)
        return out

    return fill


def contenders(length: int, batch: int, only: list[str] | None) -> dict[str, Callable[[], object]]:
    calls: dict[str, Callable[[], object]] = {"numpy default_rng": numpy_draw(length, batch)}
    try:
        import loaderx.sampler  # noqa: F401
    except Exception:  # noqa: BLE001 - reported by the caller as a skip
        return calls
    for mode in ("iid", "cyclic", "sequential"):
        name = f"loaderx {mode}"
        if select.wanted(name, False, only):
            calls[name] = loaderx_batch(length, batch, mode)
    if select.wanted("loaderx iid fill", False, only):
        calls["loaderx iid fill"] = loaderx_fill(length, batch, "iid")
    return calls


def run(args: argparse.Namespace, rep: Report) -> None:
    table = Table("sampler", f"Sampler: one batch of indices from an index space of "
                  f"{INDEX_SPACE:,}, per call", [
                      Column("sampler", "sampler"),
                      Column("batch", "batch"),
                      Column("seconds", "per batch", report.duration),
                      Column("vs_numpy", "vs default_rng", report.ratio),
                  ])
    try:
        import loaderx.sampler  # noqa: F401
    except Exception as error:  # noqa: BLE001
        rep.skip("loaderx sampler", f"{type(error).__name__}: {error}")
    for batch in BATCHES:
        calls = contenders(INDEX_SPACE, batch, args.only)
        timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block / 2)
        reference = timings["numpy default_rng"].median
        for name, t in timings.items():
            table.add(sampler=name, batch=batch, seconds=t.median, vs_numpy=reference / t.median,
                      best_s=t.best)
        by_name = {n: reference / t.median for n, t in timings.items()}
        if "loaderx iid" in by_name and batch in (256, 8192):
            rep.target("issue 3", f"iid vs numpy at B={batch}", by_name["loaderx iid"],
                       3.0 if batch == 256 else 2.0)
        if "loaderx cyclic" in by_name:
            rep.target("issue 3", f"cyclic vs numpy at B={batch}", by_name["loaderx cyclic"], 1.0)
            if batch == 256:
                # The default mode at the loader's usual batch (issue 11: call overhead).
                rep.target("issue 11", "Sampler.batch cyclic (the default) vs numpy at B=256",
                           by_name["loaderx cyclic"], 3.0)
    table.notes.append("per batch = median of interleaved rounds; 'fill' writes into a "
                       "preallocated array (the loader's path)")
    rep.emit(table)
