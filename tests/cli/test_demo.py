"""Runs the main job (python -m loaderx.demo) small, and the Quick Start exactly as written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx import demo

ROOT = Path(__file__).resolve().parents[2]

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


@pytest.mark.parametrize("argv, message", [
    (["--records", "0"], "argument --records: must be >= 1, got 0"),
    (["--records", "-5", "--batch-size", "-10"], "argument --records: must be >= 1, got -5"),
    (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
    (["--side", "5"], "argument --side: must be >= 16, got 5"),
    (["--steps", "0"], "argument --steps: must be >= 1, got 0"),
    (["--repeats", "0"], "argument --repeats: must be >= 1, got 0"),
    (["--workers", "0"], "argument --workers: must be >= 1, got 0"),
    (["--workers", "1025"], "argument --workers: must be <= 1024, got 1025"),
    (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--seed", str(2**64)], f"argument --seed: must be <= {2**64 - 1}, got {2**64}"),
    (["--steps", "many"], "argument --steps: an integer, not 'many'"),
    (["--codecs", "foo"],
     "argument --codecs: unknown codec 'foo' (a comma-separated subset of raw,zstd,zstd_dict)"),
    (["--codecs", "zstd,,raw"],
     "argument --codecs: unknown codec '' (a comma-separated subset of raw,zstd,zstd_dict)"),
    (["--records", "5", "--batch-size", "2"],
     "--codecs zstd_dict trains a dictionary, which needs --records of at least 7"),
    (["--dir", "data.npy"], "--dir data.npy: exists and is not a folder"),
])
def test_demo_refuses_bad_options_before_any_work(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of these used to start the run and end in a traceback (ValueError from the sampler,
    the loader or numpy, ZeroDivisionError for --steps 0 or --repeats 0, FileExistsError)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "data.npy").write_bytes(b"mine")
    with pytest.raises(SystemExit) as exit_info:
        demo.main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.rstrip().endswith(f"error: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npy"]


def test_demo_never_writes_into_a_folder_that_holds_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--dir used to overwrite the data.npy and label.npy there: the Quick Start's own file
    names, so a user's folder lost its data."""
    np.save(tmp_path / "data.npy", np.arange(5))
    before = (tmp_path / "data.npy").read_bytes()
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--records", "64", "--batch-size", "8", "--dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(
        f"error: --dir {tmp_path}: not empty (the demo writes data.npy, label.npy and its stores "
        "there, replacing files of those names): pick a new or empty folder"
    )
    assert os.listdir(tmp_path) == ["data.npy"]
    assert (tmp_path / "data.npy").read_bytes() == before


def test_demo_ctrl_c_removes_its_folder_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during the demo used to end in a KeyboardInterrupt traceback."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    original = demo.check_against_numpy

    def interrupted(*args: Any) -> None:
        original(*args)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(demo, "check_against_numpy", interrupted)
    try:
        with pytest.raises(SystemExit) as exit_info:
            demo.main(["--records", "64", "--batch-size", "8", "--steps", "2", "--repeats", "1",
                       "--workers", "1", "--codecs", "raw"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the demo as a KeyboardInterrupt (a traceback for the user)")
    assert exit_info.value.code == 130
    assert capsys.readouterr().err == "loaderx demo: interrupted\n"
    assert list(tmp_path.iterdir()) == []  # the temporary work folder is gone


def test_demo_piped_into_head_stops_quietly(tmp_path: Path) -> None:
    """`python -m loaderx.demo | head -1` ended in a BrokenPipeError traceback."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    child = subprocess.Popen(
        [sys.executable, "-m", "loaderx.demo", "--records", "64", "--batch-size", "8",
         "--steps", "2", "--repeats", "1", "--workers", "1", "--codecs", "raw"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    assert child.stdout is not None and child.stderr is not None
    assert child.stdout.readline().startswith(b"loaderx demo: 64 images")
    child.stdout.close()  # what head does after its first line
    assert child.wait(timeout=120) == 0
    assert child.stderr.read() == b""
    child.stderr.close()
    assert list(tmp_path.iterdir()) == []  # the temporary work folder is gone


def test_demo_refuses_an_image_set_larger_than_memory_up_front(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo makes its whole image set in memory: --records 10**12 ended in a MemoryError
    traceback from NumPy; it is a usage error naming the option, the memory it needs and how
    many records fit."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for argv, message in (
        (["--records", str(10**12)], None),
        (["--records", "100000"], "--records 100000 with --side 32 needs 319.3 MiB of memory "
         "(the demo makes its whole image set in memory), more than this machine's 64.0 MiB: "
         "at most 13547 records fit with this --side"),
        (["--records", "8", "--batch-size", "8", "--side", "4096"],
         "--records 8 with --side 4096 needs 384.4 GiB of memory (the demo makes its whole "
         "image set in memory), more than this machine's 64.0 MiB: no --records fits with this "
         "--side: pick a smaller --side"),
    ):
        if message is not None:
            monkeypatch.setattr(demo, "memory_bytes", lambda: 64 << 20)
        with pytest.raises(SystemExit) as exit_info:
            demo.main(argv)
        assert exit_info.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        if message is None:  # this machine's own memory: 10**12 images of 3 KiB pass any
            assert ("error: --records 1000000000000 with --side 32 needs 2,815.8 TiB of memory "
                    "(the demo makes its whole image set in memory), more than this machine's "
                    ) in captured.err
        else:
            assert captured.err.rstrip().endswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []
    # What fits runs: the largest count the message names, at a side where it is small.
    monkeypatch.setattr(demo, "memory_bytes", lambda: demo.memory_needed(64, 16))
    demo.main(["--records", "64", "--side", "16", "--batch-size", "8", "--steps", "2",
               "--repeats", "1", "--codecs", "raw"])
    assert "loaderx demo: 64 images (16, 16, 3) uint8" in capsys.readouterr().out
