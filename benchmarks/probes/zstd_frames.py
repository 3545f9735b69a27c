"""What a zstd record costs to decode, by how its frame was written (issue 41, point 1).

    .cache/bench-venv-cp311/bin/python benchmarks/probes/zstd_frames.py [--rounds 5]

(any interpreter with loaderx's requirements and the `zstandard` wheel: the bench venv has it.)
Writes the same records three ways and decodes each set on one thread, as CPU time per batch of
256 random records (median over interleaved rounds; CPU time is much steadier than wall time on
a shared machine):
- "loaderx": a loaderx zstd dataset as this checkout writes it, read by `gather_into` with the
  pool's helpers off (POOL_NEVER);
- "level 3, told the size": zstandard's level 3 given each record's size (what loaderx wrote
  before its 5-byte match floor: 4-byte matches for inputs this small);
- "level 3, size unknown": zstandard's level 3 parameters for an unknown size (5-byte matches,
  a 2 MiB window), as bagz compresses.
The two zstandard sets are decoded by the zstandard wheel's libzstd; loaderx's frames by both,
so the decoder and the frames can be told apart. Data: 4,000 records of 12 KiB, "smooth"
(image-like, about 2.5x) and "mild" (about 1.05x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import zstandard

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from loaderx import zrecord  # noqa: E402
from loaderx.converter import from_numpy  # noqa: E402
from loaderx.dataset import DenseDataset  # noqa: E402

RECORDS: Final = 4_000
RECORD_BYTES: Final = 12_288
BATCH: Final = 256
CALLS: Final = 40


def records(kind: str) -> npt.NDArray[np.uint8]:
    rng = np.random.default_rng(0)
    if kind == "smooth":
        steps = rng.integers(-3, 4, size=(RECORDS, RECORD_BYTES))
        return (np.cumsum(steps, axis=1) // 4 % 256).astype(np.uint8)
    mild = rng.integers(0, 256, size=(RECORDS, RECORD_BYTES), dtype=np.uint8)
    mild[:, ::9] = 0
    return mild


def stored_frames(folder: Path) -> list[bytes]:
    """Each record's stored bytes, from meta.zr's table (docs/format.md) and chunk 0."""
    entry = np.dtype([("offset", "<u4"), ("phys", "<u4"), ("logic", "<u4"), ("chunk", "<u2"),
                      ("codec", "u1"), ("pad", "u1")])
    table = np.frombuffer((folder / "meta.zr").read_bytes()[16:], dtype=entry)
    assert (table["chunk"] == 0).all() and (table["codec"] == 1).all(), "one chunk, all zstd"
    chunk = (folder / "0.zr").read_bytes()
    return [chunk[o:o + n] for o, n in zip(table["offset"].tolist(), table["phys"].tolist())]


def cpu_ms(call: Callable[[int], object]) -> float:
    start = time.process_time()
    for i in range(CALLS):
        call(i)
    return (time.process_time() - start) / CALLS * 1e3


def probe(kind: str, work: Path, rounds: int) -> None:
    data = records(kind)
    folder = work / kind
    from_numpy(str(folder), data, codec="zstd")
    ds = DenseDataset(str(folder))
    frames = {"loaderx": stored_frames(folder)}
    sized = zstandard.ZstdCompressor(level=3)
    unsized = zstandard.ZstdCompressor(
        compression_params=zstandard.ZstdCompressionParameters.from_level(3))
    frames["level 3, told the size"] = [sized.compress(r.tobytes()) for r in data]
    frames["level 3, size unknown"] = [unsized.compress(r.tobytes()) for r in data]
    rng = np.random.default_rng(1)
    batches = [np.sort(rng.choice(RECORDS, BATCH, replace=False)) for _ in range(CALLS)]
    out = np.empty((BATCH, RECORD_BYTES), np.uint8)
    decoder = zstandard.ZstdDecompressor()
    expected = data[batches[0]].tobytes()
    for name, set_ in frames.items():
        assert b"".join(decoder.decompress(set_[i]) for i in batches[0]) == expected, name
    ds.gather_into(batches[0], out)
    assert out.tobytes() == expected

    def wheel(set_: list[bytes]) -> Callable[[int], object]:
        return lambda i: [decoder.decompress(set_[j]) for j in batches[i]]

    rows: dict[str, Callable[[int], object]] = {
        "loaderx frames, loaderx gather_into": lambda i: ds.gather_into(batches[i], out),
        "loaderx frames, zstandard": wheel(frames["loaderx"]),
        "level 3 told the size, zstandard": wheel(frames["level 3, told the size"]),
        "level 3 size unknown, zstandard": wheel(frames["level 3, size unknown"]),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, call in rows.items():
            times[name].append(cpu_ms(call))
    sizes = {"loaderx frames": frames["loaderx"], "level 3 told the size":
             frames["level 3, told the size"], "level 3 size unknown": frames["level 3, size unknown"]}
    print(f"\n{kind}: {RECORDS} records of {RECORD_BYTES} B, batches of {BATCH}, one thread")
    base = statistics.median(times["level 3 size unknown, zstandard"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:38s} {median:6.2f} ms CPU/batch  {median / base:5.3f}x of size unknown")
    for name, set_ in sizes.items():
        print(f"  {name:38s} ratio {data.nbytes / sum(map(len, set_)):.3f}")
    ds.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    zrecord.set_pool_policy(zrecord.POOL_NEVER)
    with tempfile.TemporaryDirectory() as work:
        for kind in ("smooth", "mild"):
            probe(kind, Path(work), args.rounds)


if __name__ == "__main__":
    main()
