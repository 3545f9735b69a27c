"""Tests for the loaderx command: every subcommand's output, exit codes 0 / 1 / 2, --json,
the console script and `python -m loaderx`, sharded datasets, reads beside a writer, verify
and --version. The test_cli_*.py files beside this one take convert's checks, failures and
interrupts, and reads in bounded blocks; cli_cases.py holds what they share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.cli import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, build_parser, main
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset

# Fixtures are found by name in the module: imported, pytest uses them.
from cli_cases import ROOT, images, run


def test_convert_info_stats_head(tmp_path: Path, images: np.ndarray,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    status, text = run("convert", "images.npy", "ds", "--codec", "zstd")
    assert status == EXIT_OK and "ds: 500 records (zstd)" in text
    with DenseDataset("ds") as ds:
        assert np.array_equal(ds[:], images)
    status, text = run("info", "ds", "--json")
    info = json.loads(text)
    assert status == EXIT_OK
    assert info["kind"] == "dense" and info["dtype"] == "uint8" and info["item_shape"] == [32, 32]
    assert info["records"] == 500 and info["logical_bytes"] == images.nbytes
    assert info["compression_ratio"] == round(images.nbytes / info["data_bytes"], 4) > 1.5
    # Files grow as records need them: the apparent size is the data plus one growth step
    # (1 MiB) and the table, not 4 GiB of sparse chunk.
    assert 0 < info["apparent_bytes"] <= info["data_bytes"] + (1 << 20) + 16 * 501 + 4096
    assert info["allocated_bytes"] > 0
    status, text = run("info", "ds")
    assert "records        500" in text and "compression" in text
    status, text = run("stats", "ds", "--json")
    stats = json.loads(text)
    assert stats["records"] == 500 and stats["record_bytes_min"] == stats["record_bytes_max"] == 1024
    status, text = run("head", "ds", "-n", "2")
    assert status == EXIT_OK and "(2 of 500 records)" in text
    assert text.startswith(repr(images[:2])[:20])


def test_stats_prints_words_and_json_prints_keys(tmp_path: Path) -> None:
    """stats printed its dictionary's keys (live_bytes, record_bytes_min) for people to read;
    the snake_case keys now belong to --json alone."""
    from_numpy(tmp_path / "ds", np.arange(40, dtype=np.uint8).reshape(10, 4), progress=False)
    status, text = run("stats", str(tmp_path / "ds"))
    assert status == EXIT_OK
    assert text.splitlines() == [
        "records            10",
        "live bytes         40",
        "chunk bytes        40",
        "reclaimable bytes  0",
        "smallest record    4",
        "largest record     4",
        "mean record        4.0",
    ]
    status, text = run("stats", str(tmp_path / "ds"), "--json")
    assert list(json.loads(text)) == ["records", "live_bytes", "chunk_bytes", "reclaimable",
                                      "record_bytes_min", "record_bytes_max",
                                      "record_bytes_mean"]


def test_info_lists_the_datasets_of_a_folder_holding_several(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`info` on what `convert x.npz out` writes (one dataset a sub-folder) said "not a loaderx
    dataset"; it now gives a line for each, and --json a list. A folder holding none still
    fails as before."""
    arrays = {"images": np.arange(400, dtype=np.uint8).reshape(100, 2, 2),
              "labels": np.arange(100, dtype=np.int64)}
    np.savez(tmp_path / "x.npz", **arrays)  # type: ignore[arg-type]
    assert run("convert", str(tmp_path / "x.npz"), str(tmp_path / "out"), "--quiet")[0] == EXIT_OK
    (tmp_path / "out" / "notes").mkdir()
    status, text = run("info", str(tmp_path / "out"))
    assert status == EXIT_OK
    assert text.splitlines() == [
        "name    kind   dtype  item shape  records  codec  data bytes",
        "images  dense  uint8  (2, 2)      100      zstd   400 B",
        "labels  dense  int64  ()          100      zstd   800 B",
    ]
    status, text = run("info", str(tmp_path / "out"), "--json")
    listed = json.loads(text)
    assert [(i["path"], i["dtype"], i["records"]) for i in listed] == [
        (str(tmp_path / "out" / "images"), "uint8", 100),
        (str(tmp_path / "out" / "labels"), "int64", 100),
    ]
    assert listed[0] == json.loads(run("info", str(tmp_path / "out" / "images"), "--json")[1])
    capsys.readouterr()
    assert run("info", str(tmp_path / "out" / "notes")) == (EXIT_PROBLEM, "")
    assert "not a loaderx dataset" in capsys.readouterr().err


@pytest.mark.parametrize("bug", [TypeError("a bug"), KeyError("a bug"), ValueError("a bug")])
def test_a_bug_in_a_command_is_a_traceback_not_a_one_line_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bug: Exception
) -> None:
    """main caught every TypeError and ValueError and printed it as a problem with the user's
    input (exit 1), so a bug in loaderx read like a bad argument. Only the errors the library
    documents for bad input are caught now, around the calls that raise them."""
    from_numpy(tmp_path / "ds", np.arange(40, dtype=np.uint8).reshape(10, 4), progress=False)

    def broken(*args: object) -> object:
        raise bug

    monkeypatch.setattr("loaderx.cli.inspection.record_sizes", broken)
    with pytest.raises(type(bug), match="a bug"):
        main(["stats", str(tmp_path / "ds")])


@pytest.mark.parametrize("array, message", [
    (np.array(3), "from_numpy needs an array with at least one dimension (axis 0: records)"),
    (np.zeros((3, 4)), "'zstd_dict' trains a dictionary on the records, which needs at least 7 "
                       "of them (ideally hundreds); there are 3: use 'zstd'"),
])
def test_convert_still_says_what_from_numpy_refuses_in_one_line(
    tmp_path: Path, array: np.ndarray, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """With main no longer catching every ValueError, convert catches from_numpy's own."""
    np.save(tmp_path / "a.npy", array)
    status, text = run("convert", str(tmp_path / "a.npy"), str(tmp_path / "d"), "--quiet",
                       "--codec", "zstd_dict")
    assert (status, text) == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == f"loaderx convert: {message}\n"


def test_npz_ragged_and_bare_stores(tmp_path: Path) -> None:
    np.savez(tmp_path / "pair.npz", x=np.arange(10.0), y=np.ones((4, 3), np.int16))
    status, text = run("convert", str(tmp_path / "pair.npz"), str(tmp_path / "out"), "--codec", "raw")
    assert status == EXIT_OK and "out/x: 10 records (raw)" in text
    assert json.loads(run("info", str(tmp_path / "out" / "y"), "--json")[1])["item_shape"] == [3]
    from_iterator(tmp_path / "ragged", [np.arange(n, dtype=np.int32) for n in (2, 0, 5)])
    status, text = run("head", str(tmp_path / "ragged"))
    assert "[2] shape (5,): [0 1 2 3 4]" in text and "(3 of 3 records)" in text
    assert json.loads(run("info", str(tmp_path / "ragged"), "--json")[1])["kind"] == "ragged"
    from loaderx.zrecord import Zrecord

    with Zrecord(tmp_path / "bare", create=True, codec="raw") as store:
        store.append([b"hello", b"x" * 100])
    status, text = run("head", str(tmp_path / "bare"))
    assert "[0] b'hello'" in text and "(100 bytes)" in text
    assert json.loads(run("info", str(tmp_path / "bare"), "--json")[1])["kind"] == "zrecord"
    status, _ = run("bench", str(tmp_path / "ragged"))
    assert status == EXIT_PROBLEM


def test_recode_compact_and_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = np.arange(300, dtype=np.int64)
    from_numpy(tmp_path / "a", values)
    status, _ = run("recode", str(tmp_path / "a"), str(tmp_path / "b"), "--codec", "raw")
    assert status == EXIT_OK
    status, _ = run("recode", str(tmp_path / "a"), str(tmp_path / "b"), "--codec", "raw")
    assert status == EXIT_PROBLEM
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    status, _ = run("recode", str(tmp_path / "a"), str(tmp_path / "b"), "--codec", "zstd",
                    "--overwrite")
    assert status == EXIT_OK
    with DenseDataset(tmp_path / "b") as ds:
        assert ds.codec == "zstd" and np.array_equal(ds[:], values)
        ds.delete(np.arange(0, 300, 2))
    status, text = run("compact", str(tmp_path / "b"))
    assert status == EXIT_OK and "150 records" in text
    with DenseDataset(tmp_path / "b") as ds:
        assert ds.stats()["reclaimable"] == 0 and len(ds) == 150


def test_problems_exit_1_and_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("info", str(tmp_path / "missing"))[0] == EXIT_PROBLEM
    assert "no such file or folder" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    assert run("stats", str(tmp_path / "empty"))[0] == EXIT_PROBLEM
    assert "not a loaderx dataset" in capsys.readouterr().err
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    assert run("convert", str(tmp_path / "bad.npy"), str(tmp_path / "d"))[0] == EXIT_PROBLEM
    assert "bad.npy: not a NumPy (.npy/.npz) or Parquet file\n" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    for argv in (["info"], ["frobnicate"], ["convert", "x.npy", "y", "--codec", "gzip"], []):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == EXIT_USAGE
    # Bad counts and sizes are usage errors too, refused before any store is opened.
    for argv, message in (
        (["head", "x", "-n", "-3"], "argument -n: must be >= 0, got -3"),
        (["head", "x", "-n", "abc"], "argument -n: an integer, not 'abc'"),
        (["bench", "x", "--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
        (["bench", "x", "--batch", "-1"], "argument --batch: must be >= 1, got -1"),
        (["bench", "x", "--records", "0"], "argument --records: must be >= 1, got 0"),
        (["convert", "x.npy", "y", "--dict-size", "huge"],
         "argument --dict-size: one of small, balanced, max or a byte count, not 'huge'"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == EXIT_USAGE
        assert message in capsys.readouterr().err


@pytest.mark.parametrize("seconds, message", [
    ("nan", "must be a finite number > 0, got nan"),
    ("inf", "must be a finite number > 0, got inf"),
    ("-inf", "must be a finite number > 0, got -inf"),
    ("0", "must be a finite number > 0, got 0"),
    ("-0.5", "must be a finite number > 0, got -0.5"),
    ("soon", "a number of seconds, not 'soon'"),
])
def test_bench_seconds_must_be_finite_and_above_zero(
    tmp_path: Path, seconds: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A timing round waits for --seconds to pass: nan or inf never ended. A usage error (exit
    2), found before the store is opened (there is none here: the old code said exit 1)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", str(tmp_path / "none"), "--rounds", "1", f"--seconds={seconds}"])
    assert exit_info.value.code == EXIT_USAGE
    assert f"argument --seconds: {message}" in capsys.readouterr().err
    assert build_parser().parse_args(["bench", "x", "--seconds", "1e-3"]).seconds == 0.001


def test_bench_compares_with_a_memmap(tmp_path: Path, images: np.ndarray) -> None:
    from_numpy(tmp_path / "raw", images, codec="raw")
    status, text = run("bench", str(tmp_path / "raw"), "--json", "--rounds", "1",
                       "--seconds", "0.02", "--batch", "64", "--tmp", str(tmp_path))
    result: dict[str, Any] = json.loads(text)
    assert status == EXIT_OK and result["records"] == 500 and result["batch"] == 64
    assert set(result["mib_s"]) == {"loaderx gather_into", "loaderx ds[idx]", "numpy memmap a[idx]"}
    assert result["vs_memmap"]["numpy memmap a[idx]"] == 1.0
    assert all(value > 0 for value in result["mib_s"].values())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("loaderx-bench-")] == []


def test_python_m_loaderx_and_the_console_script(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "loaderx", "--help"], capture_output=True,
                          text=True, env=env, check=False)
    assert done.returncode == 0
    for command in ("info", "stats", "head", "convert", "recode", "compact", "bench"):
        assert command in done.stdout
    done = subprocess.run([sys.executable, "-m", "loaderx", "info", str(tmp_path / "none")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == EXIT_PROBLEM and "no such file" in done.stderr
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["loaderx"] == "loaderx.cli:entry_point"


def test_info_lists_the_shards_of_a_sharded_dataset(tmp_path: Path) -> None:
    values = np.arange(250, dtype=np.int64)
    with DenseDataset(tmp_path / "big", dtype=np.int64, item_shape=(), codec="raw",
                      shard_records=100) as ds:
        ds.append(values)
        assert ds.sharded
        names = [str(s["name"]) for s in ds.shard_stats()]
    info = json.loads(run("info", str(tmp_path / "big"), "--json")[1])
    assert info["shards"] == names and len(names) == 3
    assert info["records"] == 250 and info["logical_bytes"] == values.nbytes
    assert "shards" in run("info", str(tmp_path / "big"))[1]
    shard = json.loads(run("info", str(tmp_path / "big" / names[1]), "--json")[1])
    assert shard["shards"] is None and shard["records"] == 100
    root_only = sum(entry.stat().st_blocks * 512 for entry in (tmp_path / "big").iterdir()
                    if entry.is_file())
    assert info["allocated_bytes"] >= root_only + shard["allocated_bytes"]  # shards count too


def test_inspection_is_read_only_and_works_beside_a_writer(tmp_path: Path) -> None:
    with DenseDataset(tmp_path / "live", dtype=np.int32, item_shape=(2,)) as writer:
        writer.append(np.arange(20, dtype=np.int32).reshape(10, 2))
        before = sorted(p.name for p in (tmp_path / "live").iterdir())
        status, text = run("info", str(tmp_path / "live"), "--json")
        assert status == EXIT_OK and json.loads(text)["records"] == 10
        assert run("head", str(tmp_path / "live"), "-n", "1")[0] == EXIT_OK
        writer.append(np.zeros((1, 2), dtype=np.int32))  # the writer is not disturbed
    assert sorted(p.name for p in (tmp_path / "live").iterdir()) == before


def test_verify_lists_bad_records_and_exits_1(tmp_path: Path) -> None:
    data = np.arange(100 * 16, dtype=np.int32).reshape(100, 16)  # 64-byte records
    from_numpy(tmp_path / "ds", data, codec="raw")
    status, text = run("verify", str(tmp_path / "ds"))
    assert status == EXIT_OK and "100 records checked" in text and text.rstrip().endswith("OK")
    with open(tmp_path / "ds" / "0.zr", "r+b") as chunk:  # raw records sit in index order
        chunk.seek(64 * 5 + 3)
        byte = chunk.read(1)
        chunk.seek(64 * 5 + 3)
        chunk.write(bytes([byte[0] ^ 0xFF]))
    status, text = run("verify", str(tmp_path / "ds"))
    assert status == EXIT_PROBLEM
    assert "bad record 5: checksum" in text and text.rstrip().endswith("\n1 bad record")
    report = json.loads(run("verify", str(tmp_path / "ds"), "--json")[1])
    assert report["ok"] is False and report["bad"] == [{"index": 5, "reason": "checksum"}]
    assert report["records"] == 100 and report["has_checksums"] is True


def test_version_prints_the_package_version_and_exits_zero() -> None:
    """`loaderx --version`, as git and zstd answer it: name and version on stdout, status 0."""
    import loaderx

    done = subprocess.run([sys.executable, "-m", "loaderx", "--version"], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"loaderx {loaderx.__version__}\n"


def test_verify_counts_one_record_in_the_singular(tmp_path: Path) -> None:
    from_numpy(str(tmp_path / "one"), np.arange(1, dtype=np.int64), codec="raw")
    status, text = run("verify", str(tmp_path / "one"))
    assert status == EXIT_OK
    assert f"{tmp_path / 'one'}: 1 record checked in " in text and "1 records" not in text


def test_info_says_which_records_reads_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A zstd dataset keeps records that do not shrink raw, and default reads leave those
    unchecked: `info` counts them, so "compressed" is not read as "checked" (issue 40, point 5)."""
    from loaderx.errors import CorruptStoreError

    rng = np.random.default_rng(40)
    data = np.zeros((100, 64), np.uint8)
    noisy = np.arange(3, 100, 7)  # 14 records of noise, which zstd cannot shrink
    data[noisy] = rng.integers(0, 256, (len(noisy), 64), dtype=np.uint8)
    from_numpy(tmp_path / "zstd", data)
    from_numpy(tmp_path / "sharded", data, workers=2, shard_records=30)
    from_numpy(tmp_path / "raw", data, codec="raw")
    from_numpy(tmp_path / "smooth", np.zeros((50, 64), np.uint8))
    expected = {
        "zstd": "14 of 100 records are stored raw, checked only with verify=True or "
                "`loaderx verify`; the rest on every read",
        "sharded": "14 of 100 records are stored raw, checked only with verify=True or "
                   "`loaderx verify`; the rest on every read",
        "raw": "100 of 100 records are stored raw, checked only with verify=True or "
               "`loaderx verify`",
        "smooth": "every record, on every read",
    }
    for name, text in expected.items():
        status, shown = run("info", str(tmp_path / name))
        assert status == EXIT_OK
        assert f"read checks    {text}\n" in shown, shown
    assert json.loads(run("info", str(tmp_path / "zstd"), "--json")[1])["unchecked_records"] == 14
    # What the count means: a flipped byte in one of those records passes a default read and
    # is caught with verify=True.
    entry = (tmp_path / "zstd" / "meta.zr").read_bytes()[16 + 16 * 3:][:16]  # record 3's
    offset = int.from_bytes(entry[:4], "little")
    assert entry[14] == 0  # stored raw
    with open(tmp_path / "zstd" / "0.zr", "r+b") as chunk:
        chunk.seek(offset)
        byte = chunk.read(1)[0]
        chunk.seek(offset)
        chunk.write(bytes([byte ^ 0xFF]))
    with DenseDataset(tmp_path / "zstd", readonly=True) as ds:
        assert ds[3][0] == data[3][0] ^ 0xFF  # unchecked, as info says
    with DenseDataset(tmp_path / "zstd", readonly=True, verify=True) as ds:
        with pytest.raises(CorruptStoreError, match="checksum"):
            ds[3]
    capsys.readouterr()
