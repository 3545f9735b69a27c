"""`loaderx convert` of a Parquet file or folder: one dataset per column, refusals in one line."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loaderx.cli import EXIT_OK, EXIT_PROBLEM, main
from loaderx.dataset import DenseDataset, RaggedDataset
from loaderx.zrecord import Zrecord

pa: Any = pytest.importorskip("pyarrow")
pq: Any = pytest.importorskip("pyarrow.parquet")


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


@pytest.fixture
def table() -> Any:
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 6, size=400)
    return pa.table({
        "label": pa.array(rng.integers(0, 10, size=400), pa.int64()),
        "pixels": pa.array(rng.integers(0, 255, size=(400, 4)).tolist(), pa.list_(pa.uint8(), 4)),
        "tokens": pa.array([list(range(n)) for n in lengths], pa.list_(pa.int32())),
        "jpeg": pa.array([bytes([n]) * int(n) for n in lengths], pa.binary()),
    })


def check_columns(out: Path, table: Any) -> None:
    with DenseDataset(out / "label") as label:
        assert label[:].tolist() == table.column("label").to_pylist()
    with DenseDataset(out / "pixels") as pixels:
        assert pixels[:].tolist() == table.column("pixels").to_pylist()
    with RaggedDataset(out / "tokens") as tokens:
        assert [row.tolist() for row in tokens[:]] == table.column("tokens").to_pylist()
    with Zrecord(out / "jpeg") as jpeg:
        assert jpeg.gather(slice(0, len(jpeg))) == table.column("jpeg").to_pylist()


def test_convert_a_parquet_file_writes_one_dataset_per_column(tmp_path: Path, table: Any) -> None:
    pq.write_table(table, tmp_path / "data.parquet", row_group_size=64)
    status, text = run("convert", str(tmp_path / "data.parquet"), str(tmp_path / "out"),
                       "--quiet")
    assert status == EXIT_OK
    assert text.splitlines() == [f"{tmp_path / 'out' / name}: 400 records (zstd)"
                                 for name in ("label", "pixels", "tokens", "jpeg")]
    check_columns(tmp_path / "out", table)
    status, text = run("info", str(tmp_path / "out"))
    assert status == EXIT_OK and "tokens" in text and "pixels" in text


def test_convert_a_parquet_folder_and_overwrite(tmp_path: Path, table: Any) -> None:
    (tmp_path / "folder").mkdir()
    pq.write_table(table.slice(0, 150), tmp_path / "folder" / "a.parquet", row_group_size=50)
    pq.write_table(table.slice(150), tmp_path / "folder" / "b.parquet", row_group_size=50)
    argv = ("convert", str(tmp_path / "folder"), str(tmp_path / "out"), "--quiet")
    assert run(*argv)[0] == EXIT_OK
    check_columns(tmp_path / "out", table)
    assert run(*argv)[0] == EXIT_PROBLEM  # exists: needs --overwrite
    assert run(*argv, "--overwrite", "--codec", "raw")[0] == EXIT_OK
    check_columns(tmp_path / "out", table)


def test_convert_refuses_a_null_or_a_struct_in_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.table({"a": [1, None, 3]}), tmp_path / "nulls.parquet")
    status, text = run("convert", str(tmp_path / "nulls.parquet"), str(tmp_path / "out"), "--quiet")
    assert (status, text) == (EXIT_PROBLEM, "")
    err = capsys.readouterr().err
    assert err.startswith(f"loaderx convert: {tmp_path / 'nulls.parquet'}: column 'a' holds a "
                          "null at row 1")
    assert err.endswith("; nothing was converted\n") and err.count("\n") == 1
    pq.write_table(pa.table({"s": [{"x": 1}]}), tmp_path / "struct.parquet")
    status, _ = run("convert", str(tmp_path / "struct.parquet"), str(tmp_path / "out"), "--quiet")
    assert status == EXIT_PROBLEM
    assert "column 's' has Arrow type struct<x: int64>" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
