"""Datasets with zstd dictionaries (tiers, recorded and explicit sizes, appends refused until a
dictionary is trained, and what it gains on small similar records), and loaderx.dataset.pad."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataset import DICT_TIERS, DenseDataset, RaggedDataset, pad
from loaderx.errors import DictionaryError

# Fixtures are found by name in the module: imported, pytest uses them.
from dataset_cases import dense, same_bits

pytestmark = pytest.mark.compiled


def test_dict_tiers() -> None:
    assert DICT_TIERS == {"small": 32 * 1024, "balanced": 128 * 1024, "max": 1024 * 1024}


@pytest.mark.parametrize(
    ("dict_size", "stored"), [("small", 32 << 10), ("max", 1 << 20), (40_000, 40_000)]
)
def test_dict_size_is_recorded(store_path: str, dict_size: str | int, stored: int) -> None:
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(64,), codec="zstd_dict",
                      dict_size=dict_size)
    assert ds.dict_size == stored
    ds.close()
    assert DenseDataset(store_path).dict_size == stored


def test_explicit_dict_size_bounds_the_trained_dictionary(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    values = similar_records(rng, 2000, 128)
    sizes = {}
    for dict_size in (2048, 16384):
        path = str(tmp_path / str(dict_size))
        with DenseDataset(path, dtype=np.uint8, item_shape=(128,), codec="zstd_dict",
                          dict_size=dict_size) as ds:
            ds.train_dict(values)
            # dict.zr is the dictionary plus its 16-byte checksum trailer.
            sizes[dict_size] = os.path.getsize(os.path.join(path, "dict.zr")) - 16
            ds.append(values[:50])
            same_bits(ds[:], values[:50])
        assert 0 < sizes[dict_size] <= dict_size
    # A per-call size overrides the schema's.
    with DenseDataset(str(tmp_path / "override"), dtype=np.uint8, item_shape=(128,),
                      codec="zstd_dict", dict_size="max") as ds:
        ds.train_dict(values, dict_size=1024)
        assert os.path.getsize(os.path.join(ds.path, "dict.zr")) - 16 <= 1024
        assert ds.dict_size == 1 << 20


@pytest.mark.parametrize("dict_size", [(1 << 20) + 1, 10, "giant"])
def test_bad_dict_sizes(store_path: str, dict_size: str | int) -> None:
    with pytest.raises(ValueError):
        DenseDataset(store_path, dtype=np.uint8, codec="zstd_dict", dict_size=dict_size)
    assert not os.path.exists(store_path)


def similar_records(rng: np.random.Generator, count: int, size: int) -> npt.NDArray[np.uint8]:
    """Small records sharing most of their content: a few templates with sparse edits."""
    templates = rng.integers(0, 256, size=(4, size), dtype=np.uint8)
    records = templates[rng.integers(0, 4, size=count)].copy()
    edits = rng.integers(0, size, size=(count, size // 16))
    for row, cols in enumerate(edits):
        records[row, cols] = rng.integers(0, 256, size=len(cols), dtype=np.uint8)
    return records


def test_zstd_dict_refuses_append_until_trained(store_path: str, rng: np.random.Generator) -> None:
    values = similar_records(rng, 300, 128)
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(128,), codec="zstd_dict",
                      dict_size="small")
    with pytest.raises(DictionaryError, match="train_dict"):
        ds.append(values)
    assert len(ds) == 0 and not ds.has_dict
    with pytest.raises(ValueError, match="train_dict needs at least one sample"):
        ds.train_dict(values[:0])
    assert not ds.has_dict
    ds.train_dict(values)
    assert ds.has_dict
    assert ds.append(values) == 0
    same_bits(ds[:], values)
    ds.close()
    with DenseDataset(store_path) as again:
        assert again.has_dict
        same_bits(again[::7], values[::7])


def test_ragged_zstd_dict_refuses_append_until_trained(
    store_path: str, rng: np.random.Generator
) -> None:
    records = [row[: 40 + i % 50] for i, row in enumerate(similar_records(rng, 200, 128))]
    rs = RaggedDataset(store_path, dtype=np.uint8, codec="zstd_dict", dict_size=8192)
    with pytest.raises(DictionaryError, match="train_dict"):
        rs.append(records)
    rs.train_dict(records)
    rs.append(records)
    for have, want in zip(rs[:], records):
        same_bits(have, want)


def test_train_dict_only_for_zstd_dict(store_path: str, rng: np.random.Generator) -> None:
    ds = DenseDataset(store_path, dtype=np.uint8, item_shape=(128,))
    with pytest.raises(ValueError, match="zstd_dict"):
        ds.train_dict(similar_records(rng, 100, 128))


def test_zstd_dict_beats_plain_zstd_on_small_similar_records(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    values = similar_records(rng, 2000, 256)
    sizes = {}
    for codec in ("zstd", "zstd_dict"):
        with DenseDataset(str(tmp_path / codec), dtype=np.uint8, item_shape=(256,), codec=codec,
                          dict_size="small") as ds:
            if codec == "zstd_dict":
                ds.train_dict(values[::2])
            ds.append(values)
            same_bits(ds[:], values)
            sizes[codec] = ds.stats()["live_bytes"]
    assert sizes["zstd_dict"] < 0.5 * sizes["zstd"], sizes


def test_pad() -> None:
    records = [np.arange(3, dtype=np.int32), np.arange(1, dtype=np.int32) + 7,
               np.zeros(0, np.int32)]
    dense, lengths = pad(records)
    assert dense.dtype == np.int32 and lengths.dtype == np.int64
    assert dense.tolist() == [[0, 1, 2], [7, 0, 0], [0, 0, 0]]
    assert lengths.tolist() == [3, 1, 0]
    filled, _ = pad(records, value=-1)
    assert filled.tolist() == [[0, 1, 2], [7, -1, -1], [-1, -1, -1]]


def test_pad_with_trailing_dimensions() -> None:
    records = [np.ones((2, 3), np.float16), np.full((4, 3), 2, np.float16)]
    dense, lengths = pad(records)
    assert dense.shape == (2, 4, 3)
    same_bits(dense[0, :2], records[0])
    same_bits(dense[1], records[1])
    assert not dense[0, 2:].any()
    assert lengths.tolist() == [2, 4]


def test_pad_refuses_mixed_records() -> None:
    with pytest.raises(ValueError):
        pad([])
    with pytest.raises(TypeError):
        pad([np.zeros(2, np.int32), np.zeros(2, np.int64)])
    with pytest.raises(ValueError):
        pad([np.zeros((2, 2)), np.zeros((2, 3))])
    with pytest.raises(TypeError):
        pad([np.float64(1.0)])  # type: ignore[list-item]


@pytest.mark.parametrize(("dtype", "value"), [
    (np.int64, np.nan), (np.int32, 1.5), (np.uint8, -1), (np.int32, 2**40), (np.bool_, 5),
    (np.float16, 1e6), (np.float64, 1 + 2j), (np.float32, "x"), (np.int64, None), (np.int8, [1]),
])
def test_pad_refuses_a_value_the_records_cannot_hold(dtype: Any, value: Any) -> None:
    # np.full casts unsafely: NaN padded int records with -2**63, 1.5 with 1, 1e6 float16 with inf.
    records = [np.arange(2).astype(dtype), np.arange(1).astype(dtype)]
    with pytest.raises(ValueError, match=f"padding value .* is not a value of the records' dtype "
                       f"{np.dtype(dtype)}"):
        pad(records, value)


def test_pad_takes_values_a_float_rounds() -> None:
    dense, _ = pad([np.zeros(2, np.float32), np.zeros(1, np.float32)], 0.1)
    assert dense[1, 1] == np.float32(0.1)
    for value in (np.nan, -np.inf):
        assert np.isnan(value) == np.isnan(pad([np.zeros(2), np.zeros(1)], value)[0][1, 1])
    assert pad([np.zeros(2, np.uint8), np.zeros(1, np.uint8)], 2.0)[0].tolist() == [[0, 0], [0, 2]]
    assert pad([np.zeros(2, np.bool_), np.zeros(1, np.bool_)], True)[0][1, 1]
