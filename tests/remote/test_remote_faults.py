"""A shared cache survives readers killed at any moment (SIGKILL while fetching, writing,
evicting or building a replica): the next reader gets exactly the right records."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

from .s3_server import S3Server
from .test_remote_read import images, publish

ROOT = Path(__file__).resolve().parents[2]


def test_readers_killed_at_random_leave_a_cache_that_reads_exactly(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    data = images(800, 900)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import numpy as np, sys
        from loaderx.dataset import DenseDataset
        ds = DenseDataset({url!r}, cache_dir={str(cache)!r}, cache_bytes=int(sys.argv[1]))
        rng = np.random.default_rng(int(sys.argv[2]))
        print("open", flush=True)
        while True:
            ds[rng.integers(0, len(ds), 64)]
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    rng = np.random.default_rng(0)
    for round_ in range(8):
        # Half the rounds with a cache too small for the dataset, so that kills land in
        # evictions too; the others fill it.
        bound = 120 << 10 if round_ % 2 else 64 << 20
        with subprocess.Popen(  # leaving the block closes its pipes
            [sys.executable, "-c", code, str(bound), str(round_)], env=env,
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        ) as child:
            try:
                if round_ % 3 == 0:
                    time.sleep(float(rng.uniform(0.05, 0.6)))  # maybe while the replica is built
                else:
                    assert child.stdout is not None
                    opened = child.stdout.readline()
                    assert opened == b"open\n", child.stderr.read() if child.stderr else ""
                    time.sleep(float(rng.uniform(0.02, 0.4)))
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
    with DenseDataset(url, cache_dir=cache) as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(data))), data)


def test_a_truncated_object_is_refused_at_open(s3_env: S3Server, s3_bucket: str, tmp_path: Path) -> None:
    from loaderx.errors import CorruptStoreError

    data = images(100, 300)
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    chunk = tmp_path / "local" / "0.zr"
    chunk.write_bytes(chunk.read_bytes()[: 300 * 60])  # records 60.. lie past its end
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    with pytest.raises(CorruptStoreError):
        DenseDataset(url, cache_dir=tmp_path / "cache")


def test_processes_evicting_from_one_small_cache_never_read_a_wrong_record(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """Readers take the warm path (no lock) while other processes evict from the same cache:
    every record read must still be the right one."""
    data = images(500, 1200)
    np.save(tmp_path / "data.npy", data)
    from_numpy(str(tmp_path / "local"), data, codec="zstd")
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    code = textwrap.dedent(f"""
        import sys, time, numpy as np
        from loaderx.dataset import DenseDataset
        from loaderx.dataloader import DataLoader
        data = np.load({str(tmp_path / "data.npy")!r})
        ds = DenseDataset({url!r}, cache_dir={str(tmp_path / "cache")!r}, cache_bytes=300_000)
        seed = int(sys.argv[1])
        rng = np.random.default_rng(seed)
        deadline = time.monotonic() + 3
        reads = 0
        with DataLoader({{"x": ds}}, batch_size=24, seed=seed, mode="iid") as loader:
            # At least 3 s of reads overlapping the other process's, and at least 12 reads
            # however slow a loaded machine makes them.
            while time.monotonic() < deadline or reads < 12:
                idx = rng.integers(0, len(ds), 24)
                assert (ds[idx] == data[idx]).all(), "a wrong record"
                step = loader.step
                assert (next(loader)["x"] == data[loader.indices(step)]).all(), "a wrong batch"
                reads += 2
        print("READS", reads)
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    children = [subprocess.Popen([sys.executable, "-c", code, str(seed)], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed in (1, 2)]
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err.decode()[-3000:]
        assert int(out.rsplit(b"READS", 1)[1]) > 10


def _damages(folder: Path) -> dict[str, Callable[[], None]]:
    """Ways a replica's files can be damaged between opens (by hand, a disk tool, a cleaner)."""
    data = folder / "data"
    chunk = sorted(data.rglob("0.zr"))[0]
    meta = sorted(data.rglob("meta.zr"))[0]
    return {
        "a chunk copy truncated": lambda: os.truncate(chunk, os.path.getsize(chunk) // 2),
        "a chunk copy removed": lambda: chunk.unlink(),
        "meta.zr truncated": lambda: os.truncate(meta, 20),
        "the state folder removed": lambda: shutil.rmtree(folder / "state"),
    }


@pytest.mark.parametrize("damage", ["a chunk copy truncated", "a chunk copy removed",
                                    "meta.zr truncated", "the state folder removed"])
def test_a_replica_damaged_between_opens_is_made_again(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path, damage: str
) -> None:
    """A replica's file truncated or removed made every later open fail (CorruptStoreError,
    FileNotFoundError) until the cache folder was removed by hand. An open now finds a file
    missing or of the wrong size and makes the replica again; while another reader has the
    damaged one open, it says so instead."""
    from loaderx.errors import CorruptStoreError

    data = images(300, 500)
    from_numpy(str(tmp_path / "local"), data, codec="zstd", shard_records=100)
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    cache = tmp_path / "cache"
    with DenseDataset(url, cache_dir=cache) as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(data))), data)
    (folder,) = cache.glob("*/gen-*")
    with DenseDataset(url, cache_dir=cache):  # another reader holds the damaged replica
        _damages(folder)[damage]()
        with pytest.raises(CorruptStoreError, match="another process has it open"):
            DenseDataset(url, cache_dir=cache)
    with DenseDataset(url, cache_dir=cache) as ds:
        np.testing.assert_array_equal(ds.read(np.arange(len(data))), data)
