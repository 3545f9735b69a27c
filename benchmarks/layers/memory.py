"""The memory layer: peak anonymous memory of from_numpy over a large memory-mapped .npy.

The input is a .npy of 1 GiB (4 GiB with --big) opened with mmap_mode="r"; its pages are the
page cache, file-backed, so they show in RssFile, not RssAnon. Each conversion runs in a fresh
child process (so nothing earlier in this run inflates its baseline): a thread samples RssAnon
from /proc/self/status every few milliseconds while from_numpy streams the array into a store,
and the child prints the peak above its own baseline taken right before the call.
`python -m layers.memory child NPY DEST CODEC` (from benchmarks/) runs one measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

import numpy as np

from . import data, report, stores
from .report import Column, Report, Table

MIB = float(1 << 20)
SAMPLE_SECONDS: Final = 0.005
CODECS: Final = ("raw", "zstd")


def rss_anon() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


class PeakSampler:
    """Polls RssAnon on a thread until stopped; keeps the maximum seen."""

    def __init__(self) -> None:
        self.peak = rss_anon()
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)

    def poll(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, rss_anon())
            self.samples += 1
            time.sleep(SAMPLE_SECONDS)

    def __enter__(self) -> PeakSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, rss_anon())


def child(npy: str, dest: str, codec: str) -> None:
    from loaderx.converter import from_numpy

    array = np.load(npy, mmap_mode="r")
    baseline = rss_anon()
    started = time.perf_counter()
    with PeakSampler() as sampler:
        from_numpy(dest, array, codec=codec)
    seconds = time.perf_counter() - started
    print(json.dumps({"baseline": baseline, "peak": sampler.peak, "seconds": seconds,
                      "bytes": int(array.nbytes), "samples": sampler.samples}))


def write_input(path: Path, total_bytes: int, shape: tuple[int, ...]) -> int:
    """Fills a .npy memmap by tiling a block of mildly compressible records; returns count."""
    record = int(np.prod(shape))
    count = max(1, total_bytes // record)
    mapped = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=(count, *shape))
    tile = data.generate("mild", max(1, (32 << 20) // record), shape, seed=3)
    for start in range(0, count, len(tile)):
        rows = mapped[start:start + len(tile)]
        rows[:] = tile[:len(rows)]
    mapped.flush()
    del mapped
    return count


def measure(npy: Path, dest: Path, codec: str) -> dict[str, float]:
    benchmarks = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "layers.memory", "child", str(npy), str(dest), codec]
    path = os.pathsep.join([str(benchmarks.parent), str(benchmarks)])
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=benchmarks,
                          env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr else "failed")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(args: argparse.Namespace, rep: Report, workdir: Path) -> None:
    total = (4 << 30) if args.big else (8 << 20) if args.tiny else (1 << 30)
    folder = workdir / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    npy = folder / "input.npy"
    count = write_input(npy, total, args.shape)
    table = Table("memory", f"Memory: from_numpy over a memory-mapped .npy of "
                  f"{total / (1 << 30):g} GiB ({count} records), peak RssAnon above baseline", [
                      Column("codec", "codec"),
                      Column("peak_above", "peak RssAnon above baseline", report.mib),
                      Column("mib_s", "conversion", report.mib_s),
                  ])
    for codec in CODECS:
        dest = folder / f"store-{codec}"
        stores.remove(dest)
        try:
            result = measure(npy, dest, codec)
        except Exception as error:  # noqa: BLE001
            rep.skip(f"memory {codec}", f"{type(error).__name__}: {error}")
            continue
        finally:
            stores.remove(dest)
        above = result["peak"] - result["baseline"]
        table.add(codec=codec, peak_above=above, mib_s=result["bytes"] / result["seconds"] / MIB,
                  **result)
        rep.target("issue 4", f"from_numpy {codec} peak RssAnon above baseline, MiB",
                   above / MIB, 256.0, lower_is_better=True)
    table.notes.append("RssAnon sampled every 5 ms on a thread in a fresh child process; "
                       "zstd_dict is left out (level 19 over a GiB takes minutes)")
    rep.emit(table)
    stores.remove(folder)


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], sys.argv[4])
