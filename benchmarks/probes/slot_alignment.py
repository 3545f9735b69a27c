"""CPU time of a raw gather by how its slots line up: 256 records a batch from 10,000, one
thread (the pool's helpers off), one stores policy for every row, rows interleaved in one
process, into a ring of eight destinations (as a loader's).

Rows: dense records of 4,096 bytes (every slot starts a 16-byte block), dense ones of 4,100
bytes (three slot boundaries in four inside a block), and packed ragged batches of records of
4,096 bytes, of 4,100 bytes, and of 4 bytes to 8 KiB (int32 tokens, 1 to 2,047 of them). Each
row's bytes per CPU second are given against the 4,096-byte dense row's.

Why: a streamed copy that writes the ends of each slot with ordinary stores, between streaming
ones, pays for every line they share (raw_copy.zig, StreamedRun). Thread CPU time, not wall
time, keeps the comparison readable on a shared machine.

    .venv/bin/python benchmarks/probes/slot_alignment.py [--stores streaming|cached|auto]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from loaderx._native import library as _native  # noqa: E402
from loaderx.dataset import DenseDataset, RaggedDataset  # noqa: E402

COUNT = 10_000
BATCH = 256
RING = 8
STORES = {"streaming": _native.STORES_STREAMING, "cached": _native.STORES_CACHED,
          "auto": _native.STORES_AUTO}


def build(folder: Path) -> dict[str, tuple[DenseDataset | RaggedDataset, float]]:
    """Every row's dataset and its mean record size in bytes."""
    rng = np.random.default_rng(1)
    made: dict[str, tuple[DenseDataset | RaggedDataset, float]] = {}
    for size in (4096, 4100):
        dense = DenseDataset(folder / f"dense{size}", dtype=np.uint8, item_shape=(size,),
                             codec="raw")
        dense.append(rng.integers(0, 256, size=(COUNT, size), dtype=np.uint8))
        made[f"dense {size} B"] = (dense, float(size))
        ragged = RaggedDataset(folder / f"ragged{size}", dtype=np.uint8, codec="raw")
        ragged.append([rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(COUNT)])
        made[f"packed {size} B"] = (ragged, float(size))
    lengths = rng.integers(1, 2048, size=COUNT)
    tokens = RaggedDataset(folder / "tokens", dtype=np.int32, codec="raw")
    tokens.append([rng.integers(0, 32_000, size=int(n), dtype=np.int32) for n in lengths])
    made["packed tokens, 4 B to 8 KiB"] = (tokens, float(lengths.mean()) * 4)
    return made


def step(dataset: DenseDataset | RaggedDataset, rng: np.random.Generator) -> Callable[[int], None]:
    """One gather of a random batch into destination k of the ring."""
    if isinstance(dataset, DenseDataset):
        outs = [np.empty((BATCH, *dataset.item_shape), dtype=dataset.dtype) for _ in range(RING)]
        return lambda k: dataset.gather_into(rng.integers(0, COUNT, BATCH), outs[k % RING])
    buffers = [np.empty(BATCH * 8192 * 4, dtype=np.uint8) for _ in range(RING)]
    offsets = np.empty(BATCH + 1, dtype=np.uint64)

    def gather(k: int) -> None:
        assert dataset.gather_packed(rng.integers(0, COUNT, BATCH), buffers[k % RING], offsets)

    return gather


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", choices=sorted(STORES), default="streaming")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    _native.set_pool_policy(_native.POOL_NEVER)
    _native.set_stores_policy(STORES[args.stores])
    with tempfile.TemporaryDirectory() as folder:
        made = build(Path(folder))
        rng = np.random.default_rng(5)
        steps = {name: step(dataset, rng) for name, (dataset, _) in made.items()}
        times: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(args.rounds):
            for name, gather in steps.items():
                start = time.thread_time()
                for k in range(args.batches):
                    gather(k)
                times[name].append((time.thread_time() - start) / args.batches)
        medians = {name: float(np.median(t)) for name, t in times.items()}
        reference = made["dense 4096 B"][1] / medians["dense 4096 B"]
        print(f"stores {args.stores}, pool off; CPU time per batch of {BATCH}, median of "
              f"{args.rounds} rounds")
        for name, (_, size) in made.items():
            rate = size / medians[name]
            print(f"  {name:28s} {medians[name] * 1e6:8.1f} us   bytes per CPU second "
                  f"{rate / reference:.3f}x of dense 4096 B")
        for dataset, _ in made.values():
            dataset.close()


if __name__ == "__main__":
    main()
