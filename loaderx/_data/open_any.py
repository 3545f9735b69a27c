"""Opening whatever dataset a path or URL names, dense or ragged, by its schema."""

from __future__ import annotations

from typing import SupportsIndex

from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset
from loaderx._os.paths import PathArg, fs_path
from loaderx._os.urls import is_url, local_path
from loaderx._store.schema import read_schema
from loaderx.errors import SchemaError


def open_dataset(
    path: PathArg,
    readonly: bool = True,
    cache_dir: PathArg | None = None,
    cache_bytes: SupportsIndex | None = None,
) -> DenseDataset | RaggedDataset:
    """The dataset at path: a DenseDataset or a RaggedDataset, as its schema says. A URL's
    schema is only known once its cache holds it, so a ragged dataset at a URL is opened a
    second time as such (that open finds everything cached)."""
    if is_url(path):
        assert isinstance(path, str)
        try:
            return DenseDataset(path, readonly=True, cache_dir=cache_dir, cache_bytes=cache_bytes)
        except SchemaError as exc:
            if "holds a ragged dataset" not in str(exc):
                raise
        return RaggedDataset(path, readonly=True, cache_dir=cache_dir, cache_bytes=cache_bytes)
    folder = local_path(fs_path(path))
    if read_schema(folder).kind == "ragged":
        return RaggedDataset(folder, readonly=readonly)
    return DenseDataset(folder, readonly=readonly)


__all__ = ["open_dataset"]
