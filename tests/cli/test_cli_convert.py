"""`loaderx convert`: npz member names that would leave the destination are refused and dotted
ones stay inside it, every array is checked before any is converted (a damaged one converts
none), the format comes from the file and not its name, a destination it cannot create is
named, and npz arrays are converted without being loaded whole."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from loaderx.cli import EXIT_OK, EXIT_PROBLEM
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset

# Fixtures are found by name in the module: imported, pytest uses them.
from cli_cases import ROOT, images, run, tree


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
    if refused == "exists":  # a store: --overwrite would replace it
        from_numpy(dest / "b", np.arange(2.0))
    if refused == "foreign":  # no store: --overwrite would refuse it too
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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        status, text = run("convert", str(tmp_path / source), str(tmp_path / "dest"), "--quiet")
        gc.collect()
    assert (status, text) == (EXIT_PROBLEM, "")
    # np.load left a broken .npz open (a ResourceWarning when it was collected).
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
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
        with others_can_reach(str(ROOT)):
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
