"""A checkpoint saved over a local dataset resumes over its upload read from a URL (the content
identity comes from the replica's copy of the checksums), warm or cold, and an upload of other
records of the same count is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset
from loaderx.errors import StateMismatchError

from .s3_server import S3Server


def test_a_local_state_resumes_over_the_url_and_other_records_are_refused(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    rng = np.random.default_rng(3)
    data = rng.integers(0, 255, (300, 50), dtype=np.uint8)
    from_numpy(tmp_path / "local", data, codec="zstd", shard_records=120, workers=2,
               progress=False)
    other = data.copy()
    other[17, 3] ^= 1
    from_numpy(tmp_path / "other", other, codec="zstd", progress=False)
    s3_env.upload_tree(tmp_path / "local", s3_bucket, "ds")
    s3_env.upload_tree(tmp_path / "other", s3_bucket, "other")
    with DenseDataset(tmp_path / "local") as ds, DataLoader({"x": ds}, batch_size=20, seed=4) as loader:
        next(loader)
        state = loader.state_dict()
        want = np.array(next(loader)["x"])
    for cache in ("warm", "warm", "cold"):  # the second "warm" opens the filled cache
        folder = tmp_path / ("cache" if cache == "warm" else "cache-cold")
        with DenseDataset(f"s3://{s3_bucket}/ds", cache_dir=folder) as remote:
            with DataLoader({"x": remote}, batch_size=20) as loader:
                loader.load_state_dict(state)
                np.testing.assert_array_equal(next(loader)["x"], want)
    with DenseDataset(f"s3://{s3_bucket}/other", cache_dir=tmp_path / "cache") as remote:
        with DataLoader({"x": remote}, batch_size=20) as loader:
            with pytest.raises(StateMismatchError, match="data: saved"):
                loader.load_state_dict(state)
