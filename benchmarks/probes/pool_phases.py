"""Whether the pool's helper speeds a gather up or slows it down, minute by minute, and what the
store's advisor makes of it.

    python3 benchmarks/probes/pool_phases.py [--seconds 60] [--block 0.2] [--record-kib 3]
        [--set-mib 12]

The demo's batch: 256 random images of 3 KiB (768 KiB) from a 12 MiB set, which the CPU caches
hold. On the 2-core VM this was written on, such a batch is copied about 1.6x faster with the
pool's helper for a while, then for a while about 1.2x slower than by the calling thread alone
(the two virtual cores then seem to share one physical core), and back, many times a minute.
The store's gather advisor (zig/src/os/pool_advice.zig) learns which way is faster as it goes.
`--record-kib 12 --set-mib 512` shows the usual training case instead: out of the CPU caches,
where the helper pays all the time.

Rows, each a block of back-to-back batches of DenseDataset.gather_into, cycled in one process
for --seconds, with the pool policy (loaderx._native.library.set_pool_policy) set for each block:

- `auto (default)`: the store's advisor decides whether the helper joins;
- `helpers always`: the helper joins every batch (what every release before the advisor did);
- `thread alone`: it never does;
- `numpy a[idx]`: fancy indexing of a memmap of the same rows, for reference.

Printed: each row's median time per batch; then, cycle by cycle (the rows of one cycle run a
fraction of a second apart), how often the helper hurt (`helpers always` more than 10% slower
than `thread alone`) and how often it helped (more than 10% faster), and how `auto` compared
with the faster of the two in each kind of cycle.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loaderx._native import library as _native  # noqa: E402
from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402

BATCH = 256
BATCHES = 64


def block_time(run: Callable[[np.ndarray], object], batches: list[np.ndarray], seconds: float
               ) -> float:
    """Microseconds per batch over a block of about `seconds`."""
    started = time.perf_counter()
    count = 0
    while time.perf_counter() - started < seconds:
        for batch in batches:
            run(batch)
        count += len(batches)
    return (time.perf_counter() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--block", type=float, default=0.2, help="seconds per timed block")
    parser.add_argument("--record-kib", type=int, default=3, help="record size (KiB)")
    parser.add_argument("--set-mib", type=int, default=12, help="data set size (MiB)")
    args = parser.parse_args()
    record_bytes = args.record_kib << 10
    count = (args.set_mib << 20) // record_bytes
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (count, record_bytes), dtype=np.uint8)
    batches = [rng.integers(0, count, BATCH) for _ in range(BATCHES)]
    with tempfile.TemporaryDirectory() as folder:
        np.save(f"{folder}/images.npy", images)
        memmap = np.load(f"{folder}/images.npy", mmap_mode="r")
        from_numpy(f"{folder}/images", images, codec="raw")
        dataset = DenseDataset(f"{folder}/images")
        out = np.empty((BATCH, record_bytes), dtype=np.uint8)
        for batch in batches[:4]:
            dataset.gather_into(batch, out)
            if not np.array_equal(out, images[batch]):
                raise AssertionError("the gather returned other bytes than the array")

        gather = lambda batch: dataset.gather_into(batch, out)  # noqa: E731
        rows: dict[str, tuple[int, Callable[[np.ndarray], object]]] = {
            "auto (default)": (_native.POOL_AUTO, gather),
            "helpers always": (_native.POOL_ALWAYS, gather),
            "thread alone": (_native.POOL_NEVER, gather),
            "numpy a[idx]": (_native.POOL_AUTO, lambda batch: memmap[batch]),
        }
        times: dict[str, list[float]] = {name: [] for name in rows}
        finish = time.perf_counter() + args.seconds
        while time.perf_counter() < finish:
            for name, (policy, run) in rows.items():
                _native.set_pool_policy(policy)
                times[name].append(block_time(run, batches, args.block))
        _native.set_pool_policy(_native.POOL_AUTO)
        dataset.close()
    report(times, f"batches of {BATCH} x {args.record_kib} KiB from a {args.set_mib} MiB set")


def report(times: dict[str, list[float]], what: str) -> None:
    cycles = len(times["auto (default)"])
    print(f"{cycles} cycles; {what}; medians per batch:")
    for name, values in times.items():
        print(f"  {name:15s} {statistics.median(values):7.2f} us")
    cycle_rows = zip(times["auto (default)"], times["helpers always"], times["thread alone"])
    kinds: dict[str, list[tuple[float, float]]] = {"hurt": [], "helped": [], "even": []}
    for auto, always, alone in cycle_rows:
        kind = "hurt" if always > alone * 1.1 else "helped" if always * 1.1 < alone else "even"
        kinds[kind].append((auto / min(always, alone), always / alone))
    for kind, pairs in kinds.items():
        if not pairs:
            print(f"cycles where the helper {kind}: none")
            continue
        auto_ratios = [auto for auto, _ in pairs]
        always_ratios = [always for _, always in pairs]
        print(f"cycles where the helper {kind}: {len(pairs)} of {cycles}")
        print(f"  helpers always against the thread alone: median "
              f"{statistics.median(always_ratios):.2f}x the time")
        print(f"  auto against the faster of the two: median {statistics.median(auto_ratios):.2f}x "
              f"the time, worst {max(auto_ratios):.2f}x")


if __name__ == "__main__":
    main()
