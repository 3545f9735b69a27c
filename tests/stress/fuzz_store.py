"""Corrupts store files at random and checks that every corruption is detected or harmless.

    python3 tests/stress/fuzz_store.py --trials 2000 [--seed 0] [--timeout 20]

Builds four small datasets (dense raw, dense zstd, dense zstd_dict, ragged zstd; with deletes
and a compaction behind them), then runs trials. A trial copies one dataset, applies one
mutation to one of its files (meta.zr header or table entries, chunk bytes, sums.zr, dict.zr,
schema.msgpack) -- a bit flip, a random byte, a zeroed range, a truncation, an extension, or two
table entries swapped -- and reads every record back in a forked child with verification on
(`verify=True`), under a timeout. Each trial ends as one of:

    intact        every record read back exactly
    older_state   a valid older state: the length went down, the records below it are exact
    detected      CorruptStoreError, NotAStoreError or SchemaError
    silent_wrong  data came back different without an exception      (must be 0)
    crash         the child died of a signal                          (must be 0)
    hang          the child outlived the timeout                      (must be 0)
    other_error   any other exception (listed with its type)          (must be 0)

Exit status 1 when any "must be 0" outcome occurred. POSIX only (fork).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

# The repository root (this file is two folders down), for loaderx from the working tree.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from loaderx._data.converter import from_numpy  # noqa: E402
from loaderx._data.dense import DenseDataset  # noqa: E402
from loaderx._data.ragged import RaggedDataset  # noqa: E402
from loaderx.errors import CorruptStoreError, NotAStoreError, SchemaError  # noqa: E402

OUTCOMES: Final = (
    "intact",
    "older_state",
    "detected",
    "silent_wrong",
    "crash",
    "hang",
    "other_error",
)
FAILURES: Final = ("silent_wrong", "crash", "hang", "other_error")
DETECTED: Final = (CorruptStoreError, NotAStoreError, SchemaError)
# Bytes of each file a trial copies; the rest (the sparse tail of meta.zr and chunks) is a hole.
_COPY_BYTES_MAX: Final = 8 << 20
_HEADER_SIZE: Final = 16
_ENTRY_SIZE: Final = 16


class Base:
    """One intact dataset and the records it must read back."""

    def __init__(self, name: str, path: str, ragged: bool, records: list[np.ndarray]) -> None:
        self.name = name
        self.path = path
        self.ragged = ragged
        self.records = records


def _build_bases(root: str, seed: int) -> list[Base]:
    rng = np.random.default_rng(seed)
    bases: list[Base] = []
    smooth = np.cumsum(rng.integers(-2, 3, size=(64, 96)), axis=1).astype(np.int16)
    noise = rng.integers(0, 255, size=(16, 192), dtype=np.uint8).view(np.int16)
    dense = np.concatenate([smooth, noise])  # compressible records and raw fallbacks
    for codec in ("raw", "zstd"):
        path = os.path.join(root, f"dense-{codec}")
        from_numpy(path, dense, codec=codec)
        bases.append(_finish(f"dense-{codec}", path, ragged=False, delete=[3, 17, 50]))
    tiles = np.tile(rng.integers(0, 40, size=(1, 256), dtype=np.uint8), (300, 1))
    tiles = tiles + rng.integers(0, 3, size=tiles.shape, dtype=np.uint8)
    path = os.path.join(root, "dense-zstd_dict")
    from_numpy(path, tiles, codec="zstd_dict", dict_size=1024)
    bases.append(_finish("dense-zstd_dict", path, ragged=False, delete=[0, 299]))
    path = os.path.join(root, "ragged-zstd")
    ragged = RaggedDataset(path, dtype=np.float32, item_shape=(3,), codec="zstd")
    rows = [np.round(rng.normal(size=(int(n), 3)), 1).astype(np.float32) for n in rng.integers(0, 40, 60)]
    ragged.append(rows)
    ragged.close()
    bases.append(_finish("ragged-zstd", path, ragged=True, delete=[5, 6, 59]))
    return bases


def _finish(name: str, path: str, ragged: bool, delete: list[int]) -> Base:
    """Deletes and compacts (so moved sums are covered too), then records the expected data."""
    ds: Any = RaggedDataset(path) if ragged else DenseDataset(path)
    ds.delete(delete)
    ds.compact()
    records = list(ds.read(np.arange(len(ds))))
    report = ds.verify()
    ds.close()
    if not report.ok or not report.has_checksums:
        raise SystemExit(f"base dataset {name} does not verify: {report!r}")
    return Base(name, path, ragged, [np.array(r) for r in records])


# ---- copying and mutating ------------------------------------------------------------------


def _copy_store(source: str, destination: str) -> None:
    """Copies a store folder keeping sparse files sparse (only their first bytes hold data)."""
    os.mkdir(destination)
    for name in os.listdir(source):
        size = os.path.getsize(os.path.join(source, name))
        with open(os.path.join(source, name), "rb") as src:
            data = src.read(min(size, _COPY_BYTES_MAX))
        with open(os.path.join(destination, name), "wb") as dst:
            dst.write(data)
            dst.truncate(size)


def _store_length(folder: str) -> tuple[int, int, int]:
    """(length, tail chunk, tail offset) from meta.zr's header."""
    with open(os.path.join(folder, "meta.zr"), "rb") as f:
        header = f.read(_HEADER_SIZE)
    tail_chunk = int.from_bytes(header[6:8], "little")
    tail_offset = int.from_bytes(header[8:12], "little")
    return int.from_bytes(header[12:16], "little"), tail_chunk, tail_offset


def _regions(folder: str) -> list[tuple[str, str, int, int]]:
    """(target kind, file name, start, end) of every region worth corrupting."""
    length, tail_chunk, tail_offset = _store_length(folder)
    regions = [
        ("meta_header", "meta.zr", 0, _HEADER_SIZE),
        ("meta_entries", "meta.zr", _HEADER_SIZE, _HEADER_SIZE + _ENTRY_SIZE * max(length, 1)),
    ]
    for chunk in range(tail_chunk + 1):
        end = tail_offset if chunk == tail_chunk else 1 << 32
        if end > 0:
            regions.append(("chunk", f"{chunk}.zr", 0, end))
    for kind, name in (("sums", "sums.zr"), ("dict", "dict.zr"), ("schema", "schema.msgpack")):
        path = os.path.join(folder, name)
        if os.path.exists(path) and os.path.getsize(path) > 0:
            regions.append((kind, name, 0, os.path.getsize(path)))
    return regions


def _write_at(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def _read_at(path: str, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def _mutate(folder: str, rng: random.Random) -> str:
    """Applies one random mutation; returns its description."""
    target, name, start, end = rng.choice(_regions(folder))
    path = os.path.join(folder, name)
    kinds = ["flip", "byte", "zero", "truncate", "extend"]
    if target == "meta_entries" and (end - start) >= 2 * _ENTRY_SIZE:
        kinds.append("swap")
    kind = rng.choice(kinds)
    where = rng.randrange(start, end)
    if kind == "flip":
        old = _read_at(path, where, 1)[0]
        _write_at(path, where, bytes([old ^ (1 << rng.randrange(8))]))
    elif kind == "byte":
        old = _read_at(path, where, 1)[0]
        _write_at(path, where, bytes([(old + rng.randrange(1, 256)) % 256]))
    elif kind == "zero":
        size = min(rng.choice([1, 2, 4, 8, 16, 64]), end - where)
        _write_at(path, where, bytes(size))
    elif kind == "truncate":
        os.truncate(path, where)
    elif kind == "extend":
        with open(path, "ab") as f:
            f.write(rng.randbytes(rng.randrange(1, 64)))
    else:
        count = (end - start) // _ENTRY_SIZE
        a, b = rng.sample(range(count), 2)
        entry_a = _read_at(path, start + a * _ENTRY_SIZE, _ENTRY_SIZE)
        entry_b = _read_at(path, start + b * _ENTRY_SIZE, _ENTRY_SIZE)
        _write_at(path, start + a * _ENTRY_SIZE, entry_b)
        _write_at(path, start + b * _ENTRY_SIZE, entry_a)
        where = a
    return f"{kind} {target} {name}@{where}"


# ---- one trial in a forked child -------------------------------------------------------------


def _read_back(base: Base, folder: str) -> tuple[str, str]:
    """Opens the mutated copy with verification on and compares everything it returns."""
    try:
        ds: Any = RaggedDataset(folder, verify=True) if base.ragged else DenseDataset(folder, verify=True)
        try:
            got = list(ds.read(np.arange(len(ds))))
            report = ds.verify()
        finally:
            ds.close()
    except DETECTED as exc:
        return "detected", type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - every other exception type is an outcome
        return "other_error", f"{type(exc).__name__}: {exc}"[:300]
    expected = base.records
    if len(got) > len(expected):
        return "silent_wrong", f"{len(got)} records, expected {len(expected)}"
    for index, (have, want) in enumerate(zip(got, expected)):
        if have.shape != want.shape or have.tobytes() != want.tobytes():
            return "silent_wrong", f"record {index} differs"
    if not report.ok:
        return "silent_wrong", f"reads passed but verify() found {report!r}"
    if len(got) < len(expected):
        return "older_state", f"{len(got)} of {len(expected)} records"
    return "intact", ""


def _run_forked(work: Callable[[], tuple[str, str]], timeout: float) -> tuple[str, str]:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            outcome = work()
        except BaseException as exc:  # noqa: BLE001 - the child reports, never raises
            outcome = ("other_error", f"{type(exc).__name__}: {exc}"[:300])
        os.write(write_fd, json.dumps(outcome).encode())
        os._exit(0)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", f"no answer in {timeout} s"
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
        _, wait_status = os.waitpid(pid, 0)
    finally:
        os.close(read_fd)
    if os.WIFSIGNALED(wait_status):
        return "crash", signal.Signals(os.WTERMSIG(wait_status)).name
    if not chunks:
        return "crash", f"exit status {os.waitstatus_to_exitcode(wait_status)} without a result"
    outcome = json.loads(b"".join(chunks))
    return str(outcome[0]), str(outcome[1])


def run(trials: int, seed: int, timeout: float, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs the experiment; returns the counts by outcome, by target and the failures."""
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="loaderx-fuzz-")
    try:
        bases_dir = os.path.join(root, "bases")
        os.mkdir(bases_dir)
        bases = _build_bases(bases_dir, seed)
        counts: collections.Counter[str] = collections.Counter()
        by_target: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        failures: list[str] = []
        started = time.monotonic()
        for trial in range(trials):
            base = bases[trial % len(bases)]
            folder = os.path.join(root, f"trial-{trial}")
            _copy_store(base.path, folder)
            mutation = _mutate(folder, rng)
            outcome, detail = _run_forked(lambda: _read_back(base, folder), timeout)
            shutil.rmtree(folder)
            counts[outcome] += 1
            by_target[mutation.split()[1]][outcome] += 1
            if outcome in FAILURES:
                failures.append(f"trial {trial} ({base.name}): {mutation}: {outcome} {detail}")
                log(failures[-1])
        elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "trials": trials,
        "seed": seed,
        "seconds": round(elapsed, 1),
        "outcomes": {name: counts[name] for name in OUTCOMES},
        "by_target": {target: dict(c) for target, c in sorted(by_target.items())},
        "failures": failures,
    }


def run_from_command_line(
    run_trials: Callable[[int, int, float], dict[str, Any]], groups: str, description: str,
    trials: int, timeout: float, argv: list[str] | None,
) -> int:
    """The command line of a fuzzer (this one, stress/fuzz_sharded.py): runs `run_trials`
    (trials, seed, timeout) and prints its result, JSON or a table by `groups`; 1 when any
    trial failed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trials", type=int, default=trials)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=timeout, help="seconds per trial")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    result = run_trials(args.trials, args.seed, args.timeout)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['trials']} trials (seed {result['seed']}) in {result['seconds']} s")
        for name in OUTCOMES:
            print(f"  {name:13} {result['outcomes'][name]}")
        print(groups.replace("_", " ") + ":")
        width = max([13, *map(len, result[groups])])
        for group, c in result[groups].items():
            print(f"  {group:{width}} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 1 if any(result["outcomes"][name] for name in FAILURES) else 0


def main(argv: list[str] | None = None) -> int:
    return run_from_command_line(run, "by_target", __doc__.split("\n\n")[0], 2000, 20.0, argv)


if __name__ == "__main__":
    sys.exit(main())
