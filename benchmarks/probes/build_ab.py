"""Two builds of loaderx side by side: the rate of a few hot calls in build B over build A.

    python3 benchmarks/probes/build_ab.py --a /path/to/old/checkout --b . [--pairs 8]

Each checkout must hold a built library and, to compare what users run, its compiled modules
(`python3 build.py native` and `compile`, or the same steps by hand). The probe writes the same
records with each build (into a folder of its own, so a format change between them cannot
matter), then runs pairs of child processes, one per build, in an order that alternates from
pair to pair; each child times every row for `--block` seconds after a warm-up and prints its
rates. What is printed is, per row, the median over the pairs of B's rate over A's and the
lowest and highest pair: a machine whose speed drifts moves both children of a pair alike.

Rows (public API only, so that any commit since the spec can be measured):
- loader: DataLoader over 12 KiB records, batch 256, no transform (issue 38 asks that the loader
  without a transform keeps its speed, >= 0.95x of the build before);
- loader + labels: the same with an int64 label stream;
- ds[i]: one 12 KiB record;
- ds[idx] 1 KiB: 256 random indices into 1 KiB records;
- gather_into: 256 random 12 KiB records into one reused array;
- with --augment, also the DataLoader with the bench's GIL-bound `augment` transform in 2
  worker threads and in 2 worker processes (builds from issue 38 on: worker_type="process").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import numpy as np
from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

folder, block = sys.argv[1], float(sys.argv[2])
big, small, labels = folder + "/big", folder + "/small", folder + "/labels"
rng = np.random.default_rng(0)
try:
    DenseDataset(big)
except Exception:
    from_numpy(big, rng.integers(0, 256, (10_000, 64, 64, 3), dtype=np.uint8), progress=False)
    from_numpy(small, rng.integers(0, 256, (100_000, 1024), dtype=np.uint8), progress=False)
    from_numpy(labels, np.arange(10_000, dtype=np.int64), progress=False)

def rate(step):
    for _ in range(20):
        step()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < block:
        for _ in range(10):
            step()
        done += 10
    return done / (time.perf_counter() - start)

x, y, s = DenseDataset(big), DenseDataset(labels), DenseDataset(small)
idx = rng.integers(0, len(x), 256)
idx_small = rng.integers(0, len(s), 256)
out = np.empty((256, 64, 64, 3), dtype=np.uint8)
rates = {}
with DataLoader({"x": x}, batch_size=256, seed=0) as loader:
    it = iter(loader)
    rates["loader"] = rate(lambda: next(it))
with DataLoader({"x": x, "y": y}, batch_size=256, seed=0) as loader:
    it = iter(loader)
    rates["loader + labels"] = rate(lambda: next(it))
rates["ds[i]"] = rate(lambda: x[17])
rates["ds[idx] 1 KiB"] = rate(lambda: s[idx_small])
rates["gather_into"] = rate(lambda: x.gather_into(idx, out))
if len(sys.argv) > 3:  # --augment: the bench's transform, from this probe's benchmarks folder
    sys.path.append(sys.argv[3])
    from layers.loaders import StreamTransform, augment
    for kind in ("thread", "process"):
        with DataLoader({"x": x}, batch_size=256, seed=0, mode="cyclic", workers=2,
                        transform=StreamTransform(augment), worker_type=kind) as loader:
            it = iter(loader)
            rates[f"augment, {kind} w2"] = rate(lambda: next(it))
print(json.dumps(rates))
"""


def run_child(checkout: Path, folder: Path, block: float, augment: bool) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    extra = [str(Path(__file__).resolve().parents[1])] if augment else []
    done = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(block), *extra],
                          env=env, check=True, capture_output=True, text=True)
    rates: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--a", type=Path, required=True, help="the reference checkout")
    parser.add_argument("--b", type=Path, required=True, help="the checkout measured against it")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--block", type=float, default=1.0, help="seconds per row per child")
    parser.add_argument("--augment", action="store_true",
                        help="also the loader with a GIL-bound transform, threads and processes")
    args = parser.parse_args()
    builds = {"a": args.a.resolve(), "b": args.b.resolve()}
    with tempfile.TemporaryDirectory(prefix="loaderx-ab-") as tmp:
        folders = {name: Path(tmp) / name for name in builds}
        for name, folder in folders.items():
            folder.mkdir()
            run_child(builds[name], folder, 0.05, False)  # writes the records; not timed
        ratios: dict[str, list[float]] = {}
        for pair in range(args.pairs):
            order = ["a", "b"] if pair % 2 == 0 else ["b", "a"]
            got = {name: run_child(builds[name], folders[name], args.block, args.augment)
                   for name in order}
            for row in got["a"]:
                ratios.setdefault(row, []).append(got["b"][row] / got["a"][row])
            print(f"pair {pair + 1}: " + ", ".join(f"{row} {r[-1]:.3f}"
                                                   for row, r in ratios.items()), flush=True)
    print(f"\nB ({builds['b']}) over A ({builds['a']}), {args.pairs} pairs")
    print(f"{'row':<18} {'median':>7} {'lowest':>7} {'highest':>7}")
    for row, r in ratios.items():
        print(f"{row:<18} {statistics.median(r):>6.3f}x {min(r):>6.3f}x {max(r):>6.3f}x")


if __name__ == "__main__":
    main()
