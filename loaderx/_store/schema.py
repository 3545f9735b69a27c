"""schema.msgpack: the one loaderx-level file of a store folder (kind, dtype, item shape, codec).

A dataset folder is a Zrecord store plus this file. The schema is written once, when a dataset is
created, and read back on every open; it is what lets a dense read know its stride and its
result's shape without touching any per-record metadata.

This module stays interpreted: it runs once per open, never on a read path.
"""

from __future__ import annotations

import operator
import os
import stat
import zlib
from collections.abc import Sequence
from typing import Any, Final, Literal, SupportsIndex

import msgpack
import numpy as np
from numpy.typing import DTypeLike

from loaderx._os import descriptors
from loaderx._store.choices import check_choice
from loaderx.errors import SchemaError
from loaderx._os.paths import is_file, write_file_atomically

SCHEMA_FILE: Final = "schema.msgpack"
SCHEMA_FORMAT: Final = "loaderx-schema"
SCHEMA_VERSION: Final = 1

KINDS: Final = ("dense", "ragged")
# Must agree with loaderx._store.zrecord.CODECS (a test checks it); kept here so that reading a schema
# never needs the native library.
CODEC_NAMES: Final = ("raw", "zstd", "zstd_dict")
# The codec names as a type, so that mypy catches codec="gzip" before anything runs.
Codec = Literal["raw", "zstd", "zstd_dict"]

# Dictionary sizes by name (see the README's codec notes); an explicit byte count is also taken.
DICT_TIERS: Final[dict[str, int]] = {"small": 32 << 10, "balanced": 128 << 10, "max": 1 << 20}
# zstd cannot build anything useful much below a kilobyte (its hard floor is 256 bytes).
DICT_SIZE_MIN: Final = 1 << 10
DICT_SIZE_MAX: Final = 1 << 20

# The store's per-record limit (the same value as loaderx._store.zrecord.RECORD_SIZE_MAX).
RECORD_SIZE_MAX: Final = 1 << 20

# NumPy dtype kinds a dataset may hold: bool, signed, unsigned, floating, complex.
_DTYPE_KINDS: Final = "biufc"
# The schema file is tiny; anything much larger is not one.
_SCHEMA_BYTES_MAX: Final = 1 << 16

def _array_dims_max() -> int:
    """The most dimensions a NumPy array may have here (NPY_MAXDIMS: 64 since NumPy 2, 32
    before), found by asking NumPy: loaderx takes both."""
    try:
        np.empty((1,) * 64, dtype=np.uint8)
    except ValueError:
        return 32
    return 64


# The most dimensions an item may have: a batch of samples (dense) or a record (ragged) adds
# one, and a dataset whose every read would fail at NumPy's limit is refused at creation.
ITEM_DIMS_MAX: Final = _array_dims_max() - 1

_FIELDS: Final = ("kind", "dtype", "item_shape", "codec", "dict_size")
# CRC-32 of the msgpack encoding of every other field, in order. Schemas written before it
# existed have no such field and still open.
_CHECKSUM_FIELD: Final = "checksum"


def _fields_checksum(fields: dict[Any, Any]) -> int:
    body = {key: value for key, value in fields.items() if key != _CHECKSUM_FIELD}
    return zlib.crc32(msgpack.packb(body, use_bin_type=True))


class Schema:
    """What a dataset folder holds: the kind, the per-row dtype and shape, the append codec.

    For a dense dataset every record is one sample of shape item_shape; for a ragged one every
    record is (L, *item_shape) for its own L. dict_size is the dictionary size used by
    train_dict on a zstd_dict store and 0 for the other codecs.
    """

    kind: str
    dtype: np.dtype[Any]
    item_shape: tuple[int, ...]
    codec: Codec
    dict_size: int

    def __init__(
        self, kind: str, dtype: np.dtype[Any], item_shape: tuple[int, ...], codec: Codec, dict_size: int
    ) -> None:
        self.kind = kind
        self.dtype = dtype
        self.item_shape = item_shape
        self.codec = codec
        self.dict_size = dict_size

    @property
    def row_size(self) -> int:
        """Bytes of one row: the whole record of a dense dataset, one step of L in a ragged one."""
        size = self.dtype.itemsize
        for dim in self.item_shape:
            size *= dim
        return size

    def to_dict(self) -> dict[str, Any]:
        fields = self._fields()
        fields[_CHECKSUM_FIELD] = _fields_checksum(fields)
        return fields

    def _fields(self) -> dict[str, Any]:
        return {
            "format": SCHEMA_FORMAT,
            "version": SCHEMA_VERSION,
            "kind": self.kind,
            "dtype": self.dtype.str,
            "item_shape": list(self.item_shape),
            "codec": self.codec,
            "dict_size": self.dict_size,
        }

    def with_codec(self, codec: Codec, dict_size: str | int) -> Schema:
        """The same data description with another codec (what recode writes)."""
        return make_schema(self.kind, self.dtype, self.item_shape, codec, dict_size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return not differences(self, other)

    def __repr__(self) -> str:
        return (
            f"Schema(kind={self.kind!r}, dtype={self.dtype.str!r}, item_shape={self.item_shape}, "
            f"codec={self.codec!r}, dict_size={self.dict_size})"
        )


def check_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    """The dtype as a np.dtype, if a dataset can hold it (plain numeric, bool or complex)."""
    try:
        found = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{dtype!r} is not a NumPy dtype: {exc}") from exc
    if found.fields is not None or found.subdtype is not None or found.kind not in _DTYPE_KINDS:
        raise TypeError(
            f"a dataset holds bool, integer, floating or complex samples; dtype {found} is not "
            "supported (structured, object, string and datetime dtypes are refused: store each "
            "field as its own dataset, or view the data as an integer type)"
        )
    return found


def check_item_shape(item_shape: SupportsIndex | Sequence[SupportsIndex]) -> tuple[int, ...]:
    """The item shape as a tuple of non-negative ints (an int n means (n,))."""
    dims: Sequence[SupportsIndex]
    if isinstance(item_shape, Sequence):
        dims = item_shape
    elif isinstance(item_shape, np.ndarray) and item_shape.ndim == 1:
        # NumPy takes a 1-D integer array as a shape (a.shape saved with np.array, say).
        dims = list(item_shape)
    elif isinstance(item_shape, np.ndarray) and item_shape.ndim > 1:
        raise TypeError(
            f"item_shape must be an int or a 1-D sequence of ints, got an array of shape "
            f"{item_shape.shape}"
        )
    else:
        dims = (item_shape,)
    result: list[int] = []
    for dim in dims:
        # operator.index takes True as 1: a bool here is a mistake, not a size.
        if isinstance(dim, (bool, np.bool_)):
            raise TypeError(f"item_shape must hold integers, not bools, got {item_shape!r}")
        try:
            value = operator.index(dim)
        except TypeError as exc:
            raise TypeError(f"item_shape must hold integers, got {item_shape!r}") from exc
        if value < 0:
            raise ValueError(f"item_shape must not hold negative sizes, got {item_shape!r}")
        result.append(value)
    return tuple(result)


def check_codec(codec: object) -> Codec:
    """codec as a Codec (a plain str, also for a NumPy str); TypeError for what is no str,
    ValueError for another str, both listing the codecs (loaderx._store.choices)."""
    return check_choice("codec", codec, CODEC_NAMES)


def resolve_dict_size(dict_size: str | SupportsIndex) -> int:
    """A DICT_TIERS name or an explicit byte count, as bytes (range-checked)."""
    if isinstance(dict_size, str):
        if dict_size not in DICT_TIERS:
            names = ", ".join(map(repr, DICT_TIERS))
            raise ValueError(f"dict_size must be one of {names} or a byte count; got {dict_size!r}")
        return DICT_TIERS[dict_size]
    if isinstance(dict_size, bool) or not isinstance(dict_size, (int, np.integer)):
        raise TypeError(f"dict_size must be a tier name or an int, got {dict_size!r}")
    size = int(dict_size)
    if size > DICT_SIZE_MAX:
        raise ValueError(f"dict_size {size} is over the {DICT_SIZE_MAX}-byte (1 MiB) maximum")
    if size < DICT_SIZE_MIN:
        raise ValueError(f"dict_size {size} is under the {DICT_SIZE_MIN}-byte minimum")
    return size


def make_schema(
    kind: str,
    dtype: DTypeLike,
    item_shape: SupportsIndex | Sequence[SupportsIndex],
    codec: object,
    dict_size: str | SupportsIndex,
) -> Schema:
    """A validated Schema; raises TypeError / ValueError naming the argument at fault."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'dense' or 'ragged', got {kind!r}")
    found_dtype = check_dtype(dtype)
    shape = check_item_shape(item_shape)
    checked = check_codec(codec)
    size = resolve_dict_size(dict_size)
    schema = Schema(kind, found_dtype, shape, checked, size if checked == "zstd_dict" else 0)
    if len(shape) > ITEM_DIMS_MAX:
        raise ValueError(
            f"item_shape has {len(shape)} dimensions, over the {ITEM_DIMS_MAX} a {kind} dataset "
            f"can read back (a read adds a leading axis, and NumPy arrays have at most "
            f"{ITEM_DIMS_MAX + 1})"
        )
    row_size = schema.row_size
    what = "sample" if kind == "dense" else "row (one step along a record's first axis)"
    if row_size == 0:
        raise ValueError(
            f"a {kind} dataset's {what} must be at least one byte; item_shape {shape} of {found_dtype} "
            "has none"
        )
    if row_size > RECORD_SIZE_MAX:
        raise ValueError(
            f"one {what} of shape {shape} and dtype {found_dtype} is {row_size} bytes, over the "
            f"store's {RECORD_SIZE_MAX}-byte (1 MiB) record limit"
        )
    return schema


def schema_path(folder: str) -> str:
    return os.path.join(folder, SCHEMA_FILE)


def has_schema(folder: str) -> bool:
    """Whether folder holds its schema file; False when nothing is there.

    Something else in its place (a folder, a link to nothing) is a damaged dataset: SchemaError.
    Taken for "no schema", it would open as a bare Zrecord store, and maintenance would run on
    a dataset that does not open. A folder the user may not search is a PermissionError.
    """
    path = schema_path(folder)
    if is_file(path):
        return True
    try:
        found = os.lstat(path)  # is_file has shown that the folder can be searched
    except (FileNotFoundError, NotADirectoryError):  # no folder there, or a file
        return False
    # A conversion swapping the dataset's folder can put a schema in place between the two
    # looks: a file found now is one.
    if stat.S_ISREG(found.st_mode) or is_file(path):
        return True
    what = "folder" if stat.S_ISDIR(found.st_mode) else (
        "symbolic link to nothing" if stat.S_ISLNK(found.st_mode) else "special file"
    )
    raise SchemaError(
        f"{path} is a {what}, not a loaderx schema: the dataset is damaged and does not open; "
        f"restore {SCHEMA_FILE} from a copy of the dataset"
    )


def _field(raw: dict[Any, Any], name: str, path: str) -> Any:
    if name not in raw:
        raise SchemaError(f"{path}: the schema has no {name!r} field")
    return raw[name]


def parse_schema(data: bytes, path: str) -> Schema:
    """A Schema from the bytes of a schema file; SchemaError if they are not one."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError) as exc:
        raise SchemaError(f"{path} is not a valid msgpack schema file: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("format") != SCHEMA_FORMAT:
        raise SchemaError(f"{path} is not a loaderx schema (no format {SCHEMA_FORMAT!r})")
    if _CHECKSUM_FIELD in raw and raw[_CHECKSUM_FIELD] != _fields_checksum(raw):
        raise SchemaError(f"{path} does not match its checksum: the file is corrupt")
    version = raw.get("version")
    if not isinstance(version, int) or version < 1:
        raise SchemaError(f"{path}: bad schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise SchemaError(
            f"{path} has schema version {version}; this loaderx reads version {SCHEMA_VERSION} "
            "(upgrade loaderx)"
        )
    values = {name: _field(raw, name, path) for name in _FIELDS}
    if not isinstance(values["item_shape"], list) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in values["item_shape"]
    ):
        raise SchemaError(f"{path}: item_shape must be a list of ints, got {values['item_shape']!r}")
    if not isinstance(values["dtype"], str) or not isinstance(values["dict_size"], int):
        raise SchemaError(f"{path}: malformed dtype or dict_size field")
    codec = values["codec"]
    dict_size = values["dict_size"] if codec == "zstd_dict" else "balanced"
    try:
        return make_schema(values["kind"], values["dtype"], values["item_shape"], codec, dict_size)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{path}: {exc}") from exc


def read_schema(folder: str) -> Schema:
    """The schema of a dataset folder; FileNotFoundError if the folder has none."""
    path = schema_path(folder)
    with descriptors.open_binary(path, "rb") as f:
        data = f.read(_SCHEMA_BYTES_MAX + 1)
    if len(data) > _SCHEMA_BYTES_MAX:
        raise SchemaError(f"{path} is too large to be a loaderx schema")
    return parse_schema(data, path)


def write_schema(folder: str, schema: Schema) -> None:
    """Writes the schema file atomically (a temporary file, fsync, then rename over)."""
    write_file_atomically(schema_path(folder), msgpack.packb(schema.to_dict(), use_bin_type=True))


def differences(found: Schema, wanted: Schema) -> list[str]:
    """One line per field that differs, e.g. "dtype: store has '<f4', asked for '<f8'"."""
    lines: list[str] = []
    pairs: list[tuple[str, object, object]] = [
        ("kind", found.kind, wanted.kind),
        ("dtype", found.dtype.str, wanted.dtype.str),
        ("item_shape", found.item_shape, wanted.item_shape),
        ("codec", found.codec, wanted.codec),
        ("dict_size", found.dict_size, wanted.dict_size),
    ]
    for name, have, want in pairs:
        if have != want:
            lines.append(f"{name}: store has {have!r}, asked for {want!r}")
    return lines


def require_same(folder: str, found: Schema, wanted: Schema) -> None:
    """Raises SchemaError naming every field where an existing store differs from the request."""
    lines = differences(found, wanted)
    if lines:
        raise SchemaError(
            f"{folder!r} already holds a dataset with a different schema ("
            + "; ".join(lines)
            + "); open it without dtype/item_shape to use its own schema, or choose another path"
        )
