"""Why the demo's raw gather trails npy-mmap: a pool helper that has gone to sleep.

    python3 benchmarks/probes/pool_wake.py            (about 30 s)

The demo reads 256 images of 3 KiB (768 KiB a batch, from a 12 MiB set that fits the CPU's
last-level cache) and then 256 labels, step after step. A gather of 768 KiB is shared with a pool
thread. Back to back, the helper is still awake when the next batch comes and joins at once;
with any other short call in between (the 3 us label gather is enough), it has gone back to
sleep, and waking it costs the caller a futex system call and the helper the time a virtual CPU
takes to come out of idle. It then arrives when the caller has copied most of the batch itself.
This prints each case side by side (medians of timed calls, one process):

- images only: the 768 KiB gather back to back;
- images + labels: the same with the label gather in between (the demo's loop);
- images + sleep: the same with a 5 us busy wait in between instead;
- the same two with the batch copied on the calling thread alone (64-record pieces), which no
  pause slows;
- NumPy fancy indexing of the same rows, in both patterns.

Then the same rows from a set of 512 MiB (far out of the CPU caches, the usual case in
training): there the second core's help is worth its wake-up, which is why batches of this size
keep going to the pool.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._loading.sampler import Sampler  # noqa: E402

RECORDS = 4096
BATCH = 256
STEPS = 20000


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def median_us(step: Callable[[np.ndarray], None], between: Callable[[np.ndarray], None] | None,
              sampler: Sampler) -> float:
    """Median microseconds of step(indices) over STEPS steps, with between() untimed after each."""
    indices = np.empty(BATCH, dtype=np.int64)
    samples = np.empty(STEPS)
    for s in range(STEPS):
        sampler.fill(s, indices)
        started = time.perf_counter_ns()
        step(indices)
        samples[s] = time.perf_counter_ns() - started
        if between is not None:
            between(indices)
    return float(np.median(samples)) / 1000


Step = Callable[[np.ndarray], None]


def gathers(data: DenseDataset, label: DenseDataset) -> tuple[Step, Step, Step]:
    """The image gather on the pool, the same on the calling thread, and the label gather."""
    out = np.empty((BATCH, *data.item_shape), dtype=data.dtype)
    label_out = np.empty(BATCH, dtype=label.dtype)

    def pooled(indices: np.ndarray) -> None:
        data.gather_into(indices, out)

    def inline(indices: np.ndarray) -> None:
        for start in range(0, BATCH, 64):  # 192 KiB each: under the pool threshold
            data.gather_into(indices[start:start + 64], out[start:start + 64])

    def labels_between(indices: np.ndarray) -> None:
        label.gather_into(indices, label_out)

    return pooled, inline, labels_between


def measure(records: int, seed: int, report: Callable[[np.ndarray, Step, Step, Step, Sampler], None]) -> None:
    """Writes `records` images of 3 KiB and their labels, then hands the gathers to report."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (records, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, records).astype(np.int64)
    with tempfile.TemporaryDirectory() as work:
        from_numpy(Path(work) / "images", images, codec="raw")
        from_numpy(Path(work) / "labels", labels, codec="raw")
        with DenseDataset(Path(work) / "images") as data, DenseDataset(Path(work) / "labels") as label:
            pooled, inline, labels_between = gathers(data, label)
            report(images, pooled, inline, labels_between, Sampler(records, BATCH, seed=0))


def in_cache(images: np.ndarray, pooled: Step, inline: Step, labels_between: Step, sampler: Sampler) -> None:
    def numpy_rows(indices: np.ndarray) -> None:
        images[indices]

    def pause(_indices: np.ndarray) -> None:
        busy_wait(5e-6)

    rows = (("loaderx, pool", pooled), ("loaderx, calling thread", inline), ("numpy images[idx]", numpy_rows))
    for _name, step in rows:  # warm-up: page faults, caches, the pool's threads
        median_us(step, labels_between, sampler)
    print(f"median us per 768 KiB batch from {len(images)} records (12 MiB: in the last-level cache), "
          f"{STEPS} steps each; what runs in between is untimed")
    print(f"{'':28} {'back to back':>12} {'+ labels':>10} {'+ 5 us busy':>12}")
    for name, step in rows:
        cells = [median_us(step, between, sampler) for between in (None, labels_between, pause)]
        print(f"{name:28} {cells[0]:12.1f} {cells[1]:10.1f} {cells[2]:12.1f}")


def out_of_cache(images: np.ndarray, pooled: Step, inline: Step, labels_between: Step, sampler: Sampler) -> None:
    rows = (("loaderx, pool", pooled), ("loaderx, calling thread", inline))
    for _name, step in rows:
        median_us(step, labels_between, sampler)
    print(f"\nthe same from {len(images)} records (512 MiB: out of cache), labels in between")
    for name, step in rows:
        print(f"{name:28} {median_us(step, labels_between, sampler):10.1f}")


def main() -> None:
    measure(RECORDS, 0, in_cache)
    measure((512 << 20) // 3072, 1, out_of_cache)


if __name__ == "__main__":
    main()
