"""The store layer's MosaicML Streaming and LitData rows, run by the peers' venv (remote_peers).

    python -P store_peer_side.py WORK ROUNDS BLOCK_S [LOADERX_STORE]   # prints one JSON line

WORK holds records.npy (uint8, N x shape), batches.npy (the store layer's batches of indices,
int64) and expected.npy (loaderx's result for the first two batches). This writes the records as
uncompressed MDS shards (Streaming's MDSWriter) and as LitData's optimize() output, opens each with
the library's own StreamingDataset over the local folder and gathers a batch by indexing it
record by record, the random-access call both offer (LitData's write, optimize(), includes
starting its one worker process). A peer's first two batches must equal
loaderx's byte for byte before it is timed. Then npy-mmap fancy indexing (the table's reference),
loaderx raw `ds[idx]` (LOADERX_STORE, when loaderx imports here) and the peers are timed
round-robin in this process with the store layer's own timing module, so the ratios between
them are same-run ratios. A peer that fails is reported under "errors", not timed.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # layers.timing; the layers folder itself stays off the path

from layers import timing  # noqa: E402
from layers.remote_peer_side import stand_in_for_torchvision  # noqa: E402

Gather = Callable[[np.ndarray], np.ndarray]
SHARD_BYTES = 64 << 20  # one MDS shard / LitData chunk per 64 MiB, uncompressed
MDS = "mosaicml-streaming mds raw"
LITDATA = "litdata raw"


def per_record(get: Callable[[int], object], shape: tuple[int, ...]) -> Gather:
    """A batch through the peer's `ds[i]`, each record copied into one preallocated array."""

    def gather(indices: np.ndarray) -> np.ndarray:
        out = np.empty((len(indices), *shape), dtype=np.uint8)
        for slot, index in enumerate(indices.tolist()):
            out[slot] = np.asarray(get(index)["x"]).reshape(shape)  # type: ignore[index]
        return out

    return gather


def write_mds(records: np.ndarray, out: Path) -> None:
    from streaming import MDSWriter

    column = f"ndarray:uint8:{','.join(map(str, records.shape[1:]))}"
    with MDSWriter(out=str(out), columns={"x": column}, compression=None,
                   size_limit=SHARD_BYTES) as writer:
        for record in records:
            writer.write({"x": record})


def open_mds(out: Path, shape: tuple[int, ...]) -> Gather:
    from streaming import StreamingDataset

    dataset = StreamingDataset(local=str(out), remote=None, shuffle=False, batch_size=256)
    return per_record(dataset.__getitem__, shape)


_SOURCE: dict[str, np.ndarray] = {}


def _lit_item(pair: tuple[str, int]) -> dict[str, object]:
    npy, index = pair
    if npy not in _SOURCE:
        _SOURCE[npy] = np.load(npy, mmap_mode="r")
    return {"x": np.array(_SOURCE[npy][index])}


def write_litdata(npy: Path, count: int, out: Path) -> None:
    from litdata import optimize

    optimize(fn=_lit_item, inputs=[(str(npy), i) for i in range(count)], output_dir=str(out),
             chunk_bytes=SHARD_BYTES, num_workers=1, mode="overwrite")


def open_litdata(out: Path, shape: tuple[int, ...]) -> Gather:
    from litdata import StreamingDataset

    # batch_decode=0 decodes the one item asked for; its default decodes a window of items
    # around it (made for sequential reads), which measured about 60x slower per random batch.
    dataset = StreamingDataset(str(out), shuffle=False, batch_decode=0)
    return per_record(dataset.__getitem__, shape)


def open_loaderx(store: str) -> Gather:
    from loaderx.dataset import DenseDataset

    dataset = DenseDataset(store)

    def gather(indices: np.ndarray) -> np.ndarray:
        rows: np.ndarray = dataset[indices]
        return rows

    return gather


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def prepare(work: Path, records: np.ndarray, batches: np.ndarray, expected: np.ndarray,
            figures: dict[str, object]) -> dict[str, Gather]:
    """Writes and checks both peers; the ones that pass come back as gather callables."""
    shape = records.shape[1:]
    steps: dict[str, tuple[str, Callable[[Path], None], Callable[[Path, tuple[int, ...]], Gather]]]
    steps = {MDS: ("streaming", lambda out: write_mds(records, out), open_mds),
             LITDATA: ("litdata",
                       lambda out: write_litdata(work / "records.npy", len(records), out),
                       open_litdata)}
    ready: dict[str, Gather] = {}
    errors: dict[str, str] = figures["errors"]  # type: ignore[assignment]
    for name, (module, write, open_) in steps.items():
        out = work / name.split()[0]
        shutil.rmtree(out, ignore_errors=True)
        try:
            importlib.import_module(module)  # outside the write's timing
            started = time.perf_counter()
            write(out)
            figures[f"{name} write_s"] = time.perf_counter() - started
            figures[f"{name} disk_bytes"] = disk_bytes(out)
            gather = open_(out, shape)
            for batch, want in zip(batches[:2], expected):
                if gather(batch).tobytes() != want.tobytes():
                    raise AssertionError("its batch differs from loaderx's")
            ready[name] = gather
        except Exception as error:  # noqa: BLE001 - a failing peer is reported, not fatal
            errors[name] = f"{type(error).__name__}: {error}"[:500]
    return ready


def cycling(gather: Gather, batches: np.ndarray) -> Callable[[], object]:
    state = {"next": 0}

    def call() -> object:
        batch = batches[state["next"] % len(batches)]
        state["next"] += 1
        return gather(batch)

    return call


def main(argv: list[str]) -> int:
    work, rounds, block = Path(argv[0]), int(argv[1]), float(argv[2])
    records = np.load(work / "records.npy")
    batches = np.load(work / "batches.npy")
    expected = np.load(work / "expected.npy")
    figures: dict[str, object] = {"errors": {}}
    mapped: np.ndarray = np.load(work / "records.npy", mmap_mode="r")
    gathers: dict[str, Gather] = {"npy-mmap": lambda idx: mapped[idx]}
    if len(argv) > 3:
        try:
            gathers["loaderx raw"] = open_loaderx(argv[3])
        except Exception as error:  # noqa: BLE001 - the peers' rows still stand on npy-mmap
            figures["errors"]["loaderx raw"] = f"{type(error).__name__}: {error}"  # type: ignore[index]
    gathers.update(prepare(work, records, batches, expected, figures))
    calls = {name: cycling(gather, batches) for name, gather in gathers.items()}
    timings = timing.interleave(calls, rounds=rounds, block_seconds=block)
    figures["timings"] = {name: t.as_json() for name, t in timings.items()}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    stand_in_for_torchvision()  # done by the import already; said here because Streaming needs it
    raise SystemExit(main(sys.argv[1:]))
