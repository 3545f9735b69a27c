"""The native sources are in `zig fmt`'s layout: one layout for everyone, so a diff shows what
changed and not how its author indents. Run `python -m ziglang fmt zig` to fix a failure.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ZIG = Path(__file__).resolve().parents[2] / "zig"


def _unformatted(folder: Path) -> list[str]:
    """The files `zig fmt --check` would rewrite (it prints one path a line and exits 1)."""
    done = subprocess.run([sys.executable, "-m", "ziglang", "fmt", "--check", str(folder)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.split()


def test_zig_sources_are_formatted() -> None:
    assert _unformatted(ZIG) == []


def test_the_check_sees_a_badly_formatted_file(tmp_path: Path) -> None:
    """The check itself can fail: a copy of a core file with its layout spoiled is listed."""
    source = ZIG / "src" / "base" / "limits.zig"
    shutil.copy(source, tmp_path / "limits.zig")
    assert _unformatted(tmp_path) == []
    spoiled = tmp_path / "spoiled.zig"
    spoiled.write_text(source.read_text().replace("pub const ", "pub   const ", 1))
    assert _unformatted(tmp_path) == [str(spoiled)]
