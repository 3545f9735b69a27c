"""Runs the main job (python -m loaderx.demo) small, and the Quick Start exactly as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

# The Quick Start of the specification, kept character for character (it assumes numpy is
# already imported as np) so that a change to the public API that breaks it fails here.
QUICK_START = """\
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.dataloader import DataLoader

from_numpy('train_data', np.load('data.npy', mmap_mode='r'))
from_numpy('train_label', np.load('label.npy', mmap_mode='r'))

loader = DataLoader({'data': DenseDataset('train_data'), 'label': DenseDataset('train_label')},
                    transform=lambda batch: batch)

for i, batch in enumerate(loader):
    if i >= 256:
        break

print(batch['data'].shape)
print(batch['label'].shape)
"""


def python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_quick_start_runs_as_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "data.npy", rng.integers(0, 256, (600, 8, 8, 3), dtype=np.uint8))
    np.save(tmp_path / "label.npy", np.arange(600, dtype=np.int64))
    done = python(["-c", "import numpy as np\n" + QUICK_START], tmp_path)
    # Exiting without loader.close() must be clean: the interpreter stops the threads.
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["(256, 8, 8, 3)", "(256,)"]
    assert done.stderr == ""
    assert (tmp_path / "train_data" / "schema.msgpack").exists()


def test_demo_prints_its_table(tmp_path: Path) -> None:
    done = python(["-m", "loaderx.demo", "--records", "600", "--steps", "20", "--batch-size",
                   "64", "--workers", "2", "--dir", str(tmp_path / "work")], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if line.split()}
    for codec in ("raw", "zstd", "zstd_dict", "npy-mmap"):
        assert codec in rows, done.stdout
        assert rows[codec][1] == "600"
    # Smooth images compress: zstd must beat raw on disk.
    assert float(rows["zstd"][4].rstrip("x")) > 1.5
    assert "b/s" in rows["raw"]
