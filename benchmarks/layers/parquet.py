"""The parquet layer: peak memory of from_arrow over a large folder of Parquet files.

The input is a folder of Parquet files (1 GiB on disk; 4 GiB with --big, 16 MiB with --tiny) of
three columns a training set typically has: a label (int64), an embedding (fixed_size_list of
64 float32, a DenseDataset) and token ids (list of int32 of 0 to 511 items, a RaggedDataset),
random so that nothing compresses much and the bytes on disk are about the bytes converted.
Each file is one row group of about 64 MiB, as `pq.write_table` makes them by default.

Each conversion runs in a fresh child process, `python -m layers.parquet child FOLDER DEST
CODEC` (from benchmarks/), which reports its own peak resident set: VmHWM from /proc/self/status
(everything: the interpreter, numpy, pyarrow and its buffers, loaderx), once right before
from_arrow is called (the interpreter and the imports) and once after it. Not the rusage
ru_maxrss the parent gets for the child: Linux carries into it the parent's resident set at
the fork (a harness holding 200 MiB of generated tables shows 200 MiB for a child that never
used them); VmHWM belongs to the process image that exec made. Where there is no /proc
(macOS), ru_maxrss of the child itself is used, with that caveat. The peaks of RssAnon and
RssFile are sampled too: the first is what reading and converting hold, the second the mapped
libraries and the pages of the chunk files being written (page cache, which the kernel may
reclaim), which VmHWM counts as well.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

import numpy as np

from . import report, stores
from .report import Column, Report, Table

MIB = float(1 << 20)
CODECS: Final = ("raw", "zstd")
FILE_BYTES: Final = 64 << 20
EMBEDDING: Final = 64
TOKENS_MAX: Final = 512
# What a row holds on average: the label, the embedding and (TOKENS_MAX / 2) token ids.
ROW_BYTES: Final = 8 + 4 * EMBEDDING + 4 * TOKENS_MAX // 2
TARGET_MIB: Final = 256.0


def peak_rss_bytes() -> int:
    """This process's peak resident set: VmHWM (Linux), else ru_maxrss (KiB on Linux,
    bytes on macOS)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def status_bytes(field: str) -> int:
    """One size field of /proc/self/status (RssAnon, RssFile) in bytes; 0 without /proc."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakSampler:
    """The largest value of one /proc/self/status field, polled on a thread every 5 ms."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.peak = status_bytes(field)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, status_bytes(self.field))
            time.sleep(0.005)

    def __enter__(self) -> PeakSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def child(folder: str, dest: str, codec: str) -> None:
    from loaderx.converter import from_arrow

    import pyarrow  # noqa: F401  (imported before the baseline, as from_arrow would)

    baseline = peak_rss_bytes()
    started = time.perf_counter()
    with PeakSampler("RssAnon") as anon, PeakSampler("RssFile") as mapped:
        rows = from_arrow(folder, dest, codec=codec, progress=False)
    seconds = time.perf_counter() - started
    print(json.dumps({"baseline": baseline, "peak": peak_rss_bytes(), "seconds": seconds,
                      "rows": rows, "anon": anon.peak, "file": mapped.peak}))


def write_table(path: Path, rows: int, seed: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, TOKENS_MAX, size=rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    tokens = rng.integers(0, 50_000, size=int(offsets[-1]), dtype=np.int32)
    embedding = rng.standard_normal(size=rows * EMBEDDING, dtype=np.float32)
    table = pa.table({
        "label": pa.array(rng.integers(0, 1000, size=rows)),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(embedding), EMBEDDING),
        "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens)),
    })
    pq.write_table(table, path, row_group_size=rows)


def write_input(folder: Path, total_bytes: int) -> tuple[int, int]:
    """Parquet files of about FILE_BYTES each until total_bytes; returns (rows, bytes on disk)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows_per_file = max(1, min(total_bytes, FILE_BYTES) // ROW_BYTES)
    rows = 0
    written = 0
    index = 0
    while written < total_bytes:
        path = folder / f"part-{index:05d}.parquet"
        write_table(path, rows_per_file, seed=index)
        written += path.stat().st_size
        rows += rows_per_file
        index += 1
    return rows, written


def measure(folder: Path, dest: Path, codec: str) -> dict[str, float]:
    """One conversion in a fresh child; what it printed."""
    benchmarks = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "layers.parquet", "child", str(folder), str(dest), codec]
    path = os.pathsep.join([str(benchmarks.parent), str(benchmarks)])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=benchmarks,
                          env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError as error:
        rep.skip("parquet", f"pyarrow is not installed ({error})")
        return
    total = (4 << 30) if args.big else (16 << 20) if args.tiny else (1 << 30)
    folder = workdir / "parquet"
    stores.remove(folder)
    rows, on_disk = write_input(folder / "input", total)
    table = Table("parquet", f"Parquet: from_arrow over a folder of {on_disk / (1 << 30):.2f} GiB "
                  f"of Parquet files ({rows:,} rows), peak resident set of the converting process",
                  [
                      Column("codec", "codec"),
                      Column("peak", "peak RSS (VmHWM)", report.mib),
                      Column("baseline", "RSS before from_arrow", report.mib),
                      Column("anon", "peak RssAnon", report.mib),
                      Column("file", "peak RssFile", report.mib),
                      Column("mib_s", "conversion", report.mib_s),
                  ])
    for codec in CODECS:
        dest = folder / f"out-{codec}"
        try:
            result = measure(folder / "input", dest, codec)
        except Exception as error:  # noqa: BLE001
            rep.skip(f"parquet {codec}", f"{type(error).__name__}: {error}")
            continue
        finally:
            stores.remove(dest)
        table.add(codec=codec, mib_s=on_disk / result["seconds"] / MIB, **result)
        rep.target("issue 39", f"from_arrow {codec} over a Parquet folder: peak RSS, MiB",
                   result["peak"] / MIB, TARGET_MIB, lower_is_better=True)
    table.notes.append("VmHWM of a fresh child process, the whole process; the baseline is "
                       "its VmHWM after importing loaderx and pyarrow; RssAnon (pyarrow's "
                       "buffers, the batches) and RssFile (the libraries, and the pages of the "
                       "chunk files being written, which the kernel may drop) sampled every "
                       "5 ms; files of one ~64 MiB row group each")
    rep.emit(table)
    stores.remove(folder)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], sys.argv[4])
