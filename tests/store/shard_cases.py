"""What the sharded-dataset tests (test_shards*.py, test_shard_*.py) share: the records, a
sharded dataset of them, and the scripts that play another process."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loaderx.dataset import DenseDataset

CAPACITY = 1000
COUNT = 2500  # three shards: 1000, 1000, 500
SHAPE = (3, 8)


def dense_data(count: int = COUNT) -> npt.NDArray[np.uint16]:
    """Compressible but distinct rows: record i starts with i."""
    rng = np.random.default_rng(7)
    data = (rng.integers(0, 4, size=(count, *SHAPE)) * 1000).astype(np.uint16)
    data[:, 0, 0] = np.arange(count) % 65536
    return data


def sharded(tmp_path: Path) -> tuple[Path, npt.NDArray[np.uint16]]:
    data = dense_data()
    with DenseDataset(tmp_path / "d", dtype=data.dtype, item_shape=SHAPE, codec="raw", shard_records=CAPACITY) as ds:
        ds.append(data)
    return tmp_path / "d", data


KILLED_DELETE = """
import os, sys
import numpy as np
import loaderx._store.shard_delete
from loaderx.dataset import DenseDataset

path, where = sys.argv[1], sys.argv[2]
targets = [int(i) for i in sys.argv[3].split(",")]
original_delete = loaderx._store.shard_delete.delete_each
original_write = loaderx._store.shard_delete.write_manifest

def delete_each(stores, indices, name):
    if where == "before-shards":
        os._exit(9)
    if where in ("between-shards", "held-between-shards"):
        original_delete(stores[:1], indices[:1], name)
        if where == "held-between-shards":  # others start to open meanwhile
            print("between", flush=True)
            import time
            time.sleep(1.0)
        os._exit(9)
    original_delete(stores, indices, name)
    os._exit(9)

def write_manifest(folder, manifest):
    if where == "before-manifest":
        os._exit(9)
    original_write(folder, manifest)

loaderx._store.shard_delete.delete_each = delete_each
loaderx._store.shard_delete.write_manifest = write_manifest
with DenseDataset(path, shard_records=1000) as ds:
    if len(sys.argv) > 4:  # new shards first, for a delete in shards no other handle holds
        loaderx._store.shard_delete.write_manifest = original_write
        ds.append(np.load(sys.argv[4]))
        loaderx._store.shard_delete.write_manifest = write_manifest
    ds.delete(targets)
os._exit(0)
"""


def single_store_of_six(tmp_path: Path) -> Path:
    """A single-store int64 dataset holding 0..5."""
    path = tmp_path / "single"
    with DenseDataset(path, dtype=np.int64, codec="raw") as ds:
        ds.append(np.arange(6, dtype=np.int64))
    return path


# The head of the scripts that play another process appending to the same dataset.
OTHER_PROCESS = "import sys\nimport numpy as np\nfrom loaderx.dataset import DenseDataset\n"


def killed_delete(tmp_path: Path, where: str) -> tuple[Path, npt.NDArray[Any], npt.NDArray[Any]]:
    """The three shards of sharded, a delete over all of them killed at `where` in another
    process; returns the path, the data before and the data the delete leaves."""
    import subprocess
    import sys

    path, data = sharded(tmp_path)
    expected = after_delete(tmp_path, path, TARGETS)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_DELETE, str(path), where, ",".join(map(str, TARGETS))],
        capture_output=True, text=True, timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert done.returncode == 9, done.stderr
    return path, data, expected


# A delete over all three shards of sharded().
TARGETS = [5, 999, 1000, 1500, 2001, 2499, 17]


def after_delete(tmp_path: Path, path: Path, targets: list[int]) -> npt.NDArray[Any]:
    """What the dataset at path holds after deleting targets, done on a copy of it."""
    reference = tmp_path / "reference"
    shutil.copytree(path, reference)
    with DenseDataset(reference, shard_records=CAPACITY) as ds:
        ds.delete(targets)
        result: npt.NDArray[Any] = ds[:]
    return result
