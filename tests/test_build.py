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
