"""What gather verification costs, per codec: the same gathers with verify=False, the default
(None: compressed records checked) and verify=True (every record), side by side in one run.

    python3 benchmarks/verify_cost.py [--records 4000] [--record-size 12288] [--rounds 15]
                                      [--codecs raw,zstd] [--data mild,smooth]

Each round times `--batches` random gathers of 256 records into one reused array through
DenseDataset.gather_into for every (codec, data set, verify) combination, interleaved, and the
table shows each setting's best round (the least disturbed by other processes on a shared
machine) and its cost against verify=False. Data sets:
"mild" (per-record zstd-3 compresses ~1.1x) and "smooth" (image-like, ~6x), the default; with
--data also "noise" (incompressible: a zstd store keeps every record raw) and "mixed" (one
record in ten noise, the rest smooth).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402

SETTINGS = {"off": False, "default": None, "all": True}
BATCH = 256


def data_sets(records: int, record_size: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mild = rng.integers(0, 256, size=(records, record_size), dtype=np.uint8)
    mild[:, ::9] = 0  # a little redundancy: zstd-3 gains about 1.1x per record
    steps = rng.integers(-1, 2, size=(records, record_size), dtype=np.int16)
    smooth = (np.cumsum(steps, axis=1) // 4 % 256).astype(np.uint8)
    # Records zstd cannot shrink are stored raw even under a zstd codec: "noise" is all such
    # records (already-compressed images, say), "mixed" one in ten among smooth ones.
    noise = rng.integers(0, 256, size=(records, record_size), dtype=np.uint8)
    mixed = smooth.copy()
    mixed[::10] = noise[::10]
    return {"mild": mild, "smooth": smooth, "noise": noise, "mixed": mixed}


def time_round(ds: DenseDataset, batches: list[np.ndarray], out: np.ndarray) -> float:
    started = time.perf_counter()
    for indices in batches:
        ds.gather_into(indices, out)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--record-size", type=int, default=12288)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--codecs", default="raw,zstd")
    parser.add_argument("--data", default="mild,smooth",
                        help="data sets, of mild, smooth, noise (zstd stores them raw) and mixed "
                        "(one record in ten noise)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(1)
    batches = [rng.integers(0, args.records, BATCH).astype(np.int64) for _ in range(args.batches)]
    batch_mib = BATCH * args.record_size * args.batches / (1 << 20)
    with tempfile.TemporaryDirectory(prefix="loaderx-verify-cost-") as tmp:
        opened: dict[tuple[str, str, str], DenseDataset] = {}
        names = args.data.split(",")
        for data_name, array in data_sets(args.records, args.record_size).items():
            if data_name not in names:
                continue
            for codec in args.codecs.split(","):
                path = Path(tmp) / f"{data_name}-{codec}"
                from_numpy(path, array, codec=codec)
                for setting, verify in SETTINGS.items():
                    opened[(codec, data_name, setting)] = DenseDataset(path, verify=verify)
        out = np.empty((BATCH, args.record_size), dtype=np.uint8)
        times: dict[tuple[str, str, str], list[float]] = {key: [] for key in opened}
        for key, ds in opened.items():
            time_round(ds, batches[:4], out)  # warm the page cache and the contexts
        for _ in range(args.rounds):
            for key, ds in opened.items():
                times[key].append(time_round(ds, batches, out))
        print(f"{BATCH} x {args.record_size} B random gathers, best of {args.rounds} rounds")
        print("| codec | data | verify=False | default | verify=True | default cost | True cost |")
        print("|---|---|---|---|---|---|---|")
        for codec in args.codecs.split(","):
            for data_name in names:
                best = {s: min(times[(codec, data_name, s)]) for s in SETTINGS}
                rates = {s: batch_mib / best[s] for s in SETTINGS}
                cost = {s: best[s] / best["off"] - 1 for s in SETTINGS}
                print(
                    f"| {codec} | {data_name} | {rates['off']:,.0f} MiB/s | {rates['default']:,.0f} MiB/s"
                    f" | {rates['all']:,.0f} MiB/s | {cost['default']:+.1%} | {cost['all']:+.1%} |"
                )
        for ds in opened.values():
            ds.close()


if __name__ == "__main__":
    main()
