"""How an Arrow column becomes a loaderx dataset: its kind from its type, its values as records.

Imported only by from_arrow once it is called (pyarrow is an optional extra).

  bool, integer, floating                    -> a DenseDataset of scalars
  fixed_size_list of those (nested or not)   -> a DenseDataset, item shape from the list sizes
  list / large_list of either of the above   -> a RaggedDataset (a record may be empty)
  binary, large_binary, fixed_size_binary    -> a bare Zrecord, one record per value
  string, large_string (and their views)     -> a bare Zrecord of each value's UTF-8 bytes

Anything else is refused before anything is written, with what to do instead. Nulls are
refused when they are met, naming the column and the row (loaderx has no missing values).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.types as pat  # type: ignore[import-untyped]

DENSE: Final = "dense"
RAGGED: Final = "ragged"
BYTES: Final = "bytes"


class ColumnPlan:
    """One column to convert: its name, its folder under the destination, and what it becomes."""

    name: str
    folder: str
    kind: str
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...]

    def __init__(self, name: str, folder: str, kind: str, dtype: np.dtype[Any],
                 item_shape: tuple[int, ...]) -> None:
        self.name = name
        self.folder = folder
        self.kind = kind
        self.dtype = dtype
        self.item_shape = item_shape


# --- types ------------------------------------------------------------------------------------


def _scalar_dtype(arrow_type: Any) -> np.dtype[Any] | None:
    """The NumPy dtype of a bool, integer or floating Arrow type; None for any other."""
    if pat.is_boolean(arrow_type) or pat.is_integer(arrow_type) or pat.is_floating(arrow_type):
        found: np.dtype[Any] = np.dtype(arrow_type.to_pandas_dtype())
        return found
    return None


def _fixed_shape(arrow_type: Any) -> tuple[np.dtype[Any], tuple[int, ...]] | None:
    """(dtype, shape) of a scalar or of (nested) fixed_size_lists of scalars; None otherwise."""
    shape: list[int] = []
    while pat.is_fixed_size_list(arrow_type):
        shape.append(int(arrow_type.list_size))
        arrow_type = arrow_type.value_type
    dtype = _scalar_dtype(arrow_type)
    return None if dtype is None else (dtype, tuple(shape))


def _is_bytes(arrow_type: Any) -> bool:
    return bool(pat.is_binary(arrow_type) or pat.is_large_binary(arrow_type)
                or pat.is_fixed_size_binary(arrow_type) or pat.is_binary_view(arrow_type)
                or _is_text(arrow_type))


def _is_text(arrow_type: Any) -> bool:
    return bool(pat.is_string(arrow_type) or pat.is_large_string(arrow_type)
                or pat.is_string_view(arrow_type))


def _is_variable_list(arrow_type: Any) -> bool:
    return bool(pat.is_list(arrow_type) or pat.is_large_list(arrow_type))


def _array_cast_target(arrow_type: Any) -> Any | None:
    """For an extension type with a `shape` over nested variable-length lists of numbers (a
    Hugging Face Array2D to Array5D; its storage alone would be refused as lists of lists), the
    type that stores it: those lists made fixed_size_lists of the shape's sizes, the first one
    left variable when the shape starts with None. None for any other type."""
    shape = getattr(arrow_type, "shape", None)
    leaf = arrow_type.storage_type
    depth = 0
    while _is_variable_list(leaf):
        leaf = leaf.value_type
        depth += 1
    if not isinstance(shape, tuple) or depth == 0 or len(shape) != depth:
        return None
    sized = all(isinstance(size, int) for size in shape[1:])
    if not sized or not isinstance(shape[0], (int, type(None))) or _scalar_dtype(leaf) is None:
        return None
    target = leaf
    for size in reversed(shape[1:]):
        target = pa.list_(target, size)
    return pa.list_(target) if shape[0] is None else pa.list_(target, shape[0])


def _advice(arrow_type: Any) -> str:
    """What to do with a column of a type loaderx does not store."""
    if pat.is_struct(arrow_type):
        fields = ", ".join(field.name for field in arrow_type)
        return (f"a struct (fields {fields}); write each field as its own column: "
                "table.flatten() makes 'column.field' columns (a Hugging Face Image column "
                "flattens to 'column.bytes', the encoded image, and 'column.path')")
    if pat.is_dictionary(arrow_type):
        return "dictionary-encoded; decode it first (pyarrow.compute.cast to its value type)"
    if pat.is_temporal(arrow_type):
        return ("a date or time; cast it to an integer first "
                "(pyarrow.compute.cast(column, pa.int64()))")
    if pat.is_decimal(arrow_type):
        return "a decimal; cast it to float64 or to a scaled integer first"
    if _is_variable_list(arrow_type) or pat.is_fixed_size_list(arrow_type):
        return ("a list whose items are not numbers or fixed-size lists of numbers; pad inner "
                "lists to one length (fixed_size_list) or write each level as its own column")
    if isinstance(arrow_type, pa.BaseExtensionType):
        target = _array_cast_target(arrow_type)
        if target is not None:
            return (f"an array of shape {arrow_type.shape} (a Hugging Face Array2D to Array5D) "
                    f"stored as lists of any length ({arrow_type.storage_type}); cast it to "
                    f"{target} first (table.column(name).cast(...)): those lists carry the shape")
        return f"an extension type; convert its storage ({arrow_type.storage_type}) instead"
    return "not a number, a list of numbers, binary or a string; convert it to one of those"


def plan_column(name: str, folder: str, arrow_type: Any) -> ColumnPlan:
    """What column `name` of type arrow_type becomes; TypeError saying how to prepare it if
    loaderx cannot store it."""
    fixed = _fixed_shape(arrow_type)
    if fixed is not None:
        return ColumnPlan(name, folder, DENSE, fixed[0], fixed[1])
    if _is_variable_list(arrow_type):
        inner = _fixed_shape(arrow_type.value_type)
        if inner is not None:
            return ColumnPlan(name, folder, RAGGED, inner[0], inner[1])
    if _is_bytes(arrow_type):
        return ColumnPlan(name, folder, BYTES, np.dtype(np.uint8), ())
    raise TypeError(f"column {name!r} has Arrow type {arrow_type}, which loaderx does not store: "
                    f"it is {_advice(arrow_type)}")


# --- values -----------------------------------------------------------------------------------


def _first_null(array: Any) -> int:
    mask = array.is_null().to_numpy(zero_copy_only=False)
    return int(np.flatnonzero(mask)[0])


def _refuse_nulls(name: str, array: Any, rows: npt.NDArray[np.int64] | None, row0: int) -> None:
    """ValueError naming the first null of array and its row; rows maps a position in a
    flattened child array to its row (None: positions are rows)."""
    if array.null_count == 0:
        return
    position = _first_null(array)
    if rows is None:
        where = f"a null at row {row0 + position}"
    else:
        where = f"a null inside the list at row {row0 + int(rows[position])}"
    raise ValueError(f"column {name!r} holds {where}: loaderx datasets have no missing values; "
                     "fill them first (pyarrow.compute.fill_null) or drop those rows "
                     "(Table.drop_null())")


def _flat_values(name: str, array: Any, rows: npt.NDArray[np.int64] | None,
                 row0: int) -> npt.NDArray[Any]:
    """The scalars under array (fixed_size_lists flattened, a slice's offset honoured) as one
    NumPy array, refusing a null at any level."""
    while pat.is_fixed_size_list(array.type):
        _refuse_nulls(name, array, rows, row0)
        size = int(array.type.list_size)
        index = np.arange(len(array), dtype=np.int64) if rows is None else rows
        rows = np.repeat(index, size)
        array = array.flatten()
    _refuse_nulls(name, array, rows, row0)
    values: npt.NDArray[Any] = array.to_numpy(zero_copy_only=False)
    return values


def dense_block(plan: ColumnPlan, array: Any, row0: int) -> npt.NDArray[Any]:
    """One chunk of a dense column as a (rows, *item_shape) array."""
    values = _flat_values(plan.name, array, None, row0)
    return values.reshape((len(array), *plan.item_shape))


def ragged_records(plan: ColumnPlan, array: Any, row0: int) -> list[npt.NDArray[Any]]:
    """One chunk of a list column as one (L, *item_shape) array per row (views of one block)."""
    _refuse_nulls(plan.name, array, None, row0)
    offsets = array.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]  # a slice's offsets start where its first list does
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(array), dtype=np.int64), lengths)
    values = _flat_values(plan.name, array.flatten(), rows, row0)
    values = values.reshape((-1, *plan.item_shape))
    return [values[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def byte_records(plan: ColumnPlan, array: Any, row0: int) -> list[bytes]:
    """One chunk of a binary or string column as one bytes record per row (strings as UTF-8)."""
    _refuse_nulls(plan.name, array, None, row0)
    if _is_text(array.type):
        return [text.encode("utf-8") for text in array.to_pylist()]
    records: list[bytes] = array.to_pylist()
    return records


__all__ = ["BYTES", "DENSE", "RAGGED", "ColumnPlan", "byte_records", "dense_block",
           "plan_column", "ragged_records"]
