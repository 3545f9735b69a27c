"""The sample a zstd_dict conversion trains its dictionary on: how large, where from, how few."""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

# A dictionary trains on about this many bytes of samples per byte of dictionary (zstd's advice).
DICT_SAMPLE_FACTOR: Final = 100
# zstd's trainer refuses fewer than 7 samples (codec.zig's dict_sample_count_min); a sample is
# never cut below this many records even when they are large, so training has material.
DICT_SAMPLE_COUNT_MIN: Final = 7
_SAMPLE_COUNT_FLOOR: Final = 32


def sample_positions(count: int, record_bytes: float, dict_size: int) -> npt.NDArray[np.int64]:
    """Evenly strided positions over 0..count whose records total about 100x dict_size bytes."""
    budget = DICT_SAMPLE_FACTOR * dict_size
    wanted = int(budget // max(record_bytes, 1.0))
    taken = min(count, max(_SAMPLE_COUNT_FLOOR, wanted))
    return np.unique(np.linspace(0, count - 1, taken).astype(np.int64))


def check_trainable(codec: str, count: int) -> None:
    """A zstd_dict conversion needs enough records to train on (none at all is fine)."""
    if codec == "zstd_dict" and 0 < count < DICT_SAMPLE_COUNT_MIN:
        raise ValueError(
            f"'zstd_dict' trains a dictionary on the records, which needs at least "
            f"{DICT_SAMPLE_COUNT_MIN} of them (ideally hundreds); there are {count}: use 'zstd'"
        )


__all__ = ["DICT_SAMPLE_COUNT_MIN", "DICT_SAMPLE_FACTOR", "check_trainable", "sample_positions"]
