"""head, verify, compact and bench: the refusals the library documents are one line and exit 1;
anything else raised inside them (a bug) comes out of main as itself, for its traceback."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from loaderx.cli import EXIT_PROBLEM, main
from loaderx.converter import from_numpy
from loaderx.zrecord import Zrecord


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    status = main(list(argv), out=out)
    return status, out.getvalue()


def broken(*args: object, **kwargs: object) -> object:
    raise ValueError("a bug")


@pytest.mark.parametrize("command, patch", [
    ("head", lambda m: m.setattr(Zrecord, "gather", broken)),
    ("verify", lambda m: m.setattr(Zrecord, "verify", broken)),
    ("compact", lambda m: m.setattr(Zrecord, "compact", broken)),
    ("bench", lambda m: m.setattr("loaderx.cli.bench.bench_dense", broken)),
])
def test_a_value_error_from_a_bug_is_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    command: str, patch: Callable[[pytest.MonkeyPatch], None],
) -> None:
    data = np.arange(400, dtype=np.uint8).reshape(100, 4)
    from_numpy(tmp_path / "ds", data, progress=False)
    with Zrecord(tmp_path / "bare", create=True) as store:  # head reads a bare store's records
        store.append([bytes(row) for row in data])
    patch(monkeypatch)
    target = tmp_path / ("bare" if command == "head" else "ds")
    with pytest.raises(ValueError, match="a bug"):
        main([command, str(target)])
    assert f"loaderx {command}:" not in capsys.readouterr().err  # no one-line verdict on it


def test_compact_of_a_shard_folder_is_a_one_line_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library refuses it with a plain ValueError (documented), which the command used to
    let out as a traceback: it is said before the store is opened now."""
    data = np.arange(400, dtype=np.uint8).reshape(100, 4)
    from_numpy(tmp_path / "ds", data, shard_records=40, workers=2, progress=False)
    shard = tmp_path / "ds" / "shard-000001"
    before = {path.name: path.read_bytes() for path in shard.iterdir() if path.is_file()}
    assert run("compact", str(shard)) == (EXIT_PROBLEM, "")
    assert capsys.readouterr().err == (
        f"loaderx compact: {shard}: a shard of the sharded dataset {tmp_path / 'ds'}; compact "
        "the dataset, which compacts every shard\n")
    assert {path.name: path.read_bytes() for path in shard.iterdir() if path.is_file()} == before
    status, text = run("compact", str(tmp_path / "ds"))
    assert status == 0 and "100 records" in text
