"""Tests for padded ragged batches (Padding): the native pad (loaderx._native.padded_batch, what
RaggedStream._pad and pad_into call) gives exactly ds[indices] padded, for every Padding form,
dtype and row shape, and its binding refuses bad arguments with nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx._loading.ragged_batch import pad_into
from loaderx._native.padded_batch import pad_rows
from loaderx.dataloader import DataLoader, Padding
from loaderx.dataset import RaggedDataset
from loaderx.mixture import MixtureLoader

# The step maker and DataLoader are compiled with mypyc: the compiled run takes this module too.
pytestmark = pytest.mark.compiled


def records(count: int, dtype: Any, item_shape: tuple[int, ...], longest: int,
            seed: int) -> list[npt.NDArray[Any]]:
    """count records of 0 to `longest` rows (a few empty), values spread over the dtype."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, longest + 1, size=count)
    lengths[:3] = (0, longest, 1)
    made = []
    for length in lengths:
        shape = (int(length), *item_shape)
        if np.dtype(dtype).kind == "f":
            made.append(rng.standard_normal(shape).astype(dtype))
        elif np.dtype(dtype) == np.bool_:
            made.append(rng.integers(0, 2, size=shape).astype(np.bool_))
        else:
            info = np.iinfo(dtype)
            made.append(rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype))
    return made


def expect_padded(batch: dict[str, Any], name: str, expected: list[npt.NDArray[Any]],
                  length: int, value: Any, dtype: Any, item_shape: tuple[int, ...]) -> None:
    """batch[name] and its mask are exactly the records padded to length with value (NaN
    compares as NaN)."""
    out, mask = batch[name], batch[name + ".mask"]
    assert out.shape == (len(expected), length, *item_shape) and out.dtype == dtype
    assert mask.shape == (len(expected), length) and mask.dtype == np.bool_
    assert out.flags.c_contiguous and mask.flags.c_contiguous
    pad = np.full(item_shape, value, dtype=dtype)
    for i, record in enumerate(expected):
        kept = min(len(record), length)
        assert mask[i].tolist() == [True] * kept + [False] * (length - kept)
        assert out[i, :kept].tobytes() == record[:kept].tobytes()
        assert out[i, kept:].tobytes() == np.broadcast_to(pad, (length - kept, *item_shape)).tobytes()


# Each Padding form, and the length it pads a batch to from the batch's longest record.
FORMS: dict[str, tuple[Padding, Callable[[int], int]]] = {
    "fixed": (Padding(40, value=5), lambda longest: 40),
    "buckets": (Padding(buckets=(8, 16, 40)),
                lambda longest: min(b for b in (8, 16, 40) if b >= longest)),
    "longest": (Padding(value=-3), lambda longest: longest),
    "truncate": (Padding(buckets=(4, 12), value=7, truncate=True), lambda longest: 12),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize(("dtype", "item_shape"), [
    (np.int32, ()), (np.float32, (3,)), (np.uint8, ()), (np.float64, (2, 2)), (np.int16, (5,)),
    (np.bool_, ()),
])
def test_padded_batches_are_the_records_for_every_form_dtype_and_row(
    tmp_path: Path, form: str, dtype: Any, item_shape: tuple[int, ...]
) -> None:
    padding, target = FORMS[form]
    value = padding.value
    if np.dtype(dtype) == np.bool_:
        padding = Padding(padding.length, buckets=padding.buckets, truncate=padding.truncate,
                          value=bool(value))
        value = bool(value)
    elif np.dtype(dtype).kind != "f" and value < 0 and np.dtype(dtype).kind == "u":
        value = 0
        padding = Padding(padding.length, buckets=padding.buckets, truncate=padding.truncate)
    data = records(60, dtype, item_shape, longest=36 if form != "truncate" else 20, seed=3)
    dataset = RaggedDataset(tmp_path / "r", dtype=dtype, item_shape=item_shape)
    dataset.append(data)
    with dataset, DataLoader({"r": dataset}, batch_size=6, seed=1, ragged=padding) as loader:
        for step in range(12):
            indices = loader.indices(step)
            expected = dataset[indices]
            longest = max(len(record) for record in expected)
            expect_padded(next(loader), "r", expected, target(longest), value, dtype, item_shape)


@pytest.mark.parametrize("reuse", [False, True])
def test_batches_of_one_record_and_batches_of_empty_records(tmp_path: Path, reuse: bool) -> None:
    """B = 1 (the longest of a batch is its record), and batches whose records are all empty
    (padded to the longest: 0 rows; to a length: padding only)."""
    dataset = RaggedDataset(tmp_path / "e", dtype=np.float32, item_shape=(2,))
    data = records(20, np.float32, (2,), longest=9, seed=8)
    data[5:] = [np.empty((0, 2), dtype=np.float32)] * 15
    dataset.append(data)
    with dataset:
        with DataLoader({"e": dataset}, batch_size=1, seed=2, ragged=Padding(value=np.inf),
                        reuse_buffers=reuse) as loader:
            for step in range(25):
                expected = dataset[loader.indices(step)]
                expect_padded(next(loader), "e", expected, len(expected[0]), np.inf,
                              np.float32, (2,))
        empty = np.arange(5, 20, dtype=np.int64)
        for padding, length in ((Padding(), 0), (Padding(3, value=-1.5), 3)):
            with DataLoader({"e": dataset}, batch_size=4, mode="sequential", seed=0,
                            start_step=2, ragged=padding, reuse_buffers=reuse) as loader:
                for step in range(2, 5):
                    indices = loader.indices(step)
                    assert set(indices.tolist()) <= set(empty.tolist())
                    expect_padded(next(loader), "e", dataset[indices], length, padding.value,
                                  np.float32, (2,))


def test_a_mixture_pads_through_the_same_call(tmp_path: Path) -> None:
    sources = []
    for s in range(2):
        dataset = RaggedDataset(tmp_path / f"s{s}", dtype=np.int16, item_shape=(3,))
        dataset.append(records(30, np.int16, (3,), longest=12, seed=s))
        sources.append({"x": dataset})
    try:
        with MixtureLoader(sources, [0.5, 0.5], batch_size=5, seed=4,
                           ragged=Padding(buckets=(6, 12), value=9)) as loader:
            for step in range(10):
                batch = next(loader)
                chosen, indices = loader.sampler.batch(step)
                expected = [sources[c]["x"][int(i)] for c, i in zip(chosen, indices)]
                longest = max(len(record) for record in expected)
                expect_padded(batch, "x", expected, 6 if longest <= 6 else 12, 9, np.int16, (3,))
    finally:
        for source in sources:
            source["x"].close()


# --- pad_into and the binding -------------------------------------------------------------


def pad_reference(values: npt.NDArray[Any], cu: npt.NDArray[np.int32], length: int, value: Any,
                  out: npt.NDArray[Any], mask: npt.NDArray[np.bool_]) -> None:
    """pad_into as NumPy wrote it before the native call."""
    lengths = np.diff(cu)
    kept = np.minimum(lengths, length).astype(np.int32, copy=False)
    np.less(np.arange(length, dtype=np.int32), kept[:, None], out=mask)
    out.fill(value)
    if bool((lengths > length).any()):
        starts = np.repeat(cu[:-1], lengths)
        values = values[(np.arange(len(values), dtype=np.int32) - starts) < length]
    out[mask] = values


@pytest.mark.parametrize(("dtype", "item_shape", "value"), [
    (np.int32, (), -1), (np.uint8, (), 255), (np.float64, (3,), np.nan), (np.complex64, (2,), 1j),
    (np.int64, (1, 2), 7), (np.float16, (4097,), 0.5),
])
def test_pad_into_writes_what_numpy_wrote(dtype: Any, item_shape: tuple[int, ...],
                                          value: Any) -> None:
    rng = np.random.default_rng(11)
    for _ in range(10):
        count = int(rng.integers(1, 7))
        lengths = rng.integers(0, 9, size=count)
        cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = (rng.standard_normal((int(cu[-1]), *item_shape)) * 100).astype(dtype)
        length = int(rng.integers(0, 10))
        out = np.full((count, length, *item_shape), 3, dtype=dtype)
        mask = np.zeros((count, length), dtype=np.bool_)
        wanted, wanted_mask = out.copy(), mask.copy()
        pad_into(values, cu, length, value, out, mask)
        pad_reference(values, cu, length, value, wanted, wanted_mask)
        assert out.tobytes() == wanted.tobytes() and mask.tolist() == wanted_mask.tolist()


@pytest.mark.parametrize("policy", ["POOL_ALWAYS", "POOL_NEVER", "POOL_AUTO"])
def test_a_batch_the_pool_helps_with_is_the_same(policy: str) -> None:
    """A padded batch of a few MiB is split with the pool's helpers (as the policy says): the
    bytes are the same either way."""
    from loaderx._native import library as _native

    rng = np.random.default_rng(5)
    cu = np.concatenate([[0], np.cumsum(rng.integers(0, 3000, size=200))]).astype(np.int32)
    values = rng.integers(-1000, 1000, size=(int(cu[-1]), 2), dtype=np.int32)
    out = np.empty((200, 2048, 2), dtype=np.int32)
    mask = np.empty((200, 2048), dtype=np.bool_)
    wanted, wanted_mask = out.copy(), mask.copy()
    pad_reference(values, cu, 2048, -9, wanted, wanted_mask)
    before = _native.pool_policy()
    try:
        _native.set_pool_policy(getattr(_native, policy))
        for _ in range(10):  # under POOL_AUTO, both ways while the advisor warms up
            out.fill(1)
            pad_into(values, cu, 2048, -9, out, mask)
            assert np.array_equal(out, wanted) and np.array_equal(mask, wanted_mask)
    finally:
        _native.set_pool_policy(before)


def test_pad_into_refuses_arrays_of_other_shapes() -> None:
    cu = np.array([0, 2, 3], dtype=np.int32)
    values = np.arange(3, dtype=np.int32)
    out = np.zeros((2, 4), dtype=np.int32)
    mask = np.zeros((2, 4), dtype=np.bool_)
    with pytest.raises(ValueError, match=r"out must be \(2, 4, ...\)"):
        pad_into(values, cu, 4, 0, out[:1], mask)
    with pytest.raises(ValueError, match="mask"):
        pad_into(values, cu, 4, 0, out, mask.astype(np.uint8))
    with pytest.raises(ValueError, match="rows of values"):
        pad_into(values.reshape(3, 1), cu, 4, 0, out, mask)
    assert not out.any() and not mask.any()


def call(values: Any = None, cu: Any = None, row_size: int = 4, pad_row: Any = None,
         length: int = 3, out: Any = None, mask: Any = None) -> None:
    """pad_rows with good arguments unless given: records of 1, 3 and 0 int32 rows."""
    pad_rows(
        np.arange(4, dtype=np.int32) if values is None else values,
        np.array([0, 1, 4, 4], dtype=np.int32) if cu is None else cu,
        row_size,
        np.full(1, -1, dtype=np.int32) if pad_row is None else pad_row,
        length,
        OUT if out is None else out,
        MASK if mask is None else mask,
    )


OUT = np.full(9, 77, dtype=np.int32)
MASK = np.full(9, 2, dtype=np.uint8)


def test_the_binding_pads_into_larger_buffers_and_leaves_the_rest() -> None:
    out = np.full(12, 77, dtype=np.int32)
    mask = np.full(12, 2, dtype=np.uint8)
    call(out=out, mask=mask)
    assert out.tolist() == [0, -1, -1, 1, 2, 3, -1, -1, -1, 77, 77, 77]
    assert mask.tolist() == [1, 0, 0, 1, 1, 1, 0, 0, 0, 2, 2, 2]
    call(out=out, mask=mask, length=2)  # the record of 3 rows keeps its first 2
    assert out.tolist()[:6] == [0, -1, 1, 2, -1, -1]


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"cu": np.array([0, 1, 4, 4], dtype=np.int64)}, TypeError, "int32"),
    ({"cu": [0, 1, 4, 4]}, TypeError, "int32"),
    ({"cu": np.zeros((2, 2), dtype=np.int32)}, ValueError, "one-dimensional"),
    ({"cu": np.zeros(0, dtype=np.int32)}, ValueError, "at least one offset"),
    ({"cu": np.array([0, 3, 1, 4], dtype=np.int32)}, ValueError, r"decrease at 2 \(3 then 1\)"),
    ({"cu": np.array([-1, 1, 4, 4], dtype=np.int32)}, ValueError, "below 0"),
    ({"cu": np.array([0, 1, 4, 5], dtype=np.int32)}, ValueError, "past the 4 rows"),
    ({"cu": np.array([0, 1, 4, 4, 4], dtype=np.int32)}, ValueError, "out holds 36 bytes, the padded batch needs 48"),
    ({"cu": np.arange(8, dtype=np.int32)[::2]}, ValueError, "cu must be C-contiguous"),
    ({"values": np.arange(8, dtype=np.int32)[::2]}, ValueError, "values must be C-contiguous"),
    ({"values": list(range(4))}, TypeError, "values must be a numpy array"),
    ({"row_size": 0, "pad_row": np.zeros(0, dtype=np.uint8)}, ValueError, "row_size is 0"),
    ({"pad_row": np.zeros(2, dtype=np.int32)}, ValueError, "pad_row holds 8 bytes, not the row's 4"),
    ({"length": 4}, ValueError, "out holds 36 bytes, the padded batch needs 48"),
    ({"mask": np.zeros(8, dtype=np.uint8)}, ValueError, "mask holds 8 bytes"),
    ({"out": np.frombuffer(bytes(36), dtype=np.int32)}, ValueError, "out is read-only"),
    ({"out": np.zeros(18, dtype=np.int32)[::2]}, ValueError, "out must be C-contiguous"),
    ({"mask": OUT.view(np.uint8)}, ValueError, "out and mask overlap"),
    ({"values": OUT[5:]}, ValueError, "out overlaps values"),
    ({"length": -1}, ValueError, "overflows"),
])
def test_the_binding_refuses_bad_arguments_and_writes_nothing(
    kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    OUT.fill(77)
    MASK.fill(2)
    with pytest.raises(error, match=match):
        call(**kwargs)
    assert (OUT == 77).all() and (MASK == 2).all()
