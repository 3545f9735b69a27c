"""What the dataset tests (test_dataset*.py) share: random samples of a dtype and shape, a
bit-for-bit comparison, the model of a delete, a small dense dataset (a fixture), and what
NumPy selects for an index form."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataset import DenseDataset


def random_samples(
    rng: np.random.Generator, dtype: Any, shape: tuple[int, ...], count: int
) -> npt.NDArray[Any]:
    """count samples of dtype whose bits are random; floats also get NaN payloads, inf, -0.0."""
    dt = np.dtype(dtype)
    full = (count, *shape)
    if dt.kind == "b":
        return rng.integers(0, 2, size=full).astype(np.bool_)
    size = int(np.prod(full, dtype=np.int64)) * dt.itemsize
    values = np.frombuffer(rng.bytes(size), dtype=dt).reshape(full).copy()
    if dt.kind in "fc" and values.size >= 6:
        part = np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt
        flat = values.reshape(-1).view(part)
        bits = flat.view(f"u{part.itemsize}")
        flat[0] = np.inf
        flat[1] = -np.inf
        flat[2] = -0.0
        flat[3] = np.nan
        # A NaN with a non-default payload and the sign bit set.
        bits[4] = bits.dtype.type(~0 & ((1 << (8 * part.itemsize)) - 1)) ^ bits.dtype.type(2)
        flat[5] = np.finfo(part).tiny / 4  # a subnormal
    return values


def same_bits(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def swap_last_delete(values: list[Any], indices: list[int]) -> list[Any]:
    """The store's documented delete: descending unique indices, each filled from the tail."""
    result = list(values)
    for index in sorted(set(indices), reverse=True):
        result[index] = result[-1]
        result.pop()
    return result


@pytest.fixture
def dense(store_path: str, rng: np.random.Generator) -> tuple[DenseDataset, npt.NDArray[Any]]:
    values = random_samples(rng, np.float32, (2, 3), 20)
    ds = DenseDataset(store_path, dtype=np.float32, item_shape=(2, 3))
    assert ds.append(values) == 0
    return ds, values


def reference_positions(index: Any, length: int) -> Any:
    """What NumPy selects from arange(length); a Python sequence is a list of record indices."""
    if isinstance(index, (list, tuple, range)):
        index = np.array(list(index), dtype=np.bool_ if index and isinstance(index[0], bool)
                         else np.int64)
    return np.arange(length)[index]
