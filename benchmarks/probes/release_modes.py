"""ReleaseSafe against ReleaseFast, side by side in one run: the cost of keeping Zig's safety checks.

    .venv/bin/python benchmarks/probes/release_modes.py [--rounds 9] [--no-build]

Builds the host library in both modes (into .cache/zig-out-fast and .cache/zig-out-safe), starts
one worker process per build (LOADERX_LIBRARY points each at its library) and times the same
operations in both, round-robin, alternating which build goes first. Each figure is the median over
the rounds of the mean CPU time of one call (all the worker's threads: the cost of the work, which
is what the checks add, and much steadier than wall time on a shared machine), and the ratio is
safe / fast (1.03 means 3% slower):
- gather raw / zstd: `gather_into` of 256 random records of 10,000 x 12 KiB "mild" records
  (bytes drawn around 128, per-record zstd-3 near 1.1x; the benchmark's data set);
- sampler iid / cyclic: `Sampler.fill` of a batch of 1024 indices from 10^6.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import build as project_build  # noqa: E402  (the repository's build.py)

MODES: Final = ("fast", "safe")
CASES: Final = ("gather-raw", "gather-zstd", "sampler-iid", "sampler-cyclic")
RECORDS: Final = 10_000
RECORD_SIZE: Final = 12 * 1024
BATCH: Final = 256

WORKER: Final = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from loaderx.sampler import Sampler
    from loaderx.zrecord import Zrecord

    folder, records, record_size, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    stores = {codec: Zrecord(f"{folder}/{codec}", create=False) for codec in ("raw", "zstd")}
    out = np.empty((batch, record_size), dtype=np.uint8)
    picks = [np.random.default_rng(k).integers(0, records, batch, dtype=np.int64) for k in range(64)]
    samplers = {mode: Sampler(10**6, 1024, mode=mode, seed=3) for mode in ("iid", "cyclic")}
    indices = np.empty(1024, dtype=np.int64)

    def gather(codec, calls):
        store = stores[codec]
        for k in range(calls):
            store.gather_into(picks[k % len(picks)], out, record_size)

    def sample(mode, calls):
        sampler = samplers[mode]
        for step in range(calls):
            sampler.fill(step, indices)

    CALLS = {"gather-raw": 100, "gather-zstd": 10, "sampler-iid": 50000, "sampler-cyclic": 50000}
    for line in sys.stdin:
        case = line.strip()
        kind, what = case.split("-")
        run = gather if kind == "gather" else sample
        run(what, 2)  # warm
        started = time.process_time()
        run(what, CALLS[case])
        print((time.process_time() - started) / CALLS[case], flush=True)
    """
)


def build_library(mode: str) -> Path:
    """Builds the host library with --release=<mode>; returns its path."""
    zstd = project_build.fetch_zstd()
    prefix = project_build.CACHE / f"zig-out-{mode}"
    project_build.zig(["build", f"-Dzstd={zstd}", f"--release={mode}", "--prefix", str(prefix)])
    sub = "bin" if sys.platform == "win32" else "lib"
    return prefix / sub / project_build.library_file_name()


def make_stores(folder: Path) -> None:
    """The raw and the zstd store of the same mild records (with whichever library loads first)."""
    from benchmarks.layers import data
    from loaderx.zrecord import Zrecord

    rows = data.generate("mild", RECORDS, (RECORD_SIZE,), seed=0)
    for codec in ("raw", "zstd"):
        with Zrecord(folder / codec, codec=codec, create=True) as store:
            store.append_fixed(rows, RECORD_SIZE)


def start_worker(library: Path, folder: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, LOADERX_LIBRARY=str(library), PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(folder), str(RECORDS), str(RECORD_SIZE), str(BATCH)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )


def measure(workers: dict[str, subprocess.Popen[str]], rounds: int) -> dict[tuple[str, str], float]:
    """Median seconds per call for every (case, mode), modes alternating who goes first."""
    samples: dict[tuple[str, str], list[float]] = {(c, m): [] for c in CASES for m in MODES}
    for round_index in range(rounds):
        order = MODES if round_index % 2 == 0 else tuple(reversed(MODES))
        for case in CASES:
            for mode in order:
                worker = workers[mode]
                assert worker.stdin is not None and worker.stdout is not None
                worker.stdin.write(case + "\n")
                worker.stdin.flush()
                answer = worker.stdout.readline()
                if not answer:
                    raise RuntimeError(f"the {mode} worker died during {case}")
                samples[(case, mode)].append(float(answer))
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(prog="benchmarks/probes/release_modes.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--no-build", action="store_true", help="use the libraries already built")
    args = parser.parse_args()
    libraries = {}
    for mode in MODES:
        prefix = project_build.CACHE / f"zig-out-{mode}"
        sub = "bin" if sys.platform == "win32" else "lib"
        built = prefix / sub / project_build.library_file_name()
        libraries[mode] = built if args.no_build else build_library(mode)
        if not libraries[mode].exists():
            raise SystemExit(f"{libraries[mode]} is missing: run without --no-build")
    with tempfile.TemporaryDirectory(prefix="loaderx-release-modes-") as tmp:
        folder = Path(tmp)
        make_stores(folder)
        workers = {mode: start_worker(libraries[mode], folder) for mode in MODES}
        try:
            medians = measure(workers, args.rounds)
        finally:
            for worker in workers.values():
                assert worker.stdin is not None
                worker.stdin.close()
                worker.wait(timeout=60)
    print(f"CPU time per call, median of {args.rounds} rounds")
    print(f"{'case':<16}{'ReleaseFast':>14}{'ReleaseSafe':>14}{'safe/fast':>11}")
    for case in CASES:
        fast, safe = medians[(case, "fast")], medians[(case, "safe")]
        print(f"{case:<16}{fast * 1e6:>11.1f} us{safe * 1e6:>11.1f} us{safe / fast:>11.3f}")


if __name__ == "__main__":
    main()
