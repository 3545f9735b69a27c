"""Converters into dataset folders: from_numpy (dense), from_iterator (ragged) and recode.

The public face of loaderx._data.converter: every name here is part of loaderx's API."""

from loaderx._data.converter import (
    CHUNK_BYTES_DEFAULT,
    from_iterator,
    from_numpy,
    recode,
    resolve_dict_size,
)

__all__ = [
    "CHUNK_BYTES_DEFAULT",
    "from_iterator",
    "from_numpy",
    "recode",
    "resolve_dict_size",
]
