"""DenseDataset, RaggedDataset, pad and DICT_TIERS: typed NumPy datasets over a Zrecord store.

The public face of loaderx._data.dense and loaderx._data.ragged: every name here is part of
loaderx's API."""

from loaderx._data.dense import DenseDataset
from loaderx._data.ragged import RaggedDataset, pad
from loaderx._store.schema import DICT_SIZE_MAX, DICT_SIZE_MIN, DICT_TIERS
from loaderx._store.layout import SHARD_RECORDS_MAX

__all__ = [
    "SHARD_RECORDS_MAX",
    "DICT_SIZE_MAX",
    "DICT_SIZE_MIN",
    "DICT_TIERS",
    "DenseDataset",
    "RaggedDataset",
    "pad",
]
