"""DenseDataset, RaggedDataset, pad and DICT_TIERS: typed NumPy datasets over a Zrecord store.

The public face of loaderx._data.dataset: every name here is part of loaderx's API."""

from loaderx._data.dataset import (
    SHARD_RECORDS_MAX,
    DICT_SIZE_MAX,
    DICT_SIZE_MIN,
    DICT_TIERS,
    DenseDataset,
    RaggedDataset,
    pad,
)

__all__ = [
    "SHARD_RECORDS_MAX",
    "DICT_SIZE_MAX",
    "DICT_SIZE_MIN",
    "DICT_TIERS",
    "DenseDataset",
    "RaggedDataset",
    "pad",
]
