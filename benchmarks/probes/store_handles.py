"""How much handles of the same data differ: raw gather_into from several handles of one store
and of the same records in 64 shards, interleaved in one process, each into its own array.

Why: every handle (and every view over shards) learns for itself whether its large raw gathers
run faster with the pool's helpers, with streaming stores and with non-temporal loads
(zig/src/os/pool_advice.zig). Handles of one store differ only in what they learned, so their
spread is what the learning adds to any ratio of two handles, such as the shards bench's
"64 shards vs 1 store". `--stores cached` (or `streaming`) fixes the stores for the process, to
see the spread without that choice.

    .venv/bin/python benchmarks/probes/store_handles.py [--stores auto] [--single 3] [--sharded 2]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.layers import data, timing  # noqa: E402
from benchmarks.layers.shards import SHARD_COUNT, write_sharded  # noqa: E402

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._native import library  # noqa: E402

STORES = {"auto": library.STORES_AUTO, "cached": library.STORES_CACHED,
          "streaming": library.STORES_STREAMING}


def gather_call(path: Path, batches: list[np.ndarray], array: np.ndarray,
                opened: list[DenseDataset], shared: np.ndarray | None) -> Callable[[], object]:
    """A new handle's gather_into over `batches` in turn, into `shared` or an array of its own,
    checked once against `array`."""
    dataset = DenseDataset(str(path))
    opened.append(dataset)
    out = np.empty((len(batches[0]), *array.shape[1:]), dtype=array.dtype) if shared is None \
        else shared
    dataset.gather_into(batches[0], out)
    if not np.array_equal(out, array[batches[0]]):
        raise SystemExit(f"{path}: a handle returned wrong records")
    cycle = itertools.cycle(batches)
    return lambda: dataset.gather_into(next(cycle), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=64 * 1024,
                        help="records in all, rounded down to a multiple of 64 (each shard holds a "
                        "64th); at least 256")
    parser.add_argument("--single", type=int, default=3, help="handles of the one store")
    parser.add_argument("--sharded", type=int, default=2, help="handles of the 64 shards")
    parser.add_argument("--stores", choices=sorted(STORES), default="auto")
    parser.add_argument("--destination", choices=("own", "shared"), default="own",
                        help="each handle gathers into an array of its own, or all into one")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--block", type=float, default=0.2, help="seconds of each block")
    args = parser.parse_args()
    records = args.records // SHARD_COUNT * SHARD_COUNT
    if records < 256 or args.single < 1 or args.sharded < 0:
        parser.error("--records must be at least 256, --single at least 1, --sharded at least 0")
    library.set_stores_policy(STORES[args.stores])
    array = data.generate("mild", records, (64, 64, 3), seed=0)
    batches = data.batches(records, 256, 64, seed=5)
    with tempfile.TemporaryDirectory() as folder:
        single, sharded = Path(folder) / "one", Path(folder) / "shards"
        from_numpy(str(single), array, codec="raw")
        write_sharded(sharded, array, "raw", records // SHARD_COUNT)
        opened: list[DenseDataset] = []
        shared = None if args.destination == "own" else np.empty((256, 64, 64, 3), np.uint8)
        calls = {f"1 store, handle {k + 1}": gather_call(single, batches, array, opened, shared)
                 for k in range(args.single)}
        calls.update({f"{SHARD_COUNT} shards, handle {k + 1}":
                      gather_call(sharded, batches, array, opened, shared)
                      for k in range(args.sharded)})
        try:
            timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
        finally:
            for dataset in opened:
                dataset.close()
    reference = statistics.mean(timings[f"1 store, handle {k + 1}"].median
                                for k in range(args.single))
    for name, t in timings.items():
        print(f"{name:22} {t.median * 1e6:9.1f} us  {reference / t.median:6.3f}x")
    print(f"medians of {args.rounds} interleaved rounds, stores {args.stores}, "
          f"{args.destination} destination; "
          f"x: against the mean of the 1-store handles")


if __name__ == "__main__":
    main()
