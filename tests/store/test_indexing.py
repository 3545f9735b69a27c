"""Tests of loaderx._store.indexing.normalize_index against NumPy's own indexing of a 1-d array."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loaderx._store.indexing import is_scalar_index, normalize_index, normalize_selection


def numpy_says(index: Any, length: int) -> list[int]:
    """What NumPy selects from arange(length) with the same index."""
    selected = np.arange(length)[index]
    return [int(v) for v in np.atleast_1d(selected)]


def check(index: Any, length: int) -> np.ndarray[Any, Any]:
    result = normalize_index(index, length)
    assert result.dtype == np.int64
    assert result.ndim == 1
    assert result.flags.c_contiguous
    return result


@pytest.mark.parametrize("value", [0, 3, 9, -1, -10, np.int8(-2), np.uint32(7), np.int64(5)])
def test_integer_scalars(value: Any) -> None:
    assert check(value, 10).tolist() == numpy_says(value, 10)


@pytest.mark.parametrize("value", [10, -11, 2**70, -(2**70), np.int64(10), np.uint64(2**63)])
def test_integer_out_of_range_names_index_and_length(value: Any) -> None:
    with pytest.raises(IndexError, match=rf"index {int(value)} .*length 10"):
        normalize_index(value, 10)


def test_any_index_of_empty_length_is_out_of_range() -> None:
    with pytest.raises(IndexError, match="length 0"):
        normalize_index(0, 0)
    assert normalize_index(slice(None), 0).tolist() == []
    assert normalize_index([], 0).tolist() == []
    assert normalize_index(np.zeros(0, dtype=bool), 0).tolist() == []


@pytest.mark.parametrize(
    "index",
    [
        slice(None),
        slice(2, 8),
        slice(None, None, 3),
        slice(None, None, -1),
        slice(-3, None),
        slice(8, 2, -2),
        slice(100, 200),
        slice(-100, 3),
        slice(5, 5),
    ],
)
def test_slices(index: slice) -> None:
    assert check(index, 10).tolist() == numpy_says(index, 10)


@given(
    length=st.integers(0, 50),
    start=st.none() | st.integers(-60, 60),
    stop=st.none() | st.integers(-60, 60),
    step=st.none() | st.integers(-7, 7).filter(lambda s: s != 0),
)
def test_slices_match_numpy(
    length: int, start: int | None, stop: int | None, step: int | None
) -> None:
    index = slice(start, stop, step)
    assert check(index, length).tolist() == numpy_says(index, length)


def test_zero_slice_step_is_value_error() -> None:
    with pytest.raises(ValueError):
        normalize_index(slice(None, None, 0), 10)


@given(
    length=st.integers(1, 40),
    data=st.data(),
)
def test_integer_sequences_match_numpy(length: int, data: st.DataObject) -> None:
    values = data.draw(st.lists(st.integers(-length, length - 1), max_size=30))
    expected = numpy_says(np.array(values, dtype=np.int64), length) if values else []
    assert check(values, length).tolist() == expected
    assert check(tuple(values), length).tolist() == expected
    for dtype in (np.int64, np.int32, np.int16):
        assert check(np.array(values, dtype=dtype), length).tolist() == expected


@given(length=st.integers(0, 40), data=st.data())
def test_bool_masks_match_numpy(length: int, data: st.DataObject) -> None:
    mask = data.draw(st.lists(st.booleans(), min_size=length, max_size=length))
    expected = numpy_says(np.array(mask, dtype=bool), length)
    assert check(np.array(mask, dtype=bool), length).tolist() == expected
    assert check(mask, length).tolist() == expected


def test_bool_mask_of_wrong_length() -> None:
    with pytest.raises(IndexError, match="3 entries but there are 4 records"):
        normalize_index(np.array([True, False, True]), 4)
    with pytest.raises(IndexError, match="5 entries"):
        normalize_index([True] * 5, 4)


def test_unsigned_arrays_are_checked_before_conversion() -> None:
    assert check(np.array([0, 3], dtype=np.uint64), 4).tolist() == [0, 3]
    with pytest.raises(IndexError, match=rf"index {2**64 - 1} .*length 4"):
        normalize_index(np.array([2**64 - 1], dtype=np.uint64), 4)
    assert check(np.array([255], dtype=np.uint8), 256).tolist() == [255]


def test_array_out_of_range_names_index_and_length() -> None:
    with pytest.raises(IndexError, match="index 7 is out of range for length 5"):
        normalize_index(np.array([1, 7, 2]), 5)
    with pytest.raises(IndexError, match="index -6 is out of range for length 5"):
        normalize_index(np.array([1, -6, 2]), 5)
    with pytest.raises(IndexError, match="index -6 is out of range for length 5"):
        normalize_index([1, -6], 5)
    with pytest.raises(IndexError, match=rf"index {2**80} is out of range"):
        normalize_index([1, 2**80], 5)


def test_in_range_int64_array_is_returned_without_copy() -> None:
    indices = np.array([4, 0, 2, 2], dtype=np.int64)
    assert normalize_index(indices, 5) is indices


def test_negative_or_strided_arrays_are_copied_and_input_untouched() -> None:
    indices = np.array([-1, 0, -5], dtype=np.int64)
    result = check(indices, 5)
    assert result.tolist() == [4, 0, 0]
    assert indices.tolist() == [-1, 0, -5]
    strided = np.arange(20, dtype=np.int64)[::4]
    result = check(strided, 20)
    assert result.tolist() == [0, 4, 8, 12, 16]


def test_zero_dimensional_arrays() -> None:
    assert check(np.array(3), 5).tolist() == [3]
    assert check(np.array(-1), 5).tolist() == [4]
    with pytest.raises(TypeError):
        normalize_index(np.array(1.0), 5)
    with pytest.raises(TypeError):
        normalize_index(np.array(True), 5)


@pytest.mark.parametrize(
    "index",
    [1.0, np.float64(2.0), "1", b"1", None, 1j, [1.0, 2.0], [1, 2.5], ["a"], [None], {1, 2},
     np.array([1.0, 2.0]), np.array(["a"]), True, np.True_, [True, 1], {"a": 1}],
)
def test_non_integers_are_type_errors(index: Any) -> None:
    with pytest.raises(TypeError):
        normalize_index(index, 10)


def test_multidimensional_index_is_refused() -> None:
    with pytest.raises(IndexError, match="one-dimensional"):
        normalize_index(np.zeros((2, 2), dtype=np.int64), 10)


def test_empty_inputs() -> None:
    assert check([], 10).tolist() == []
    assert check((), 10).tolist() == []
    assert check(np.zeros(0, dtype=np.int64), 10).tolist() == []
    assert check(np.zeros(0, dtype=np.uint8), 10).tolist() == []
    assert check(np.zeros(0, dtype=np.bool_), 0).tolist() == []


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex64, np.str_, object])
def test_empty_non_integer_array_is_refused_as_numpy_refuses_it(dtype: Any) -> None:
    empty = np.array([], dtype=dtype)
    with pytest.raises(IndexError):
        np.arange(10)[empty]  # NumPy's own answer, which normalize_index matches
    with pytest.raises(TypeError, match="must be integers"):
        normalize_index(empty, 10)


def test_range_and_index_protocol() -> None:
    assert check(range(2, 9, 3), 10).tolist() == [2, 5, 8]

    class Five:
        def __index__(self) -> int:
            return 5

    assert check(Five(), 10).tolist() == [5]
    with pytest.raises(IndexError):
        normalize_index(range(8, 12), 10)



@pytest.mark.parametrize(
    ("index", "named"),
    [
        (range(2**62), 2**62 - 1),  # was an allocation of its whole length
        (range(2**63, 2**63 + 1), 2**63),  # was an int64 OverflowError
        (range(2**70), 2**70 - 1),  # len() itself overflows
        (range(-(2**64), 0, 2**62), -(2**64)),
    ],
)
def test_a_range_past_the_length_is_an_index_error_whatever_its_size(
    index: range, named: int
) -> None:
    with pytest.raises(IndexError, match=rf"index {named} is out of range for length 10"):
        normalize_index(index, 10)


def test_ranges_in_range_select_what_their_values_say() -> None:
    for index in (range(4, 2**70, 2**70), range(-1, -11, -3), range(9, -11, -1), range(3, 3),
                  range(2, 9, 3), range(9, 0, -4), range(-10, 10)):
        assert normalize_index(index, 10).tolist() == [v % 10 for v in index]


class ArrayLike:
    """What NumPy converts with __array__ (a torch tensor, a JAX array), without __index__."""

    def __init__(self, values: Any) -> None:
        self.values = np.asarray(values)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        return self.values if dtype is None else self.values.astype(dtype)


def test_array_likes_index_as_numpy_indexes_them() -> None:
    assert check(ArrayLike([3, -1, 0]), 10).tolist() == numpy_says(np.array([3, -1, 0]), 10)
    assert check(ArrayLike(np.arange(10) % 3 == 0), 10).tolist() == [0, 3, 6, 9]
    assert check(ArrayLike(7), 10).tolist() == [7]
    assert is_scalar_index(ArrayLike(7)) and not is_scalar_index(ArrayLike([7]))
    with pytest.raises(IndexError, match="index 10 is out of range for length 10"):
        normalize_index(ArrayLike([1, 10]), 10)
    with pytest.raises(TypeError, match="must be integers, not float64"):
        normalize_index(ArrayLike([1.0]), 10)


def test_selections_carry_the_shape_numpy_gives() -> None:
    class Five:
        def __index__(self) -> int:
            return 5

    grid = np.array([[1, -2], [3, 0], [9, 9]], dtype=np.int32)
    for index, shape in (
        (4, ()), (np.int64(-1), ()), (np.array(2), ()), (Five(), ()), (ArrayLike(6), ()),
        ([1, 2], (2,)), (slice(2, 8, 3), (2,)), (np.zeros(10, dtype=bool), (0,)),
        (grid, (3, 2)), (ArrayLike(grid), (3, 2)), (grid[:, :1], (3, 1)),
    ):
        indices, selection = normalize_selection(index, 10)
        numpy_index = np.asarray(index) if isinstance(index, ArrayLike) else index
        selected = np.arange(10)[numpy_index]
        assert selection == selected.shape == shape
        assert indices.tolist() == selected.reshape(-1).tolist()
    with pytest.raises(IndexError, match="index 10 is out of range"):
        normalize_selection(np.array([[0], [10]]), 10)
    with pytest.raises(IndexError, match="one-dimensional"):
        normalize_selection(np.ones((2, 5), dtype=bool), 10)


def test_sequences_take_0d_array_likes_and_index_objects() -> None:
    """Items of a list index may be 0-d integer/bool array-likes (a torch tensor, found without
    importing torch) or objects with __index__, as they may be a whole index."""

    class Five:
        def __index__(self) -> int:
            return 5

    assert check([ArrayLike(3), -1, np.array(0), Five()], 10).tolist() == [3, 9, 0, 5]
    mask = [ArrayLike(k % 4 == 0) for k in range(10)]
    assert check(mask, 10).tolist() == [0, 4, 8]
    for bad in (ArrayLike(1.0), ArrayLike([1]), np.array([2]), "3"):
        with pytest.raises(TypeError, match="record indices must be integers"):
            normalize_index([1, bad], 10)
    with pytest.raises(TypeError, match="mixing bools and integers"):
        normalize_index([ArrayLike(True), 1], 10)
