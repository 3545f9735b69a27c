"""Gather rate by where the destination lies within its page: a raw gather of 256 records of
12 KiB into a ring of arrays (the loader's), each array placed at the same offset from a page
boundary, one row per offset, interleaved in one process.

Why: a copy whose destination lies a little past its source modulo 4096 can make every load
wait for a store that shares its low 12 bits ("4K aliasing", zig/src/store/raw_copy.zig). Raw
records of whole pages lie at page offsets in their chunk, and glibc places large arrays at a
page plus 16, so offset 16 is the one NumPy's own arrays get. Every row should run at about
the same rate.

    .venv/bin/python benchmarks/probes/destination_offsets.py [--ring 5]
        [--offsets 0,8,16,32,48,96,2048]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._loading.sampler import Sampler  # noqa: E402

BATCH = 256
SHAPE = (64, 64, 3)
PAGE = 4096


def placed_ring(path: Path, offset: int, ring: int) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
    """One step of a gather into `ring` arrays in turn, each at `offset` bytes past a page;
    it returns the step's indices and the array they went to."""
    dataset = DenseDataset(str(path))
    sampler = Sampler(len(dataset), BATCH, mode="cyclic", seed=0)
    indices = np.empty(BATCH, dtype=np.int64)
    size = BATCH * int(np.prod(SHAPE))
    outs = []
    for _ in range(ring):
        backing = np.empty(size + 2 * PAGE, dtype=np.uint8)
        start = (-backing.ctypes.data) % PAGE + offset
        out = backing[start : start + size].reshape(BATCH, *SHAPE)
        out[:] = 0  # fault the pages in before timing
        outs.append(out)
    steps = itertools.count()

    def step() -> tuple[np.ndarray, np.ndarray]:
        s = next(steps)
        sampler.fill(s, indices)
        out = outs[s % ring]
        dataset.gather_into(indices, out)
        return indices, out

    return step


def rate(step: Callable[[], object], seconds: float) -> float:
    began = time.perf_counter()
    count = 0
    while time.perf_counter() - began < seconds:
        step()
        count += 1
    return count / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ring", type=int, default=5)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--offsets", default="0,8,16,32,48,96,2048")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=float, default=0.4, help="seconds per timed block")
    args = parser.parse_args(argv)
    offsets = [int(value) for value in args.offsets.split(",")]
    if any(not 0 <= offset < PAGE or offset % 8 for offset in offsets):
        parser.error("offsets are multiples of 8 below 4096")
    with tempfile.TemporaryDirectory(prefix="destination-offsets-") as tmp:
        path = Path(tmp) / "raw"
        rng = np.random.default_rng(0)
        records = rng.integers(0, 256, (args.records, *SHAPE), dtype=np.uint8)
        from_numpy(str(path), records, codec="raw")
        rows = {offset: placed_ring(path, offset, args.ring) for offset in offsets}
        for offset, step in rows.items():
            for _ in range(200):  # past the advisors' warm-up
                indices, out = step()
            if not np.array_equal(out, records[indices]):
                print(f"offset {offset}: the gather wrote other bytes than the records")
                return 1
        rates: dict[int, list[float]] = {offset: [] for offset in offsets}
        for _ in range(args.rounds):
            for offset, step in rows.items():
                rates[offset].append(rate(step, args.block))
    print(f"ring of {args.ring} arrays of {BATCH} x 12 KiB; median of {args.rounds} "
          f"interleaved blocks of {args.block} s")
    print(f"{'offset in page':>15s} {'batches/s':>10s}")
    for offset, values in rates.items():
        print(f"{offset:>15d} {float(np.median(values)):>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
