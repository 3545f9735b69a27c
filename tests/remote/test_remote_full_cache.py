"""A cache folder on a disk that is full: opening or reading a remote dataset raises a clear
OSError (never a crash), and once there is room again the records read exactly."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from small_disks import leave_free, mounted_tmpfs

from .s3_server import S3Server
from .test_remote_read import publish

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096


def _used(mount: Path) -> int:
    stats = os.statvfs(mount)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


def test_a_disk_too_full_for_the_state_files_is_an_oserror_not_a_crash(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """The record-state files are memory-mapped. Made as holes (ftruncate), their pages needed
    blocks when first touched (on tmpfs even by a read), and on a full disk the kernel killed
    the process with SIGBUS. Their blocks are now allocated when they are made: an OSError."""
    data = np.arange(40_000, dtype=np.uint32)  # 40,000 records: each state file spans pages
    from_numpy(str(tmp_path / "local"), data, codec="raw", shard_records=20_000)
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    code = textwrap.dedent(f"""
        import numpy as np
        from loaderx.dataset import DenseDataset
        with DenseDataset({url!r}, cache_dir={str(tmp_path / "mnt" / "cache")!r}) as ds:
            assert (ds[np.arange(len(ds))] == np.arange(len(ds), dtype=np.uint32)).all()
        print("READ")
        """)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with mounted_tmpfs(tmp_path / "mnt", "size=8m") as mount:
        # What a replica takes before its first record: its metadata, then the state files
        # (two stores of 20,000 one-byte states: 5 pages each, and the eviction counter's).
        before = _used(mount)
        with DenseDataset(url, cache_dir=mount / "cache", cache_bytes=1 << 20):
            opened = _used(mount) - before
        state_bytes = 2 * 5 * PAGE + PAGE
        subprocess.run(["rm", "-rf", str(mount / "cache")], check=True)
        # Room for the metadata, not for the state files.
        filler = leave_free(mount, opened - state_bytes // 2)
        child = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
        assert child.returncode == 1, (child.returncode, child.stderr[-2000:])
        assert "OSError" in child.stderr and "No space left" in child.stderr, child.stderr[-2000:]
        assert "state file" in child.stderr, child.stderr[-2000:]
        filler.unlink()
        child = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
        assert child.returncode == 0 and "READ" in child.stdout, child.stderr[-2000:]


def test_a_disk_that_fills_while_records_are_fetched_names_the_cache_file(
    s3_env: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """A fetch or a replica's metadata meeting a full disk said only "[Errno 28] No space left
    on device"; the OSError now names the cache file, and reads are exact once there is room."""
    data = np.random.default_rng(3).integers(0, 256, (400, 4000), dtype=np.uint8)
    from_numpy(str(tmp_path / "local"), data, codec="raw")
    url = publish(s3_env, s3_bucket, tmp_path / "local")
    with mounted_tmpfs(tmp_path / "mnt", "size=4m") as mount:
        filler = leave_free(mount, 0)
        with pytest.raises(OSError, match="No space left") as building:
            DenseDataset(url, cache_dir=mount / "cache")
        assert building.value.errno == errno.ENOSPC and str(mount) in str(building.value)
        filler.unlink()
        with DenseDataset(url, cache_dir=mount / "cache") as ds:
            filler = leave_free(mount, 0)
            with pytest.raises(OSError, match="No space left") as fetching:
                ds.read(np.arange(len(ds)))
            assert fetching.value.errno == errno.ENOSPC
            assert str(fetching.value.filename).endswith(".zr")
            filler.unlink()
            np.testing.assert_array_equal(ds.read(np.arange(len(ds))), data)
        # A closed dataset's state files stay mapped until it is collected: let the tmpfs go.
        del ds, building, fetching
        gc.collect()
