"""The files and folders a remote dataset's cache makes take the umask's mode, as a local
dataset's do (decisions.md, "permissions from the umask").

Several processes on a host may share a cache folder (docs/remote.md, "Sharing"), a group's
members too under umask 002; but the cache's lock files (state/*.lock, its fetch claims, the
look-ahead's hint locks, a version's in-use lock) and its state maps were made 0o644 whatever
the umask, so another member could not take a lock to fetch, evict or publish a hint.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader
from loaderx.dataset import DenseDataset

from loaderx._remote.shared_hints import SharedHints  # private: publishes hints on demand
from .s3_server import S3Server


def modes(folder: Path) -> dict[str, int]:
    """Every entry under folder (itself as '.') with its permission bits, and 0o40000 added
    for a folder. An entry gone between the listing and its lstat is left out: walked while a
    loader runs, the look-ahead replaces its hint files (a temporary file renamed into place)."""
    found = {".": folder.stat().st_mode & (0o777 | stat.S_IFDIR)}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            assert stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode), path
            found[os.path.relpath(path, folder)] = info.st_mode & (0o777 | stat.S_IFDIR)
    return found


def wrong_modes(found: dict[str, int]) -> dict[str, str]:
    """The entries whose mode is not what umask 002 gives (0o775 folders, 0o664 files)."""
    return {name: oct(mode) for name, mode in found.items()
            if mode != (stat.S_IFDIR | 0o775 if mode & stat.S_IFDIR else 0o664)}


def test_a_remote_datasets_cache_files_follow_the_umask(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = np.random.default_rng(3).integers(0, 256, (400, 300), dtype=np.uint8)
    from_numpy(str(tmp_path / "local"), data, codec="zstd", shard_records=150)
    s3_env.upload_tree(tmp_path / "local", s3_bucket, "ds")
    url = f"s3://{s3_bucket}/ds"
    cache = tmp_path / "cache"
    old = os.umask(0o002)
    try:
        # A bound below the dataset: fetches, evictions and the loader's look-ahead hints.
        remote = DenseDataset(url, cache_dir=cache, cache_bytes=64 << 10)
        during: dict[str, int] = {}
        with DataLoader({"x": remote}, batch_size=8, seed=1, mode="iid") as loader:
            for step, batch in zip(range(30), loader):
                np.testing.assert_array_equal(batch["x"], data[loader.indices(step)])
                during.update(modes(cache))  # the hints' files are withdrawn at close
        remote.close()
        with DenseDataset(url, cache_dir=cache) as again:  # the version's reuse
            np.testing.assert_array_equal(again[[0, 399, 150]], data[[0, 399, 150]])
    finally:
        os.umask(old)
    found = modes(cache)
    assert any(name.endswith(".lock") for name in found), sorted(found)
    assert wrong_modes(found) == {}
    assert wrong_modes(during) == {}


def test_the_look_aheads_hint_files_follow_the_umask(tmp_path: Path) -> None:
    """The files one process publishes its look-ahead in (state/hints): its lock, made 0o644
    whatever the umask, and its hints."""
    hints = SharedHints(str(tmp_path))
    old = os.umask(0o002)
    try:
        hints.publish(np.array([3, 1], dtype=np.int64), np.array([7], dtype=np.int64),
                      np.array([2], dtype=np.int64))
        found = modes(tmp_path / "hints")
    finally:
        os.umask(old)
        hints.close()
    assert wrong_modes(found) == {} and len(found) == 3, found
    assert sorted(os.path.splitext(name)[1] for name in found) == ["", ".lock", ".npz"]
