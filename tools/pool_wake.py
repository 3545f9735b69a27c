"""Why the demo's raw gather trails npy-mmap: a pool helper that has gone to sleep.

    python3 tools/pool_wake.py            (about 15 s)

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
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loaderx.converter import from_numpy  # noqa: E402
from loaderx.dataset import DenseDataset  # noqa: E402
from loaderx.sampler import Sampler  # noqa: E402

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


def main() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (RECORDS, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, RECORDS).astype(np.int64)
    with tempfile.TemporaryDirectory() as work:
        from_numpy(Path(work) / "images", images, codec="raw")
        from_numpy(Path(work) / "labels", labels, codec="raw")
        with DenseDataset(Path(work) / "images") as data, DenseDataset(Path(work) / "labels") as label:
            sampler = Sampler(RECORDS, BATCH, seed=0)
            out = np.empty((BATCH, 32, 32, 3), dtype=np.uint8)
            label_out = np.empty(BATCH, dtype=np.int64)

            def pooled(indices: np.ndarray) -> None:
                data.gather_into(indices, out)

            def inline(indices: np.ndarray) -> None:
                for start in range(0, BATCH, 64):  # 192 KiB each: under the pool threshold
                    data.gather_into(indices[start:start + 64], out[start:start + 64])

            def numpy_rows(indices: np.ndarray) -> None:
                images[indices]

            def labels_between(indices: np.ndarray) -> None:
                label.gather_into(indices, label_out)

            def pause(_indices: np.ndarray) -> None:
                busy_wait(5e-6)

            print(f"median us per 768 KiB batch ({STEPS} steps each; the pause is untimed)")
            print(f"{'':28} {'back to back':>12} {'+ labels':>10} {'+ 5 us busy':>12}")
            rows = (("loaderx, pool", pooled), ("loaderx, calling thread", inline),
                    ("numpy images[idx]", numpy_rows))
            for _name, step in rows:  # warm-up: page faults, caches, the pool's threads
                median_us(step, labels_between, sampler)
            for name, step in rows:
                cells = [median_us(step, between, sampler) for between in (None, labels_between, pause)]
                print(f"{name:28} {cells[0]:12.1f} {cells[1]:10.1f} {cells[2]:12.1f}")


if __name__ == "__main__":
    main()
