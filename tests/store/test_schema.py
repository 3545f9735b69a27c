"""Tests of loaderx._store.schema: validation, the schema.msgpack file, and comparisons on reopen."""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.errors import SchemaError
from loaderx._store.schema import (
    DICT_SIZE_MAX,
    DICT_SIZE_MIN,
    DICT_TIERS,
    ITEM_DIMS_MAX,
    SCHEMA_FILE,
    Schema,
    check_dtype,
    check_item_shape,
    differences,
    make_schema,
    parse_schema,
    read_schema,
    require_same,
    resolve_dict_size,
    write_schema,
)

NUMERIC = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.complex64, np.complex128,
]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_round_trip_through_the_file(tmp_path: Path, dtype: Any) -> None:
    schema = make_schema("dense", dtype, (2, 3), "zstd", "balanced")
    write_schema(str(tmp_path), schema)
    back = read_schema(str(tmp_path))
    assert back == schema
    assert back.dtype == np.dtype(dtype)
    assert back.item_shape == (2, 3)
    assert os.listdir(tmp_path) == [SCHEMA_FILE]  # no temporary file left behind


def test_file_holds_exactly_the_documented_fields(tmp_path: Path) -> None:
    write_schema(str(tmp_path), make_schema("ragged", np.float32, [4], "zstd_dict", "small"))
    raw = msgpack.unpackb((tmp_path / SCHEMA_FILE).read_bytes())
    fields = {
        "format": "loaderx-schema",
        "version": 1,
        "kind": "ragged",
        "dtype": "<f4",
        "item_shape": [4],
        "codec": "zstd_dict",
        "dict_size": 32 << 10,
    }
    # The checksum is the CRC-32 of the msgpack encoding of the other fields, in this order.
    assert raw == {**fields, "checksum": zlib.crc32(msgpack.packb(fields, use_bin_type=True))}


def test_rewrite_replaces_the_file(tmp_path: Path) -> None:
    write_schema(str(tmp_path), make_schema("dense", np.uint8, (), "raw", "balanced"))
    write_schema(str(tmp_path), make_schema("dense", np.int16, (5,), "zstd", "balanced"))
    assert read_schema(str(tmp_path)).dtype == np.dtype(np.int16)


def test_big_endian_dtype_is_kept_as_written() -> None:
    schema = make_schema("dense", ">i4", (), "zstd", "balanced")
    assert schema.dtype.str == ">i4"
    assert parse_schema(msgpack.packb(schema.to_dict()), "x").dtype.str == ">i4"


@pytest.mark.parametrize(
    "dtype", [object, "U4", "S3", "datetime64[s]", [("a", "<i4"), ("b", "<f4")], "V8", "(2,)i4"]
)
def test_unsupported_dtypes_are_type_errors(dtype: Any) -> None:
    with pytest.raises(TypeError, match="not supported"):
        check_dtype(dtype)


def test_garbage_dtype_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a NumPy dtype"):
        check_dtype("nonsense-dtype")


def test_item_shape_forms() -> None:
    assert check_item_shape(()) == ()
    assert check_item_shape(7) == (7,)
    assert check_item_shape([2, np.int64(3)]) == (2, 3)
    with pytest.raises(ValueError, match="negative"):
        check_item_shape((2, -1))
    with pytest.raises(TypeError, match="integers"):
        check_item_shape((2.5,))  # type: ignore[arg-type]


def test_item_shape_takes_a_one_dimensional_integer_array_as_numpy_does(tmp_path: Path) -> None:
    """np.empty((4, *np.array([2, 3]))) works; item_shape=np.array([2, 3]) was refused with
    "must hold integers", which it does."""
    assert check_item_shape(np.array([2, 3])) == (2, 3)
    assert check_item_shape(np.array([], dtype=np.int64)) == ()
    assert check_item_shape(np.array(5)) == (5,)
    with pytest.raises(TypeError, match="not bools"):
        check_item_shape(np.array([True, False]))
    with pytest.raises(TypeError, match="must hold integers"):
        check_item_shape(np.array([2.0, 3.0]))
    with pytest.raises(TypeError, match=r"1-D sequence of ints, got an array of shape \(1, 2\)"):
        check_item_shape(np.array([[2, 3]]))
    with pytest.raises(ValueError, match="negative"):
        check_item_shape(np.array([2, -3]))
    data = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    dataset = DenseDataset(tmp_path / "x", dtype="u1", item_shape=np.array([2, 3]))
    dataset.append(data)
    assert dataset.item_shape == (2, 3)
    np.testing.assert_array_equal(dataset[np.arange(2)], data)
    dataset.close()


def test_item_shape_refuses_bools(tmp_path: Path) -> None:
    """operator.index takes True as 1, which turned item_shape=(True,) into (1,)."""
    for shape in ((True,), (2, False), True, (np.bool_(True),)):
        with pytest.raises(TypeError, match="item_shape must hold integers, not bools"):
            check_item_shape(shape)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not bools"):
        DenseDataset(tmp_path / "x", dtype="u1", item_shape=(True,))
    assert not (tmp_path / "x").exists()


def test_dict_tiers_and_explicit_sizes() -> None:
    assert DICT_TIERS == {"small": 32768, "balanced": 131072, "max": 1048576}
    for name, size in DICT_TIERS.items():
        assert resolve_dict_size(name) == size
    assert resolve_dict_size(50_000) == 50_000
    assert resolve_dict_size(DICT_SIZE_MAX) == DICT_SIZE_MAX
    assert resolve_dict_size(DICT_SIZE_MIN) == DICT_SIZE_MIN
    with pytest.raises(ValueError, match="maximum"):
        resolve_dict_size(DICT_SIZE_MAX + 1)
    with pytest.raises(ValueError, match="minimum"):
        resolve_dict_size(DICT_SIZE_MIN - 1)
    with pytest.raises(ValueError, match="tier|one of"):
        resolve_dict_size("huge")
    with pytest.raises(TypeError):
        resolve_dict_size(True)


def test_dict_size_is_recorded_only_for_zstd_dict() -> None:
    assert make_schema("dense", np.uint8, (), "zstd_dict", 4096).dict_size == 4096
    assert make_schema("dense", np.uint8, (), "zstd", 4096).dict_size == 0
    with pytest.raises(ValueError):
        make_schema("dense", np.uint8, (), "zstd", 1 << 21)  # still validated


def test_sizes_are_checked_at_creation() -> None:
    with pytest.raises(ValueError, match="at least one byte"):
        make_schema("dense", np.float32, (0, 4), "zstd", "balanced")
    with pytest.raises(ValueError, match="1 MiB"):
        make_schema("dense", np.float32, (513, 512), "zstd", "balanced")
    assert make_schema("dense", np.float32, (512, 512), "raw", "balanced").row_size == 1 << 20
    with pytest.raises(ValueError, match="1 MiB"):
        make_schema("ragged", np.uint8, (1 << 20, 2), "zstd", "balanced")
    with pytest.raises(ValueError, match="codec"):
        make_schema("dense", np.uint8, (), "lz4", "balanced")
    with pytest.raises(ValueError, match="kind"):
        make_schema("sparse", np.uint8, (), "zstd", "balanced")


def test_item_shapes_past_numpys_dimension_limit_are_refused_at_creation(tmp_path: Path) -> None:
    # A read adds a leading axis: with one dimension more, nothing could be appended or read.
    np.empty((1,) * (ITEM_DIMS_MAX + 1))
    with pytest.raises(ValueError, match="dimension"):
        np.empty((1,) * (ITEM_DIMS_MAX + 2))
    too_many = (1,) * (ITEM_DIMS_MAX + 1)
    for kind in ("dense", "ragged"):
        with pytest.raises(ValueError, match=rf"item_shape has {ITEM_DIMS_MAX + 1} dimensions, "
                           rf"over the {ITEM_DIMS_MAX} a {kind} dataset can read back"):
            make_schema(kind, np.uint8, too_many, "raw", "balanced")
    with pytest.raises(ValueError, match="dimensions"):
        DenseDataset(tmp_path / "d", dtype=np.uint8, item_shape=too_many, codec="raw")
    assert not (tmp_path / "d").exists()
    most = (1,) * ITEM_DIMS_MAX  # the most that still reads back
    rows = np.arange(3, dtype=np.int16).reshape((3, *most))
    with DenseDataset(tmp_path / "most", dtype=np.int16, item_shape=most, codec="raw") as dense:
        dense.append(rows)
        np.testing.assert_array_equal(dense[[2, 0]], rows[[2, 0]])
    with RaggedDataset(tmp_path / "ragged", dtype=np.int16, item_shape=most[1:],
                       codec="raw") as ragged:
        ragged.append([rows[:2, 0], rows[2:, 0]])
        got = ragged[[1, 0]]
        np.testing.assert_array_equal(got[0], rows[2:, 0])
        np.testing.assert_array_equal(got[1], rows[:2, 0])


def _packed(**changes: Any) -> bytes:
    """A schema file with fields changed (without the checksum, like a schema from before it)."""
    raw = make_schema("dense", np.float32, (2,), "zstd", "balanced").to_dict()
    del raw["checksum"]
    raw.update(changes)
    return msgpack.packb(raw)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1garbage", "not a valid msgpack"),
        (_packed(item_shape=[1] * (ITEM_DIMS_MAX + 1)), "dimensions"),
        (msgpack.packb([1, 2, 3]), "not a loaderx schema"),
        (_packed(format="something-else"), "not a loaderx schema"),
        (_packed(version=2), "upgrade loaderx"),
        (_packed(version="1"), "version"),
        (_packed(item_shape=[2, "x"]), "item_shape"),
        (_packed(dtype="<U4"), "not supported"),
        (_packed(codec="lz4"), "codec"),
        (_packed(kind="sparse"), "kind"),
    ],
)
def test_malformed_files_are_schema_errors(data: bytes, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        parse_schema(data, "somewhere/schema.msgpack")


def test_missing_field_is_named() -> None:
    raw = make_schema("dense", np.float32, (2,), "zstd", "balanced").to_dict()
    del raw["item_shape"], raw["checksum"]
    with pytest.raises(SchemaError, match="item_shape"):
        parse_schema(msgpack.packb(raw), "x")


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_schema(str(tmp_path))


def test_differences_name_each_field() -> None:
    base = make_schema("dense", np.float32, (2,), "zstd", "balanced")
    other = make_schema("dense", np.float64, (3,), "raw", "balanced")
    lines = differences(base, other)
    assert [line.split(":")[0] for line in lines] == ["dtype", "item_shape", "codec"]
    assert differences(base, make_schema("dense", "<f4", [2], "zstd", "max")) == []
    with pytest.raises(SchemaError, match="item_shape: store has \\(2,\\), asked for \\(3,\\)"):
        require_same("ds", base, other)
    require_same("ds", base, Schema("dense", np.dtype("<f4"), (2,), "zstd", 0))
