"""Shared data for the asv suite: small, deterministic record sets and store builders.

Sizes are chosen so one asv run over two commits and two interpreters stays within minutes
on a 2-core machine; the side-by-side comparison (benchmarks/compare.py) runs the big ones.
Paths are relative: asv runs setup_cache and the benchmarks in the same cache folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import numpy as np

RECORDS: Final = 2000
SHAPE: Final = (64, 64, 3)  # 12 KiB of uint8 per record
BATCH: Final = 256
CODECS: Final = ("raw", "zstd", "zstd_dict")


def records(count: int = RECORDS, seed: int = 0) -> np.ndarray:
    """Mildly compressible records (zstd-3 about 1.1x): clipped normal bytes around 128."""
    rng = np.random.default_rng(seed)
    values = rng.normal(128.0, 37.0, size=(count, *SHAPE))
    return np.clip(np.rint(values), 0, 255).astype(np.uint8)


def batches(length: int, count: int = 32, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.choice(length, size=BATCH, replace=False).astype(np.int64) for _ in range(count)]


NPY_REFERENCE: Final = "reference.npy"


def store_path(codec: str) -> str:
    return f"store-{codec}"


def build_stores(codecs: tuple[str, ...] = CODECS) -> None:
    """One dense store per codec from the same records (the dictionary trained by from_numpy)."""
    from loaderx.converter import from_numpy

    data = records()
    np.save(NPY_REFERENCE, data)
    for codec in codecs:
        from_numpy(store_path(codec), data, codec=codec, overwrite=True)


class Steady:
    """asv settings that keep a shared, noisy 2-core machine from posing as a regression.

    - CPU time of the process (all threads), not wall time: another process taking a core
      stretches wall time but hardly the CPU time this work needs.
    - More rounds (asv interleaves them with the other benchmarks) and repeats, a warm-up, and
      asv's median over all of them.
    Thresholds for what counts as a regression are in asv.conf.json (regressions_thresholds).
    """

    timer = time.process_time
    rounds = 4
    repeat = (3, 10, 10.0)
    warmup_time = 0.2


def median_ratio(subject: Callable[[], object], reference: Callable[[], object],
                 rounds: int = 15) -> float:
    """subject's time over reference's, each round timing both back to back (the median of the
    per-round ratios). Load from other processes slows both sides of a round alike, so the
    ratio moves far less than either time."""
    subject()
    reference()
    ratios = []
    for _ in range(rounds):
        start = time.perf_counter()
        subject()
        middle = time.perf_counter()
        reference()
        end = time.perf_counter()
        ratios.append((middle - start) / max(end - middle, 1e-9))
    return float(np.median(ratios))
