"""What a packed loader step costs beyond its bare native call, side by side in one process.

    python3 benchmarks/probes/packed_step.py [--records 10000] [--rounds 9] [--block 0.3] [--short]

The ragged bench's data (benchmarks/layers/ragged.py: int32 sequences of 1 to 2,047 tokens,
mean 1,024, and dense records of 1,024 and 1,025 tokens), batches of 256, cyclic. Rows, timed
in interleaved rounds (median us a step printed):
- dense bare, dense 4100 B bare: the sampler's fill and one `gather_into` into one reused array;
- packed bare: the sampler's fill and one `RaggedDataset.gather_packed` into one reused buffer,
  offsets and cu_seqlens;
- packed stream: the same through the loader's RaggedStream (its slot's buffers, the views it
  hands out), without the loader around it;
- dense loader, dense 4100 B loader, packed loader: a DataLoader's next(), the batch dropped.
With --short, the sequences are the ragged bench's short ones (1 to 63 tokens, mean 32, against
dense records of 32), where each record's cost decides rather than its bytes; no 4100 B rows.
Every row's first batches are checked against the dataset's own `ds[idx]` before timing.
Then the ratios the issue asks about: packed against dense (time per step, same bytes on
average), and what each loader adds to its bare call.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.layers import ragged, timing  # noqa: E402
from loaderx.dataloader import DataLoader  # noqa: E402
from loaderx.dataset import DenseDataset, RaggedDataset  # noqa: E402
from loaderx._loading.ragged_batch import RaggedStream  # noqa: E402

BATCH = 256
RING = 5  # the DataLoader's default prefetch (4) + 1


def open_loader(dataset: Any, closing: list[Any]) -> tuple[Any, Iterator[dict[str, Any]]]:
    """A cyclic DataLoader over `dataset` (closed after the run, with it): its sampler, and its
    batches."""
    loader = DataLoader({"tokens": dataset}, batch_size=BATCH, mode="cyclic", seed=0)
    closing += [loader, dataset]
    return loader.sampler, iter(loader)


def dense_rows(path: Path, label: str, calls: dict[str, Callable[[], object]],
               closing: list[Any]) -> None:
    dataset = DenseDataset(str(path))
    sampler, steps = open_loader(dataset, closing)
    for step in range(3):
        if not np.array_equal(next(steps)["tokens"], dataset[sampler.batch(step)]):
            raise AssertionError(f"{label} loader: step {step} returned other records")
    indices = np.empty(BATCH, dtype=np.int64)
    out = np.empty((BATCH, *dataset.item_shape), dtype=dataset.dtype)
    counter = itertools.count()

    def bare() -> None:
        sampler.fill(next(counter), indices)
        dataset.gather_into(indices, out)

    bare()
    if not np.array_equal(out, dataset[indices]):
        raise AssertionError(f"{label} bare: other records")
    calls[f"{label} bare"] = bare
    calls[f"{label} loader"] = lambda: next(steps)


def packed_rows(path: Path, calls: dict[str, Callable[[], object]],
                closing: list[Any]) -> None:
    dataset = RaggedDataset(str(path))
    sampler, steps = open_loader(dataset, closing)
    for step in range(3):
        got = next(steps)
        want = dataset[sampler.batch(step)]
        cu = got["tokens.cu_seqlens"]
        if not all(np.array_equal(got["tokens"][cu[i]:cu[i + 1]], want[i]) for i in range(BATCH)):
            raise AssertionError(f"packed loader: step {step} returned other records")
    indices = np.empty(BATCH, dtype=np.int64)
    buffer = np.empty(2 << 20, dtype=np.uint8)
    offsets = np.zeros(BATCH + 1, dtype=np.uint64)
    cu = np.zeros(BATCH + 1, dtype=np.int32)
    counter = itertools.count()

    def bare() -> None:
        sampler.fill(next(counter), indices)
        if not dataset.gather_packed(indices, buffer, offsets, cu):
            raise AssertionError("a packed batch outgrew its 2 MiB buffer")

    bare()
    values = buffer[: int(offsets[-1])].view(np.int32)
    if not all(np.array_equal(values[cu[i]:cu[i + 1]], record)
               for i, record in enumerate(dataset[indices])):
        raise AssertionError("packed bare: other records")
    stream = RaggedStream("tokens", dataset, None, BATCH, RING)
    stream_indices = np.empty(BATCH, dtype=np.int64)
    stream_counter = itertools.count()

    def through_stream() -> None:
        sampler.fill(next(stream_counter), stream_indices)
        stream.gather([(dataset, stream_indices)], 0, True, {})

    calls["packed bare"] = bare
    calls["packed stream"] = through_stream
    calls["packed loader"] = lambda: next(steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=float, default=0.3, help="seconds per timed block")
    parser.add_argument("--short", action="store_true",
                        help="short sequences (mean 32 tokens), without the 4100 B rows")
    args = parser.parse_args(argv)
    mean = ragged.SHORT_MEAN_TOKENS if args.short else ragged.MEAN_TOKENS
    kinds = ("dense",) if args.short else ("dense", "dense 4100 B")
    with tempfile.TemporaryDirectory(prefix="loaderx-packed-step-") as folder:
        paths, _ = ragged.build(Path(folder), args.records, mean, codecs=("raw",),
                                unaligned=not args.short)
        calls: dict[str, Callable[[], object]] = {}
        closing: list[Any] = []
        try:
            dense_rows(paths["dense raw"], "dense", calls, closing)
            if not args.short:
                dense_rows(paths[ragged.UNALIGNED], "dense 4100 B", calls, closing)
            packed_rows(paths["packed raw"], calls, closing)
            timings = timing.interleave(calls, rounds=args.rounds, block_seconds=args.block)
        finally:
            for thing in closing:
                thing.close()
    us = {name: statistics.median(t.samples) * 1e6 for name, t in timings.items()}
    for name, value in us.items():
        print(f"{name:22s} {value:8.1f} us a step")
    print(f"packed bare / dense bare, time:          {us['packed bare'] / us['dense bare']:.3f}")
    if not args.short:
        print(f"packed bare / dense 4100 B bare, time:   "
              f"{us['packed bare'] / us['dense 4100 B bare']:.3f}")
    print(f"packed loader / dense loader, time:      {us['packed loader'] / us['dense loader']:.3f}")
    for kind in (*kinds, "packed"):
        print(f"{kind} loader adds {us[kind + ' loader'] - us[kind + ' bare']:+.1f} us to its bare call")
    print(f"packed stream adds {us['packed stream'] - us['packed bare']:+.1f} us to the bare call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
