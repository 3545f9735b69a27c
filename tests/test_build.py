"""build.py's long steps say what they do, how long they usually take, and that they still run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loaderx_build_script", ROOT / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_long_step_reports_while_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    build = load_build()
    setattr(build, "HEARTBEAT_S", 0.2)
    build.run_long([sys.executable, "-c", "import time; time.sleep(1.0)"], "waiting", "a second")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[build] waiting (a second)"
    assert sum(line.startswith("[build] ... still waiting, ") for line in out) >= 2
    assert out[-1].startswith("[build] waiting: done in ")
    with pytest.raises(subprocess.CalledProcessError):
        build.run_long([sys.executable, "-c", "raise SystemExit(3)"], "failing", "no time")


def tar_of(members: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("filters", [True, False], ids=["python-with-filters", "3.11.0-3.11.3"])
def test_the_zstd_sources_unpack_safely_with_or_without_tar_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: bool
) -> None:
    import io
    import tarfile

    build = load_build()
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter")
    good = tar_of({"zstd/lib/a.c": b"int a;", "zstd/lib/b.h": b"#define B 1"})
    with tarfile.open(fileobj=io.BytesIO(good)) as archive:
        build.extract_plain(archive, archive.getmembers(), tmp_path / "good")
    assert (tmp_path / "good/zstd/lib/a.c").read_bytes() == b"int a;"
    assert (tmp_path / "good/zstd/lib/b.h").read_bytes() == b"#define B 1"
    bad = tar_of({"zstd/ok.c": b"1", "zstd/../../escaped.c": b"2"})
    with tarfile.open(fileobj=io.BytesIO(bad)) as archive:
        with pytest.raises((SystemExit, getattr(tarfile, "FilterError", SystemExit))):
            build.extract_plain(archive, archive.getmembers(), tmp_path / "bad" / "in")
    assert not (tmp_path / "escaped.c").exists() and not (tmp_path / "bad/escaped.c").exists()
