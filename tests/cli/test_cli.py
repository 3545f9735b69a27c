"""Tests for the loaderx command: every subcommand's output, exit codes 0 / 1 / 2, --json."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.cli import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, build_parser, main
from loaderx.converter import from_iterator, from_numpy
from loaderx.dataset import DenseDataset

ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture
def images(tmp_path: Path) -> np.ndarray:
    data = np.random.default_rng(1).integers(0, 8, size=(500, 32, 32), dtype=np.uint8)
    np.save(tmp_path / "images.npy", data)
    return data


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


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path, with its bytes."""
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("name", ["../escaped", "/abs/escaped", "..", ".", "", "a/b"])
def test_convert_refuses_npz_names_that_leave_dest(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .npz array name becomes DEST/<name>: one that is not a plain folder name ('../x', an
    absolute path) is refused before anything is written, the good arrays beside it too."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    if name.startswith("/"):
        name = str(tmp_path / "abs" / "escaped")
    arrays = {"good": np.arange(5), name: np.arange(3)}
    # numpy's stubs refuse **arrays (a name could be allow_pickle); any name is fine at run time.
    np.savez(work / "in.npz", **arrays)  # type: ignore[arg-type]
    before = tree(tmp_path)
    status, text = run("convert", str(work / "in.npz"), str(work / "sub" / "dest"), "--quiet")
    assert status == EXIT_PROBLEM and text == ""
    err = capsys.readouterr().err
    assert f"array names {name!r} are not plain folder names" in err
    assert "nothing was converted" in err and "'good'" not in err
    assert tree(tmp_path) == before  # not a byte written, inside DEST or out
    assert sorted(p.name for p in work.iterdir()) == ["in.npz", "sub"]
    assert list((work / "sub").iterdir()) == []


def test_convert_npz_names_with_dots_inside_stay_in_dest(tmp_path: Path) -> None:
    arrays: dict[str, np.ndarray] = {"a..b": np.arange(4, dtype=np.int16),
                                     ".hidden": np.ones(2, np.uint8)}
    np.savez(tmp_path / "in.npz", **arrays)  # type: ignore[arg-type]
    status, _ = run("convert", str(tmp_path / "in.npz"), str(tmp_path / "out"), "--quiet")
    assert status == EXIT_OK
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".hidden", "a..b"]
    for name, values in arrays.items():
        with DenseDataset(tmp_path / "out" / name) as ds:
            assert ds.dtype == values.dtype and ds[:].tobytes() == values.tobytes()


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


@pytest.mark.parametrize("refused, message", [
    ("object", "array 'b': a dataset holds bool, integer, floating or complex samples"),
    ("scalar", "array 'b' is 0-d (each array needs an axis 0 of records)"),
    ("few", "array 'b': 'zstd_dict' trains a dictionary on the records, which needs at least 7"),
    ("exists", "already exists; pass --overwrite"),
    ("foreign", "exists and is not a loaderx store; refusing to remove it even with --overwrite"),
])
def test_convert_npz_checks_every_array_before_converting_any(
    tmp_path: Path, refused: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An .npz whose second array cannot be converted (or whose DEST/<name> is taken) is
    refused before the first is written: it used to leave DEST/a converted and then fail."""
    b: np.ndarray = np.arange(4.0)
    if refused == "object":
        b = np.array([1, "x"], dtype=object)
    elif refused == "scalar":
        b = np.array(5)
    elif refused == "few":
        b = np.arange(3.0)
    np.savez(tmp_path / "in.npz", a=np.arange(300), b=b)
    dest = tmp_path / "out"
    if refused in ("exists", "foreign"):
        (dest / "b").mkdir(parents=True)
        (dest / "b" / "precious").write_bytes(b"keep")
    before = tree(tmp_path)
    flags = ["--overwrite"] if refused == "foreign" else []
    if refused == "few":
        flags = ["--codec", "zstd_dict", "--dict-size", "1024"]
    status, text = run("convert", str(tmp_path / "in.npz"), str(dest), "--quiet", *flags)
    assert status == EXIT_PROBLEM and text == ""
    assert message in capsys.readouterr().err
    assert tree(tmp_path) == before
    assert not (dest / "a").exists()


def sigint_in(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
    """Ctrl-C while owner.name runs: a real SIGINT, raised as KeyboardInterrupt by Python's own
    handler at the next bytecode, as when the user presses it during a long command."""
    original = getattr(owner, name)

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        # The command runs in a thread of its own (loaderx.cli.job): the main thread takes the
        # signal and raises KeyboardInterrupt in this thread, which Python delivers at its next
        # bytecode. Waiting here stands for the rest of a long call, as the user's Ctrl-C
        # would arrive while it runs.
        time.sleep(0.3)
        return result

    monkeypatch.setattr(owner, name, interrupted)


def run_interrupted(*argv: str) -> tuple[int, str]:
    """run(), failing the test (not ending the session) if Ctrl-C escapes main()."""
    try:
        return run(*argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main() as a KeyboardInterrupt (a traceback for the user)")


@pytest.mark.parametrize("command", ["convert", "recode"])
def test_ctrl_c_in_convert_or_recode_leaves_the_destination_and_exits_130(
    tmp_path: Path, images: np.ndarray, command: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C during a conversion used to end in a KeyboardInterrupt traceback. Now one line
    says so, the exit status is 130 and the store being replaced is left exactly as it was."""
    from_numpy(tmp_path / "src", images[:50], codec="raw")
    from_numpy(tmp_path / "dest", images[50:60], codec="raw")
    before = tree(tmp_path)
    from loaderx.zrecord import Zrecord

    sigint_in(monkeypatch, Zrecord, "append_fixed")  # Zrecord: compiled classes cannot be patched
    source = str(tmp_path / ("images.npy" if command == "convert" else "src"))
    status, text = run_interrupted(command, source, str(tmp_path / "dest"), "--overwrite",
                                   "--quiet")
    assert status == EXIT_INTERRUPTED and text == ""
    left = ("a destination not reported done was left as it was" if command == "convert"
            else "the destination was left as it was")
    assert capsys.readouterr().err == f"loaderx {command}: interrupted; {left}\n"
    assert tree(tmp_path) == before  # no partial folder left beside it either
    with DenseDataset(tmp_path / "dest") as ds:
        assert np.array_equal(ds[:], images[50:60])


def test_ctrl_c_in_an_inspecting_command_exits_130_without_a_traceback(
    tmp_path: Path, images: np.ndarray, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "ds", images, codec="raw")
    sigint_in(monkeypatch, Zrecord, "verify")
    assert run_interrupted("verify", str(tmp_path / "ds")) == (EXIT_INTERRUPTED, "")
    assert capsys.readouterr().err == "loaderx verify: interrupted\n"


def test_python_m_loaderx_with_stdout_closed_says_so_before_doing_anything(
    tmp_path: Path, images: np.ndarray
) -> None:
    """`loaderx ... >&-` used to convert, then die in a traceback (AttributeError: 'NoneType'
    object has no attribute 'flush'): Python sets sys.stdout to None for a closed stdout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for argv in (["info", str(tmp_path)], ["convert", str(tmp_path / "images.npy"),
                                           str(tmp_path / "ds"), "--quiet"]):
        done = subprocess.run([sys.executable, "-m", "loaderx", *argv], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env, check=False,
                              preexec_fn=lambda: os.close(1))
        assert done.returncode == EXIT_PROBLEM
        assert done.stderr == f"loaderx {argv[0]}: standard output is closed; nothing was done\n"
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("source, message", [
    ("folder", "no Parquet files in '{folder}'; nothing was converted"),
    ("empty.npy", "not a .npy or .npz file NumPy can read (No data left in file)"),
    ("cut.npz", "not a .npy or .npz file NumPy can read (File is not a zip file)"),
    ("none.npz", "the .npz holds no arrays; nothing was converted"),
    ("table.csv", "not a NumPy (.npy/.npz) or Parquet file"),
])
def test_convert_refuses_a_source_that_is_no_array_file(
    tmp_path: Path, source: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file or a cut-off .npz ended in a traceback (EOFError, BadZipFile), a folder
    was "no such file", an .npz without arrays converted nothing and said nothing, and a .csv
    was "pickled data" (np.load's refusal to unpickle whatever is neither .npy nor .npz)."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "whole.npz", a=np.arange(100))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "whole.npz").read_bytes()[:200])
    np.savez(tmp_path / "none.npz")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    status, text = run("convert", str(tmp_path / source), str(tmp_path / "dest"), "--quiet")
    assert (status, text) == (EXIT_PROBLEM, "")
    message = message.format(folder=tmp_path / source)
    assert capsys.readouterr().err == f"loaderx convert: {tmp_path / source}: {message}\n"
    assert not (tmp_path / "dest").exists()


def test_convert_reads_the_format_from_the_file_not_its_name(tmp_path: Path) -> None:
    """An .npz saved under another name (data.npy, DATA.NPZ) was read as one array and refused
    with a message about dtype <U1; a .npy named .npz ended in "'numpy.ndarray' object does not
    support the context manager protocol"."""
    arrays: dict[str, np.ndarray] = {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 2))}
    np.savez(tmp_path / "pair.npz", **arrays)  # type: ignore[arg-type]
    os.rename(tmp_path / "pair.npz", tmp_path / "PAIR.NPY")
    status, text = run("convert", str(tmp_path / "PAIR.NPY"), str(tmp_path / "out"), "--quiet")
    assert status == EXIT_OK and text.count(" records (zstd)") == 2
    for name, values in arrays.items():
        with DenseDataset(tmp_path / "out" / name) as ds:
            assert ds.dtype == values.dtype and ds[:].tobytes() == values.tobytes()
    single = np.arange(12, dtype=np.int16).reshape(4, 3)
    np.save(tmp_path / "single.npy", single)
    os.rename(tmp_path / "single.npy", tmp_path / "single.npz")
    status, text = run("convert", str(tmp_path / "single.npz"), str(tmp_path / "one"), "--quiet")
    assert (status, text) == (EXIT_OK, f"{tmp_path / 'one'}: 4 records (zstd)\n")
    with DenseDataset(tmp_path / "one") as ds:
        assert ds.dtype == single.dtype and ds[:].tobytes() == single.tobytes()


@pytest.mark.parametrize("compressed, reason", [
    (False, "Bad CRC-32 for file 'b.npy'"),
    (True, "Error -3 while decompressing data"),
])
def test_convert_npz_with_a_damaged_array_converts_none(
    tmp_path: Path, compressed: bool, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged second array was found only while converting it: DEST/a stayed converted and
    the command ended in a BadZipFile or zlib.error traceback."""
    save = np.savez_compressed if compressed else np.savez
    save(tmp_path / "in.npz", a=np.arange(1000),
         b=np.random.default_rng(0).integers(0, 100, 10_000))
    data = bytearray((tmp_path / "in.npz").read_bytes())
    at = data.index(b"b.npy") + len(b"b.npy") + 300  # inside b's data, past its .npy header
    data[at] ^= 0xFF
    data[at + 1] ^= 0x55
    (tmp_path / "in.npz").write_bytes(bytes(data))
    status, text = run("convert", str(tmp_path / "in.npz"), str(tmp_path / "out"), "--quiet")
    assert (status, text) == (EXIT_PROBLEM, "")
    err = capsys.readouterr().err
    assert err.startswith(f"loaderx convert: {tmp_path / 'in.npz'}: array 'b' is damaged ({reason}")
    assert err.endswith("); nothing was converted\n")
    assert not (tmp_path / "out").exists()


def test_head_counts_with_thousands_separators(tmp_path: Path) -> None:
    """The count shown used to lack the separator its total has: (1500 of 2,000 records)."""
    values = np.arange(2000, dtype=np.int16)
    from_numpy(tmp_path / "ds", values, codec="raw")
    status, text = run("head", str(tmp_path / "ds"), "-n", "1500")
    assert status == EXIT_OK and text.endswith("\n(1,500 of 2,000 records)\n")
    assert text.startswith("array([   0,    1,    2, ..., 1497, 1498, 1499]")


def test_convert_into_a_folder_it_cannot_create_names_the_destination(
    tmp_path: Path, images: np.ndarray, capsys: pytest.CaptureFixture[str],
    others_can_reach: Callable[..., AbstractContextManager[None]],
) -> None:
    """The message named the hidden staging folder ('.ds.loaderx-partial-3578926451e6'), or for
    a file in the way said "File exists" about that file; it names the destination now."""
    blocker = tmp_path / "images.npy"
    status, text = run("convert", str(blocker), str(blocker / "ds"), "--quiet")
    assert (status, text) == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == (
        f"loaderx convert: [Errno 20] cannot create '{blocker / 'ds'}': '{blocker}' is a file, "
        "not a folder\n"
    )
    # A folder the user may not write into (run as nobody: root ignores permission bits).
    parent = tempfile.mkdtemp(prefix="loaderx-cli-", dir=tempfile.gettempdir())
    try:
        shutil.copy(blocker, parent)
        os.chmod(parent, 0o555)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with others_can_reach(str(ROOT), sys.prefix):
            done = subprocess.run(
                [*(prefix if os.geteuid() == 0 else []), sys.executable, "-m", "loaderx",
                 "convert", os.path.join(parent, "images.npy"), os.path.join(parent, "ds")],
                capture_output=True, text=True, env=env, timeout=120, check=False,
            )
        assert (done.returncode, done.stdout) == (EXIT_PROBLEM, "")
        assert done.stderr == (f"loaderx convert: [Errno 13] cannot create "
                               f"'{parent}/ds' (Permission denied in '{parent}')\n")
        assert os.listdir(parent) == ["images.npy"]
    finally:
        os.chmod(parent, 0o755)
        shutil.rmtree(parent)


def test_out_of_memory_is_one_line_and_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`head -n 100000` of 1 MiB records asks NumPy for 98 GiB: its MemoryError used to end
    the command in a traceback. (Simulated: the test machine has no such dataset to spare.)"""
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "ds", np.zeros((10, 4), np.uint8), codec="raw")
    wanted = ("Unable to allocate 97.7 GiB for an array with shape (100000, 1048576) and data "
              "type uint8")

    def too_big(*args: Any, **kwargs: Any) -> None:
        raise MemoryError(wanted)

    # Zrecord, not the dataset: mypyc-compiled classes cannot be patched.
    monkeypatch.setattr(Zrecord, "gather_into", too_big)
    assert run("head", str(tmp_path / "ds"), "-n", "100000") == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == f"loaderx head: out of memory ({wanted})\n"


def test_a_store_the_user_may_not_read_is_a_permission_error_not_no_store(
    tmp_path: Path, others_can_reach: Callable[..., AbstractContextManager[None]]
) -> None:
    """A store folder of mode 700 owned by someone else was "not a loaderx dataset or Zrecord
    store (no schema.msgpack, no meta.zr)", and a store in a folder the user may not enter "no
    such file or folder": os.path.isfile and exists say False for both."""
    parent = tempfile.mkdtemp(prefix="loaderx-cli-", dir=tempfile.gettempdir())
    try:
        os.chmod(parent, 0o755)
        from_numpy(os.path.join(parent, "ds"), np.arange(10), codec="raw")
        os.makedirs(os.path.join(parent, "locked"))
        from_numpy(os.path.join(parent, "locked", "ds"), np.arange(10), codec="raw")
        os.chmod(os.path.join(parent, "ds"), 0o700)
        os.chmod(os.path.join(parent, "locked"), 0o700)
        prefix = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for store, denied in (
            ("ds", "permission denied looking into 'ds' (cannot tell whether it holds a store; "
                   "check the folder's permissions): 'ds'"),
            ("locked/ds", "Permission denied: 'locked/ds'"),
        ):
            with others_can_reach(str(ROOT), sys.prefix):
                done = subprocess.run(
                    [*(prefix if os.geteuid() == 0 else []), sys.executable, "-m", "loaderx",
                     "info", store], cwd=parent,
                    capture_output=True, text=True, env=env, timeout=120, check=False,
                )
            assert (done.returncode, done.stdout) == (EXIT_PROBLEM, "")
            assert done.stderr == f"loaderx info: [Errno 13] {denied}\n"
    finally:
        shutil.rmtree(parent)


def _gathered_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of records each native gather of a single store reads from now on."""
    from loaderx.zrecord import Zrecord

    counts: list[int] = []
    dense, ragged = Zrecord.gather_into, Zrecord._gather_ragged

    def gather_into(self: Zrecord, indices: Any, out: Any, record_size: int) -> None:
        counts.append(len(indices))
        dense(self, indices, out, record_size)

    def gather_ragged(self: Zrecord, handle: Any, index: Any) -> Any:
        data, offsets = ragged(self, handle, index)
        counts.append(len(offsets) - 1)
        return data, offsets

    # Zrecord, not the datasets: mypyc-compiled classes cannot be patched.
    monkeypatch.setattr(Zrecord, "gather_into", gather_into)
    monkeypatch.setattr(Zrecord, "_gather_ragged", gather_ragged)
    return counts


@pytest.mark.parametrize("shape, dtype", [
    ((2000,), np.int16), ((50, 28, 28), np.uint8), ((40, 5), np.float64), ((9, 6), np.uint32),
    ((30, 3), np.float32), ((20, 2), np.complex128), ((100, 9), np.bool_), ((7, 10), np.int8),
    ((100, 1), np.int64), ((12, 2, 40), np.float16), ((20, 4), ">i4"),
])
def test_a_dense_head_reads_only_the_rows_numpy_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], dtype: Any
) -> None:
    """`head -n N` gathered all N records to print the 6 that NumPy shows of them (a MemoryError
    for a large N of large records); it reads at most 7 now, and prints byte for byte what
    NumPy prints for the whole head: same columns, same "...", the whole head's shape."""
    rng = np.random.default_rng(3)
    values = (rng.standard_normal(shape) * 1000).astype(dtype)
    from_numpy(tmp_path / "ds", values, codec="raw")
    counts = _gathered_counts(monkeypatch)
    for n in (0, 1, 6, 7, 8, 13, 64, 65, shape[0], 10**9):
        head = values[: min(n, shape[0])]
        with np.printoptions(threshold=64, edgeitems=3, linewidth=100):
            expected = f"{head!r}\n({len(head):,} of {shape[0]:,} records)\n"
        counts.clear()
        assert run("head", str(tmp_path / "ds"), "-n", str(n)) == (EXIT_OK, expected)
        assert sum(counts) <= max(7, 64 // int(np.prod(shape[1:]))), (n, counts)


def test_ragged_and_bare_heads_read_in_bounded_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ragged or bare head gathered all N records at once; it reads about 16 MiB at a time
    now (64 bytes here), with the same output, for a sharded dataset too."""
    from loaderx.cli import stores
    from loaderx.zrecord import Zrecord

    rng = np.random.default_rng(4)
    records = [rng.integers(0, 9, (int(rng.integers(0, 5)), 2), dtype=np.int32)
               for _ in range(60)]
    from_iterator(tmp_path / "ragged", records)
    from_iterator(tmp_path / "sharded", [records[:25], records[25:]], workers=2,
                  shard_records=10)
    blobs = [bytes(rng.integers(0, 3, int(k), dtype=np.uint8)) for k in rng.integers(0, 60, 60)]
    with Zrecord(tmp_path / "bare", create=True, codec="zstd") as store:
        store.append(blobs)
    ragged_lines = [f"[{i}] shape {r.shape}: {np.array2string(r)}\n" for i, r in enumerate(records)]
    bare_lines = [f"[{i}] {b[:48]!r}" + (f"... ({len(b):,} bytes)" if len(b) > 48 else "") + "\n"
                  for i, b in enumerate(blobs)]
    monkeypatch.setattr(stores, "READ_BYTES", 64)
    counts = _gathered_counts(monkeypatch)
    for name, lines, sizes in (("ragged", ragged_lines, [r.nbytes for r in records]),
                               ("sharded", ragged_lines, [r.nbytes for r in records]),
                               ("bare", bare_lines, [len(b) for b in blobs])):
        for n in (0, 1, 59, 60, 10**9):
            shown = min(n, 60)
            counts.clear()
            assert run("head", str(tmp_path / name), "-n", str(n)) == (
                EXIT_OK, "".join(lines[:shown]) + f"({shown:,} of 60 records)\n")
            if name == "sharded":
                continue  # read through the view, not a single store's gathers
            assert sum(counts) == shown
            done = 0
            for count in counts:  # each block: one record, or records of at most 64 bytes
                assert count == 1 or sum(sizes[done : done + count]) <= 64, counts
                done += count


def test_info_and_stats_read_record_sizes_in_bounded_windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """info and stats made an array of every record's size (8 bytes a record: 8 GiB for 2^30
    records, even for a dense dataset whose records all have one size); a dense dataset's
    sizes are its record size now, and the others' are read a window at a time."""
    import tracemalloc

    from loaderx.cli import stores
    from loaderx.zrecord import Zrecord

    from_numpy(tmp_path / "dense", np.zeros((1 << 20, 3), np.uint8), codec="raw")
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 4, 1 << 18)
    from_iterator(tmp_path / "ragged", (np.zeros((int(n), 2), np.int16) for n in lengths))
    with Zrecord(tmp_path / "bare", create=True, codec="raw") as store:
        store.append([b"x" * int(n) for n in lengths])
    monkeypatch.setattr(stores, "LENGTH_WINDOW", 1024)
    for name, sizes in (("dense", np.full(1 << 20, 3)), ("ragged", lengths * 4),
                        ("bare", lengths)):
        tracemalloc.start()
        try:
            info = json.loads(run("info", str(tmp_path / name), "--json")[1])
            stats = json.loads(run("stats", str(tmp_path / name), "--json")[1])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, (name, peak)  # 2 MiB and more before
        assert info["logical_bytes"] == int(sizes.sum())
        assert (stats["record_bytes_min"], stats["record_bytes_max"]) == (sizes.min(), sizes.max())
        assert stats["record_bytes_mean"] == round(float(sizes.mean()), 2)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_npz_arrays_are_converted_without_loading_them_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save: Callable[..., None]
) -> None:
    """`convert x.npz` handed NumPy's archive[name] to from_numpy: the whole array in memory
    (a MemoryError for an array larger than memory). It hands over a memory map now: of the
    archive itself for np.savez, of a temporary copy inflated a block at a time for
    np.savez_compressed. Every dtype, order and shape round-trips exactly."""
    import loaderx.cli.convert

    rng = np.random.default_rng(6)
    arrays: dict[str, npt.NDArray[Any]] = {
        "c": rng.integers(-999, 999, (300, 7), dtype=np.int16),
        "fortran": np.asfortranarray(rng.standard_normal((40, 3, 5)).astype(np.float32)),
        "big": np.arange(50, dtype=">i8"),
        "none": np.zeros((0, 4), np.uint8),
    }
    save(tmp_path / "in.npz", **arrays)
    handed: dict[str, Any] = {}
    real = from_numpy  # the converter's own, which the command calls

    def from_numpy_seen(path: str, array: Any, **kwargs: Any) -> int:
        handed[os.path.basename(path)] = type(array)
        return real(path, array, **kwargs)

    monkeypatch.setattr(loaderx.cli.convert, "from_numpy", from_numpy_seen)
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    status, text = run("convert", str(tmp_path / "in.npz"), str(tmp_path / "out"), "--quiet")
    assert status == EXIT_OK
    assert sorted(handed) == sorted(arrays)
    assert all(handed[name] is np.memmap for name in ("c", "fortran", "big")), handed
    for name, values in arrays.items():
        assert f"{tmp_path / 'out' / name}: {len(values):,} records (zstd)\n" in text
        with DenseDataset(tmp_path / "out" / name) as ds:
            found = ds[:]
        assert found.dtype == values.dtype and found.shape == values.shape
        np.testing.assert_array_equal(found, values)
    assert os.listdir(tmp_path / "scratch") == []  # the inflated copies are gone


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
