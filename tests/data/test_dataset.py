"""Tests of loaderx.dataset: bit-exact round trips (dense and ragged, every dtype, shape and
codec), every index form against NumPy, reads into `out` and gather_into, the README's
examples as written, and a model check against a list. The test_dataset_*.py files beside
this one take appends and opens, dictionaries and pad, pickling, and the dense fast path;
dataset_cases.py holds what they share."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loaderx.dataset import DenseDataset, RaggedDataset, pad
from loaderx._store.schema import Codec

# Fixtures are found by name in the module: imported, pytest uses them.
from dataset_cases import dense, random_samples, reference_positions, same_bits, swap_last_delete

pytestmark = pytest.mark.compiled


NUMERIC = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
]


SHAPES = [(), (3,), (2, 4), (28, 28)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_dense_round_trip_is_bit_exact(
    store_path: str, rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]
) -> None:
    values = random_samples(rng, dtype, shape, 9)
    with DenseDataset(store_path, dtype=dtype, item_shape=shape) as ds:
        assert ds.record_size == np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
        assert ds.append(values[:4]) == 0
        assert ds.append(values[4:]) == 4
        same_bits(ds[:], values)
        same_bits(ds[3], values[3])
    with DenseDataset(store_path) as again:
        assert again.dtype == np.dtype(dtype)
        assert again.item_shape == shape
        same_bits(again[::-1], values[::-1])


@pytest.mark.parametrize("codec", ["raw", "zstd", "zstd_dict"])
def test_dense_round_trip_per_codec(store_path: str, rng: np.random.Generator, codec: Codec) -> None:
    values = random_samples(rng, np.float64, (3,), 200)
    values[::2] = 1.5  # something to compress
    with DenseDataset(store_path, dtype=np.float64, item_shape=(3,), codec=codec) as ds:
        if codec == "zstd_dict":
            ds.train_dict(values)
        ds.append(values)
        same_bits(ds[:], values)


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
def test_ragged_round_trip_is_bit_exact(
    store_path: str, rng: np.random.Generator, dtype: Any, shape: tuple[int, ...]
) -> None:
    records = [random_samples(rng, dtype, shape, length) for length in (3, 0, 1, 7, 2)]
    with RaggedDataset(store_path, dtype=dtype, item_shape=shape) as rs:
        assert rs.append(records[:2]) == 0
        assert rs.append(records[2:]) == 2
        got = rs[:]
        assert isinstance(got, list) and len(got) == len(records)
        for have, want in zip(got, records):
            same_bits(have, want)
        same_bits(rs[-2], records[-2])
        assert rs.lengths(slice(None)).tolist() == [3, 0, 1, 7, 2]
    with RaggedDataset(store_path) as again:
        for have, want in zip(again[[4, 1, 0]], [records[4], records[1], records[0]]):
            same_bits(have, want)


INDEX_FORMS: list[Any] = [
    0, 19, -1, -20, np.int64(7), np.uint8(3), np.array(5),
    slice(None), slice(2, 11, 3), slice(None, None, -1), slice(15, 2, -4), slice(30, 40),
    [0, 5, 2], [-1, -1, 0], [], (4, 3), range(1, 9, 2),
    np.array([3, 1, 3], dtype=np.int32), np.array([19, 0], dtype=np.uint64),
    np.array([-3, 2], dtype=np.int64),
    np.arange(20) % 3 == 0, [i % 2 == 1 for i in range(20)],
]


@pytest.mark.parametrize("index", INDEX_FORMS, ids=repr)
def test_dense_index_forms_match_numpy(
    dense: tuple[DenseDataset, npt.NDArray[Any]], index: Any
) -> None:
    ds, values = dense
    want = values[reference_positions(index, len(values))]
    same_bits(ds[index], want)
    same_bits(ds.read(index), want)


@pytest.mark.parametrize("index", INDEX_FORMS, ids=repr)
def test_ragged_index_forms_match_numpy(store_path: str, index: Any) -> None:
    records = [np.arange(i % 5, dtype=np.int16) + i for i in range(20)]
    rs = RaggedDataset(store_path, dtype=np.int16)
    rs.append(records)
    got = rs[index]
    positions = reference_positions(index, 20)
    if np.ndim(positions) == 0:
        same_bits(got, records[int(positions)])
    else:
        assert isinstance(got, list) and len(got) == len(positions)
        for have, position in zip(got, positions):
            same_bits(have, records[int(position)])


@pytest.mark.parametrize(
    ("index", "error"),
    [(20, IndexError), (-21, IndexError), ([0, 20], IndexError), (np.ones(3, bool), IndexError),
     (1.0, TypeError), ("0", TypeError), (True, TypeError), ([0.5], TypeError)],
    ids=repr,
)
def test_bad_indices(dense: tuple[DenseDataset, npt.NDArray[Any]], index: Any, error: type) -> None:
    ds, _ = dense
    with pytest.raises(error):
        ds[index]


def test_read_into_out(dense: tuple[DenseDataset, npt.NDArray[Any]]) -> None:
    ds, values = dense
    out = np.zeros((3, 2, 3), np.float32)
    assert ds.read([4, 0, 9], out=out) is out
    same_bits(out, values[[4, 0, 9]])
    one = np.zeros((2, 3), np.float32)
    ds.read(-1, out=one)
    same_bits(one, values[-1])
    with pytest.raises(TypeError, match="dtype"):
        ds.read([1], out=np.zeros((1, 2, 3), np.float64))
    with pytest.raises(ValueError, match="shape"):
        ds.read([1, 2], out=np.zeros((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match="contiguous"):
        ds.read([1, 2], out=np.zeros((2, 3, 2), np.float32).transpose(0, 2, 1))


def test_gather_into_hot_path(dense: tuple[DenseDataset, npt.NDArray[Any]]) -> None:
    ds, values = dense
    indices = np.array([19, 0, 7, 7], dtype=np.int64)
    out = np.empty((4, 2, 3), np.float32)
    ds.gather_into(indices, out)
    same_bits(out, values[indices])
    with pytest.raises(TypeError):
        ds.gather_into(indices, np.empty((4, 2, 3), np.float64))
    with pytest.raises(TypeError):
        ds.gather_into(indices.astype(np.int32), out)
    with pytest.raises(ValueError):
        ds.gather_into(indices, np.empty((3, 2, 3), np.float32))
    with pytest.raises(IndexError):
        ds.gather_into(np.array([20], dtype=np.int64), np.empty((1, 2, 3), np.float32))


class _Tagged(np.ndarray):
    """An ndarray subclass: the fast path takes only exact arrays, the general path takes an
    out of a subclass too (indices must be a plain array either way)."""


def test_gather_into_takes_subclasses_and_single_records_the_general_way(
    dense: tuple[DenseDataset, npt.NDArray[Any]]
) -> None:
    ds, values = dense
    indices = np.array([19, 0, 7], dtype=np.int64)
    out = np.zeros((3, 2, 3), np.float32).view(_Tagged)
    ds.gather_into(indices, out)
    same_bits(np.asarray(out), values[indices])
    with pytest.raises(TypeError, match="out has dtype float64, the dataset holds float32"):
        ds.gather_into(indices, np.zeros((3, 2, 3), np.float64).view(_Tagged))
    for index in ([4], [19, 4]):  # one record (the native fast path leaves it), and two
        one = np.full((len(index), 2, 3), -1.0, np.float32)
        ds.gather_into(np.array(index, dtype=np.int64), one)
        same_bits(one, values[index])
        same_bits(ds[np.array(index, dtype=np.int64)], values[index])


def test_gather_into_wrong_types_are_type_errors_before_any_byte_moves(
    dense: tuple[DenseDataset, npt.NDArray[Any]],
) -> None:
    ds, values = dense
    indices = np.array([3, 1], dtype=np.int64)
    raw = bytearray(b"\xee" * (2 * ds.record_size))
    with pytest.raises(TypeError, match="out must be a numpy array .* not bytearray"):
        ds.gather_into(indices, raw)  # type: ignore[arg-type]
    assert raw == bytearray(b"\xee" * (2 * ds.record_size))
    out = np.full((2, 2, 3), -7.0, np.float32)
    for bad in ([3, 1], (3, 1), range(2), memoryview(indices.tobytes())):
        with pytest.raises(TypeError, match=r"indices must be an int64 numpy array, not \w+ \(pass np.asarray"):
            ds.gather_into(bad, out)  # type: ignore[arg-type]
        assert (out == -7.0).all()
    with pytest.raises(TypeError):
        ds.gather_into(np.array([], dtype=np.float64), out[:0])
    ds.gather_into(indices, out)
    same_bits(out, values[indices])


def test_readme_records_dense(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    import numpy as np
    from loaderx.converter import from_numpy
    from loaderx.dataset import DenseDataset

    from_numpy('data', np.arange(64, dtype=np.float32).reshape(8, 2, 4))
    ds = DenseDataset('data')
    result = ds[[0, 5, 2]]
    assert result.shape == (3, 2, 4)
    same_bits(result, np.arange(64, dtype=np.float32).reshape(8, 2, 4)[[0, 5, 2]])


def test_readme_records_ragged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    from loaderx.converter import from_iterator
    from loaderx.dataset import RaggedDataset, pad

    seqs = [np.arange(L, dtype=np.int32) for L in (3, 1, 4, 1, 5)]
    from_iterator('tokens', seqs)
    rs = RaggedDataset('tokens')

    records = rs[[0, 2, 4]]
    padded, lengths = pad(records)
    assert [r.tolist() for r in records] == [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]
    assert padded.shape == (3, 5) and padded.dtype == np.int32
    assert lengths.tolist() == [3, 4, 5]


def test_readme_writable_datasets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    monkeypatch.chdir(tmp_path)
    images = rng.integers(0, 256, size=(2048, 28, 28), dtype=np.uint8)
    single_image = images[5]
    i = 1024
    seq_a, seq_b, seq_c = (np.arange(n, dtype=np.int32) for n in (4, 0, 9))

    from loaderx.dataset import DenseDataset, RaggedDataset

    ds = DenseDataset('mnist/x', dtype=np.uint8, item_shape=(28, 28))  # schema written now
    assert os.path.isfile('mnist/x/schema.msgpack')
    assert ds.append(images[i:i + 1024]) == 0
    assert ds.append(single_image[None]) == 1024
    head = ds[:4]
    same_bits(head, images[i:i + 4])

    tok = RaggedDataset('tokens', dtype=np.int32, item_shape=())
    assert tok.append([seq_a, seq_b, seq_c]) == 0
    picked = tok[[0, 2]]
    assert isinstance(picked, list)
    same_bits(picked[0], seq_a)
    same_bits(picked[1], seq_c)

    model = swap_last_delete(list(np.concatenate([images[i:i + 1024], single_image[None]])),
                             list(range(0, 1025, 2)))
    ds.delete(np.arange(0, len(ds), 2))
    stats = ds.stats()
    assert set(stats) == {'records', 'live_bytes', 'chunk_bytes', 'reclaimable'}
    ds.compact()
    assert len(ds) == 512
    same_bits(ds[:], np.array(model))


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 6)),
        st.tuples(st.just("delete"), st.lists(st.integers(-40, 40), max_size=4)),
        st.tuples(st.just("compact"), st.just(0)),
    ),
    max_size=12,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(operations=OPERATIONS, codec=st.sampled_from(["raw", "zstd"]))
def test_dense_matches_a_list_model(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[str, Any]], codec: Codec
) -> None:
    path = str(tmp_path_factory.mktemp("model") / "ds")
    model: list[npt.NDArray[np.int16]] = []
    counter = 0
    with DenseDataset(path, dtype=np.int16, item_shape=(3,), codec=codec) as ds:
        for name, argument in operations:
            if name == "append":
                batch = (np.arange(argument * 3, dtype=np.int16) + counter).reshape(-1, 3)
                counter += argument * 3
                assert ds.append(batch) == len(model)
                model.extend(batch)
            elif name == "delete":
                picked = [i for i in argument if -len(model) <= i < len(model)]
                ds.delete(picked)
                model = swap_last_delete(model, [i % len(model) for i in picked])
            else:
                ds.compact()
            assert len(ds) == len(model)
        want = np.array(model, dtype=np.int16).reshape(-1, 3)
        same_bits(ds[:], want)
