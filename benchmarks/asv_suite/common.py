"""Shared data for the asv suite: small, deterministic record sets and store builders.

Sizes are chosen so one asv run over two commits and two interpreters stays within minutes
on a 2-core machine; the side-by-side comparison (benchmarks/compare.py) runs the big ones.
Paths are relative: asv runs setup_cache and the benchmarks in the same cache folder.
"""

from __future__ import annotations

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


def store_path(codec: str) -> str:
    return f"store-{codec}"


def build_stores(codecs: tuple[str, ...] = CODECS) -> None:
    """One dense store per codec from the same records (the dictionary trained by from_numpy)."""
    from loaderx.converter import from_numpy

    data = records()
    for codec in codecs:
        from_numpy(store_path(codec), data, codec=codec, overwrite=True)
