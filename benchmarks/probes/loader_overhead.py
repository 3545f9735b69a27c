"""Where the DataLoader's rate goes below the bare gather, measured side by side in one process.

    python3 benchmarks/probes/loader_overhead.py [--records 10000] [--rounds 11] [--block 0.5]

Rows, each a block of back-to-back batches per round, rounds interleaved (medians printed):
- bare gather, 1 buffer: sampler + gather_into one reused array on this thread (the loader
  table's reference);
- bare gather, ring of 2 and ring of 5: the same into 2 (or 5) arrays in turn. 5 is the
  loader's ring of prefetch + 1 slots; 2 is the fewest any loader that makes a step while its
  consumer still holds the last one can write to. What a colder destination costs by itself:
  on a small L3 (8 MiB) one reused 3 MiB array stays in the cache and two do not;
- the same three with the stores policy fixed (loaderx._native.library.set_stores_policy; the other rows
  leave it to each store's advisor): streaming stores on 1 buffer and on a ring of 2, cached
  ones on a ring of 2. Whether either way of writing removes the cost of a colder destination;
- loader, records: the DataLoader over the records alone, default settings;
- loader, records + labels: with an int64 label stream (the issue-11 two-stream row);
- the same with workers=2 instead of the default (one fewer than the CPUs without a transform);
- the same with the last batch held while the next is asked for, as `for batch in loader` does
  (the rows above drop each batch at once): the loader then writes two arrays in turn, where a
  dropped batch lets it write the one array again;
- lock handoff, records + labels: the same step made on one worker thread only and handed over
  through per-slot C locks, the cheapest hand-over Python has, with a consumer that only waits
  (how the loader worked before its consumer made steps itself).
Each row also prints the context switches per batch of all the process's threads (from
/proc/self/task/*/status): the bare gather's pool helper takes batches without a switch; a
consumer that only waits sleeps and is woken once per batch at least.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.layers import data, loaders, timing  # noqa: E402
from loaderx._native import library as _native  # noqa: E402
from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._loading.sampler import Sampler  # noqa: E402

BATCH = 256
RING = 5  # the DataLoader's default prefetch (4) + 1


def context_switches() -> int:
    total = 0
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # a thread that ended meanwhile
            continue
        for line in text.splitlines():
            if "ctxt_switches:" in line:  # voluntary and nonvoluntary
                total += int(line.split()[1])
    return total


def lock_handoff(path: Path, labels: Path) -> Callable[[], object]:
    """One worker makes step s into slot s % RING and releases that slot's ready lock."""
    x, y = DenseDataset(str(path)), DenseDataset(str(labels))
    sampler = Sampler(len(x), BATCH, mode="cyclic", seed=0)
    indices = [np.empty(BATCH, dtype=np.int64) for _ in range(RING)]
    outs = [(np.empty((BATCH, *x.item_shape), dtype=x.dtype), np.empty(BATCH, dtype=np.int64))
            for _ in range(RING)]
    ready = [threading.Lock() for _ in range(RING)]
    free = [threading.Lock() for _ in range(RING)]
    for lock in ready:
        lock.acquire()

    def work() -> None:
        for s in itertools.count():
            slot = s % RING
            free[slot].acquire()
            sampler.fill(s, indices[slot])
            x.gather_into(indices[slot], outs[slot][0])
            y.gather_into(indices[slot], outs[slot][1])
            ready[slot].release()

    threading.Thread(target=work, daemon=True).start()
    taken = itertools.count()
    last = [-1]

    def step() -> object:
        slot = next(taken) % RING
        ready[slot].acquire()
        if last[0] >= 0:
            free[last[0]].release()  # the previous batch is no longer the consumer's
        last[0] = slot
        return outs[slot]

    return step


def holding_last(call: Callable[[], object]) -> Callable[[], object]:
    """`call`, keeping its last result referenced while it makes the next one."""
    held: list[object] = [None]

    def step() -> object:
        held[0] = call()
        return held[0]

    return step


def check_batches(calls: dict[str, Callable[[], object]], stores: dict[str, int],
                  array: np.ndarray, sampler: Sampler) -> None:
    """Every row's first steps, under the row's stores policy, are the records the sampler
    names, byte for byte (the rows are timed from there on, so each is measured doing the right
    thing)."""
    for step in range(3):
        want = array[sampler.batch(step)]
        for name, call in calls.items():
            _native.set_stores_policy(stores[name])
            try:
                got = call()
            finally:
                _native.set_stores_policy(_native.STORES_AUTO)
            records = got["x"] if isinstance(got, dict) else got[0] if isinstance(got, tuple) else got
            if not isinstance(records, np.ndarray) or not np.array_equal(records, want):
                raise AssertionError(f"{name}: step {step} returned other records")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--block", type=float, default=0.5, help="seconds per timed block")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="loader-overhead-") as tmp:
        folder = Path(tmp)
        array = data.generate("mild", args.records, (64, 64, 3), seed=0)
        from_numpy(str(folder / "raw"), array, codec="raw")
        from_numpy(str(folder / "labels"), np.arange(args.records, dtype=np.int64), codec="raw")
        raw, labels = folder / "raw", folder / "labels"
        calls: dict[str, Callable[[], object]] = {
            "bare gather, 1 buffer": loaders.bare_gather(raw, BATCH)[0],
            "bare gather, ring of 2": loaders.bare_gather(raw, BATCH, 2)[0],
            f"bare gather, ring of {RING}": loaders.bare_gather(raw, BATCH, RING)[0],
            "bare gather, 1 buffer, streaming": loaders.bare_gather(raw, BATCH)[0],
            "bare gather, ring of 2, streaming": loaders.bare_gather(raw, BATCH, 2)[0],
            "bare gather, ring of 2, cached": loaders.bare_gather(raw, BATCH, 2)[0],
            "loader, records": loaders.loaderx_loop(raw, BATCH, None)[0],
            "loader, records + labels": loaders.loaderx_loop(raw, BATCH, None, labels=labels)[0],
            "loader, records + labels, 2 workers": loaders.loaderx_loop(
                raw, BATCH, None, labels=labels, workers=2)[0],
            "loader, records + labels, last held": holding_last(
                loaders.loaderx_loop(raw, BATCH, None, labels=labels)[0]),
            "lock handoff, records + labels": lock_handoff(raw, labels),
        }
        # The rows whose stores are fixed; every other row runs under STORES_AUTO.
        stores = {name: _native.STORES_STREAMING if name.endswith("streaming") else
                  _native.STORES_CACHED if name.endswith("cached") else _native.STORES_AUTO
                  for name in calls}
        check_batches(calls, stores, array, Sampler(args.records, BATCH, mode="cyclic", seed=0))
        del array
        switches: dict[str, list[float]] = {name: [] for name in calls}

        # timing.interleave's rotation, written out to count switches around each block.
        timings = {name: timing.Timing(name) for name in calls}
        names = list(calls)
        for round_index in range(args.rounds):
            order = names[round_index % len(names):] + names[:round_index % len(names)]
            for name in order:
                time.sleep(0.15)  # the previous row's background threads go idle
                _native.set_stores_policy(stores[name])
                before = context_switches()
                try:
                    elapsed, count = timing.run_block(calls[name], args.block)
                finally:
                    _native.set_stores_policy(_native.STORES_AUTO)
                switches[name].append((context_switches() - before) / count)
                timings[name].samples.append(elapsed / count)
                timings[name].calls += count
    reference = 1.0 / timings["bare gather, 1 buffer"].median
    print(f"{'row':38s} {'batches/s':>10s} {'vs bare':>8s} {'switches/batch':>15s}")
    for name, t in timings.items():
        rate = 1.0 / t.median
        per_batch = statistics.median(switches[name])
        print(f"{name:38s} {rate:10,.0f} {rate / reference:7.2f}x {per_batch:15.2f}")
    print(f"medians of {args.rounds} interleaved rounds of {args.block:g} s; batches of {BATCH} x 12 KiB "
          f"from {args.records} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
