"""A checkpoint saved over a local dataset resumes over its upload read from a URL (the content
identity comes from the replica's copy of the checksums), warm or cold, and an upload of other
records of the same count is refused; on each test server (`remote_root`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import StateMismatchError

from .conftest import RemoteRoot


def test_a_local_state_resumes_over_the_url_and_other_records_are_refused(
    remote_root: RemoteRoot, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(0, 255, (300, 50), dtype=np.uint8)
    from_numpy(tmp_path / "local", data, codec="zstd", shard_records=120, workers=2,
               progress=False)
    other = data.copy()
    other[17, 3] ^= 1
    from_numpy(tmp_path / "other", other, codec="zstd", progress=False)
    remote_root.upload_tree(tmp_path / "local", "ds")
    remote_root.upload_tree(tmp_path / "other", "other")
    with DenseDataset(tmp_path / "local") as ds, DataLoader({"x": ds}, batch_size=20, seed=4) as loader:
        next(loader)
        state = loader.state_dict()
        want = np.array(next(loader)["x"])
    for cache in ("warm", "warm", "cold"):  # the second "warm" opens the filled cache
        folder = tmp_path / ("cache" if cache == "warm" else "cache-cold")
        with DenseDataset(f"{remote_root.url}/ds", cache_dir=folder) as remote:
            with DataLoader({"x": remote}, batch_size=20) as loader:
                loader.load_state_dict(state)
                np.testing.assert_array_equal(next(loader)["x"], want)
    with DenseDataset(f"{remote_root.url}/other", cache_dir=tmp_path / "cache") as remote:
        with DataLoader({"x": remote}, batch_size=20) as loader:
            with pytest.raises(StateMismatchError, match="data: saved"):
                loader.load_state_dict(state)
