"""Small refusals that used to be confusing (issue 40, point 5): each raises before anything
changes, with a message that says what is wrong."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy, recode
from loaderx.dataset import DenseDataset
from loaderx.errors import ManifestError


def test_a_sharded_dataset_without_its_manifest_says_so(tmp_path: Path) -> None:
    path = tmp_path / "ds"
    from_numpy(str(path), np.arange(24, dtype=np.int32).reshape(12, 2), workers=2,
               shard_records=4)  # sharded from the start: shard-000000, shard-000001, ...
    assert not (path / "meta.zr").exists()
    os.remove(path / "shards.msgpack")
    before = sorted(os.listdir(path))
    with pytest.raises(ManifestError, match="manifest shards.msgpack is missing"):
        DenseDataset(str(path))
    with pytest.raises(ManifestError, match="shard-000000"):
        DenseDataset(str(path), readonly=True)
    assert sorted(os.listdir(path)) == before


def test_recode_refuses_a_destination_inside_its_source(tmp_path: Path) -> None:
    source = tmp_path / "ds"
    from_numpy(str(source), np.arange(10, dtype=np.int16))
    before = sorted(os.listdir(source))
    with pytest.raises(ValueError, match="outside its source"):
        recode(str(source), str(source / "inner"))
    assert sorted(os.listdir(source)) == before
    shutil.rmtree(source)


def test_torch_and_jax_refuse_what_they_cannot_take(tmp_path: Path) -> None:
    from loaderx.jax import device_prefetch
    from loaderx.torch import TorchDataset, collate

    from_numpy(str(tmp_path / "ds"), np.arange(10, dtype=np.int16))
    with DenseDataset(str(tmp_path / "ds"), readonly=True) as ds:
        with pytest.raises(TypeError, match="stream names must be strings"):
            TorchDataset({1: ds})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="iterator of batches"):
        device_prefetch(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="collate passes on the batches"):
        collate(5)
    assert collate({"x": 1}) == {"x": 1}
