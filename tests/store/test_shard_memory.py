"""The memory each open shard costs: a dataset of many small shards (one per Ray block, say)
must not cost a fixed few hundred KiB per shard, in a reader that opens it or in the writer
that keeps its shards open. Memory is deterministic, unlike time: the bounds hold on a busy
machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.dataset import DenseDataset

SHARDS = 200
SHARD_RECORDS = 10
# Measured: about 4 KiB per shard on open (6 KiB with its first gather); before the native
# tables were allocated on demand, 338 KiB. The bound leaves room for allocator noise.
KIB_PER_SHARD_MAX = 48

_READER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from loaderx.dataset import DenseDataset

    def rss_kib():
        for line in open('/proc/self/status'):
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
        raise SystemExit('no VmRSS')

    before = rss_kib()
    ds = DenseDataset(sys.argv[1])
    opened = rss_kib()
    rows = ds[np.arange(len(ds))]
    gathered = rss_kib()
    print(json.dumps({'open': opened - before, 'gather': gathered - before, 'length': len(ds),
                      'sum': int(rows.astype(np.int64).sum()), 'first': rows[:3].tolist(),
                      'last': rows[-3:].tolist()}))
    ds.close()
    """
)


def _records() -> npt.NDArray[np.uint8]:
    """Distinct rows: row i holds i's bytes, then noise."""
    rng = np.random.default_rng(11)
    rows = rng.integers(0, 256, (SHARDS * SHARD_RECORDS, 16), dtype=np.uint8)
    rows[:, :4] = np.arange(len(rows), dtype="<u4").view(np.uint8).reshape(-1, 4)
    return rows


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_fresh_reader_pays_a_few_kib_per_open_shard(tmp_path: Path) -> None:
    path = tmp_path / "many"
    rows = _records()
    with DenseDataset(path, dtype=np.uint8, item_shape=(16,), shard_records=SHARD_RECORDS) as ds:
        ds.append(rows)
    assert len(os.listdir(path)) > SHARDS  # the shards and the manifest
    # A fresh process: memory an earlier store freed in this one would hide the cost.
    done = subprocess.run([sys.executable, "-c", _READER, str(path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["length"] == len(rows)
    assert result["sum"] == int(rows.astype(np.int64).sum())
    assert result["first"] == rows[:3].tolist() and result["last"] == rows[-3:].tolist()
    assert result["open"] < KIB_PER_SHARD_MAX * SHARDS, result
    assert result["gather"] < KIB_PER_SHARD_MAX * SHARDS, result


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_writer_pays_a_few_kib_per_shard_it_keeps_open(tmp_path: Path) -> None:
    path = tmp_path / "many"
    rows = _records()
    # In this process: memory that earlier tests freed can only make the growth smaller, and
    # the writer keeps every shard open (338 KiB each before, about 9 KiB now).
    before = _rss_kib()
    with DenseDataset(path, dtype=np.uint8, item_shape=(16,), shard_records=SHARD_RECORDS) as ds:
        ds.append(rows)
        grown = _rss_kib() - before
        assert len(ds) == len(rows)
        assert np.array_equal(ds[np.arange(len(rows))[::-1]], rows[::-1])
    assert grown < KIB_PER_SHARD_MAX * SHARDS, grown
