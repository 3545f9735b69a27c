"""Synthetic record sets with known compressibility, generated fast and deterministically.

Two kinds, as real training data tends to be:
- "mild": bytes drawn from a clipped normal around 128 with a standard deviation of 37, so each
  byte carries about 7.3 bits of entropy and per-record zstd (level 3) lands near 1.1x; nothing
  repeats across records, so there is no structure a codec could find beyond that entropy.
- "smooth": images made of a broad gradient and a soft blob per channel, posterised to a few
  levels, plus a sparse one-step noise; zstd finds long repeats and lands near 6x.
The compression ratio each set actually reaches is measured by the store layer and printed.
"""

from __future__ import annotations

from typing import Final

import numpy as np

KINDS: Final = ("mild", "smooth")
MILD_SIGMA: Final = 37.0
# Smooth images: levels quantised to this step, then this fraction of values nudged up by one;
# tuned so zstd-3 lands near 6x on 64x64x3 records.
SMOOTH_STEP: Final = 8.0
SMOOTH_NOISE: Final = 0.03


def parse_shape(text: str) -> tuple[int, ...]:
    """'64,64,3' or '64x64x3' -> (64, 64, 3); every dimension positive."""
    parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
    shape = tuple(int(p) for p in parts)
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"--shape wants positive dimensions such as 64,64,3, got {text!r}")
    return shape


def normal_table() -> np.ndarray:
    """65536-entry inverse CDF of the clipped normal: uniform uint16 in, uint8 out."""
    from statistics import NormalDist

    dist = NormalDist(128.0, MILD_SIGMA)
    probs = (np.arange(65536, dtype=np.float64) + 0.5) / 65536.0
    values = np.array([dist.inv_cdf(float(p)) for p in probs[::16]])
    table: np.ndarray = np.clip(np.rint(np.repeat(values, 16)), 0, 255).astype(np.uint8)
    return table


def mild(count: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = normal_table()
    out = np.empty((count, *shape), dtype=np.uint8)
    flat = out.reshape(-1)
    step = 16 << 20
    for start in range(0, flat.size, step):
        part = flat[start:start + step]
        part[:] = table[rng.integers(0, 65536, size=part.size, dtype=np.uint16)]
    return out


def image_grid(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """Views a record shape as (height, width, channels) for the image generator."""
    if len(shape) >= 3:
        return shape[0], shape[1], int(np.prod(shape[2:]))
    if len(shape) == 2:
        return shape[0], shape[1], 1
    return 1, shape[0], 1


def smooth(count: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    height, width, channels = image_grid(shape)
    ys = np.linspace(0.0, 1.0, height, dtype=np.float32)[None, :, None, None]
    xs = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, None, :, None]
    out = np.empty((count, height, width, channels), dtype=np.uint8)
    step = max(1, (4 << 20) // max(1, height * width * channels))
    for start in range(0, count, step):
        n = min(step, count - start)

        def per_image(low: float, high: float, c: int = channels) -> np.ndarray:
            return rng.uniform(low, high, size=(n, 1, 1, c)).astype(np.float32)

        # Per image and channel: a base level, a tilted plane and one soft blob.
        dist = (ys - per_image(0, 1, 1)) ** 2 + (xs - per_image(0, 1, 1)) ** 2
        img = (per_image(40, 200) + per_image(-60, 60) * ys + per_image(-60, 60) * xs
               + per_image(-50, 50) * np.exp(-8.0 * dist))
        img = np.floor(img * (1.0 / SMOOTH_STEP)) * SMOOTH_STEP
        img += rng.random(size=img.shape, dtype=np.float32) < SMOOTH_NOISE
        out[start:start + n] = np.clip(img, 0, 255).astype(np.uint8)
    return out.reshape(count, *shape)


def generate(kind: str, count: int, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    if kind == "mild":
        return mild(count, shape, seed)
    if kind == "smooth":
        return smooth(count, shape, seed)
    raise ValueError(f"unknown data set {kind!r}; expected one of {KINDS}")


def batches(length: int, batch_size: int, count: int, seed: int = 1) -> list[np.ndarray]:
    """`count` batches of distinct random indices (int64), the same for every contender.

    Distinct within a batch because some peers (h5py) refuse repeated indices; drawn from the
    whole index space so every batch is scattered like a loader's.
    """
    rng = np.random.default_rng(seed)
    size = min(batch_size, length)
    return [np.sort(rng.choice(length, size=size, replace=False)).astype(np.int64)[
        rng.permutation(size)] for _ in range(count)]
