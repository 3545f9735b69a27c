"""Converters into dataset folders: from_numpy (dense), from_iterator (ragged), from_arrow (Arrow,
Parquet and Hugging Face datasets, one dataset per column) and recode.

The public face of loaderx._data.converter and loaderx._data.recode: every name here is part of
loaderx's API."""

from loaderx._data.arrow_convert import from_arrow
from loaderx._data.converter import from_iterator, from_numpy
from loaderx._data.recode import recode
from loaderx._data.serial import CHUNK_BYTES_DEFAULT
from loaderx._store.schema import resolve_dict_size

__all__ = [
    "CHUNK_BYTES_DEFAULT",
    "from_arrow",
    "from_iterator",
    "from_numpy",
    "recode",
    "resolve_dict_size",
]
