"""Compressed gathers: CPU per batch against bagz on one thread (issue 41, point 1).

    .cache/bench-venv-cp311/bin/python benchmarks/probes/zstd_per_core.py [--rounds 7]

(the bench venv has bagz 0.3.8, pinned in benchmarks/layers/env.py.) The store layer's 12 KiB
records (64x64x3 uint8, "mild" and "smooth", 4,000 of each) written three ways: loaderx zstd,
loaderx zstd_dict (a trained dictionary, level 19) and bagz's per-record zstd (level 3). The
same 64 batches of 256 random indices are read from each, round-robin in one process:
- CPU time per batch on one thread (loaderx with the pool's helpers off, POOL_NEVER; bagz with
  max_parallelism=1), from the process's CPU clock: what a batch costs a core, the figure the
  issue compares;
- wall time per batch of loaderx as shipped (its helpers on, POOL_AUTO) against bagz on one
  thread, the issue's ">= 1.9x on two cores".
Every contender's first batch must equal the records byte for byte before it is timed.
Targets (issue 41 §1): loaderx zstd's CPU per batch at most bagz's; zstd_dict at least as fast
as zstd; loaderx (two cores) >= 1.9x bagz (one thread), wall.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from layers import data, headroom  # noqa: E402
from loaderx import zrecord  # noqa: E402
from loaderx.converter import from_numpy  # noqa: E402
from loaderx.dataset import DenseDataset  # noqa: E402

RECORDS: Final = 4_000
SHAPE: Final = (64, 64, 3)
BATCH: Final = 256
BLOCK_CALLS: Final = 24

Gather = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.uint8]]


def bagz_reader(folder: Path, array: npt.NDArray[np.uint8]) -> Gather:
    """A .bagz of `array` (per-record zstd level 3), read on one thread."""
    import bagz

    folder.mkdir(parents=True)
    path = str(folder / "records.bagz")
    with bagz.Writer(path, bagz.Writer.Options(compression=bagz.CompressionZstd(level=3))) as w:
        for record in array:
            w.write(record.tobytes())
    return bagz_open(path)


def bagz_open(path: str) -> Gather:
    import bagz

    options = bagz.Reader.Options(compression=bagz.CompressionZstd(level=3), max_parallelism=1)
    reader = bagz.Reader(path, options)

    def gather(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
        rows = reader.read_indices(indices)
        return np.frombuffer(b"".join(rows), np.uint8).reshape(len(indices), *SHAPE)

    return gather


def loaderx_reader(folder: Path, array: npt.NDArray[np.uint8],
                   codec: Literal["zstd", "zstd_dict"], verify: bool | None = None) -> Gather:
    """A loaderx dataset of `array`, read by gather_into; verify=False skips the CRC32C of
    each record's stored bytes (bagz keeps no checksum), None is the default read."""
    if not folder.exists():
        from_numpy(str(folder), array, codec=codec)
    dataset = DenseDataset(str(folder), verify=verify) if verify is not None else DenseDataset(
        str(folder))
    out = np.empty((BATCH, *SHAPE), np.uint8)

    def gather(indices: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
        dataset.gather_into(indices, out)
        return out

    return gather


def timed_block(gather: Gather, batches: itertools.cycle[npt.NDArray[np.int64]],
                policy: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per batch over BLOCK_CALLS batches under a pool policy."""
    zrecord.set_pool_policy(policy)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(BLOCK_CALLS):
        gather(next(batches))
    return ((time.process_time() - cpu) / BLOCK_CALLS, (time.perf_counter() - wall) / BLOCK_CALLS)


def _read_batches(path: str, batches: list[npt.NDArray[np.int64]], count: int) -> None:
    gather = bagz_open(path)
    for indices in itertools.islice(itertools.cycle(batches), count):
        gather(indices)


def two_process_scaling(path: str, batches: list[npt.NDArray[np.int64]], rounds: int) -> float:
    """How much faster two processes of bagz on one thread each get through twice the batches
    than one process gets through its share: the machine's own two-core scaling of this very
    work (no threads, no shared state), the ceiling of any two-core reader's gain."""
    return headroom.process_gain(_read_batches, (path, batches, 4 * BLOCK_CALLS), rounds)


def probe(kind: str, work: Path, rounds: int) -> None:
    array = data.generate(kind, RECORDS, SHAPE, seed=0)
    batches = data.batches(RECORDS, BATCH, 64, seed=5)
    readers = {
        "loaderx zstd": loaderx_reader(work / f"{kind}-zstd", array, "zstd"),
        "loaderx zstd_dict": loaderx_reader(work / f"{kind}-dict", array, "zstd_dict"),
        "bagz zstd": bagz_reader(work / f"{kind}-bagz", array),
        "loaderx zstd, unchecked": loaderx_reader(work / f"{kind}-zstd", array, "zstd",
                                                  verify=False),
    }
    for name, gather in readers.items():
        if not np.array_equal(gather(batches[0]), array[batches[0]]):
            raise AssertionError(f"{name} returned wrong records")
    # (name, reader, pool policy, which clock the row reports)
    rows = [
        ("loaderx zstd, 1 thread", "loaderx zstd", zrecord.POOL_NEVER),
        ("loaderx zstd_dict, 1 thread", "loaderx zstd_dict", zrecord.POOL_NEVER),
        ("bagz zstd, 1 thread", "bagz zstd", zrecord.POOL_NEVER),
        ("loaderx zstd verify=False, 1 thread", "loaderx zstd, unchecked", zrecord.POOL_NEVER),
        ("loaderx zstd, 2 cores", "loaderx zstd", zrecord.POOL_AUTO),
        ("loaderx zstd_dict, 2 cores", "loaderx zstd_dict", zrecord.POOL_AUTO),
    ]
    cycles = {name: itertools.cycle(batches) for name, _, _ in rows}
    for name, reader, policy in rows:  # warm-up: page cache, contexts, the advisors
        for _ in range(3):
            timed_block(readers[reader], cycles[name], policy)
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    wall: dict[str, list[float]] = {name: [] for name, _, _ in rows}
    for round_index in range(rounds):
        shift = round_index % len(rows)
        for name, reader, policy in rows[shift:] + rows[:shift]:
            c, w = timed_block(readers[reader], cycles[name], policy)
            cpu[name].append(c)
            wall[name].append(w)
    zrecord.set_pool_policy(zrecord.POOL_AUTO)
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    med_wall = {name: statistics.median(v) for name, v in wall.items()}
    mib = BATCH * array[0].nbytes / float(1 << 20)
    print(f"\n{kind}: {RECORDS} records of {array[0].nbytes} B, batches of {BATCH}, "
          f"median of {rounds} interleaved rounds of {BLOCK_CALLS} batches")
    print(f"  {'contender':36s} {'CPU/batch':>10s} {'wall/batch':>11s} {'MiB/s':>7s}")
    for name in cpu:
        print(f"  {name:36s} {med_cpu[name] * 1e3:7.2f} ms {med_wall[name] * 1e3:8.2f} ms "
              f"{mib / med_wall[name]:7.0f}")
    bagz_cpu = med_cpu["bagz zstd, 1 thread"]
    print(f"  CPU per batch, loaderx zstd / bagz:       "
          f"{med_cpu['loaderx zstd, 1 thread'] / bagz_cpu:.3f}x (wanted <= 1.000x)")
    print(f"  CPU per batch, loaderx zstd verify=False / bagz: "
          f"{med_cpu['loaderx zstd verify=False, 1 thread'] / bagz_cpu:.3f}x")
    print(f"  CPU per batch, loaderx zstd_dict / bagz:  "
          f"{med_cpu['loaderx zstd_dict, 1 thread'] / bagz_cpu:.3f}x")
    print(f"  speed, zstd_dict / zstd (1 thread):       "
          f"{med_wall['loaderx zstd, 1 thread'] / med_wall['loaderx zstd_dict, 1 thread']:.3f}x"
          f" (wanted >= 1.000x)")
    print(f"  speed, zstd_dict / zstd (2 cores):        "
          f"{med_wall['loaderx zstd, 2 cores'] / med_wall['loaderx zstd_dict, 2 cores']:.3f}x")
    gain = med_wall['bagz zstd, 1 thread'] / med_wall['loaderx zstd, 2 cores']
    print(f"  speed, loaderx zstd 2 cores / bagz 1 thread: {gain:.3f}x (wanted >= 1.900x)")
    ceiling = two_process_scaling(str(work / f"{kind}-bagz" / "records.bagz"), batches, rounds)
    print(f"  two bagz processes / one (this machine's ceiling for the line above): "
          f"{ceiling:.3f}x; loaderx reached {gain / ceiling:.3f} of it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for kind in ("mild", "smooth"):
            probe(kind, Path(work), args.rounds)


if __name__ == "__main__":
    main()
