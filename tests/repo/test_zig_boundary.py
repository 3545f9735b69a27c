"""The native core's C boundary is one folder, zig/src/c_abi/: only files there declare C exports,
and no core file imports them (the module root, which pulls the exports into the library, is the
one exception). The core returns errors; the boundary turns them into statuses and messages.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "zig" / "src"
BOUNDARY = SRC / "c_abi"
MODULE_ROOT = SRC / "root.zig"
EXPORT = re.compile(r"^\s*(pub\s+)?export\s+(fn|var|const)\b", re.MULTILINE)
IMPORT = re.compile(r'@import\("([^"]+)"\)')


def _core_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.zig") if BOUNDARY not in p.parents)


def test_only_the_boundary_declares_c_exports() -> None:
    exporting = [p.relative_to(SRC).as_posix() for p in _core_files() if EXPORT.search(p.read_text())]
    assert exporting == []
    assert any(EXPORT.search(p.read_text()) for p in BOUNDARY.glob("*.zig"))


def _imports_of_the_boundary(path: Path, boundary: Path = BOUNDARY) -> list[str]:
    # Import paths are relative to the importing file (core files sit in rooms: zig/src/store/...).
    return [name for name in IMPORT.findall(path.read_text())
            if boundary in (path.parent / name).resolve().parents]


def test_no_core_file_imports_the_boundary() -> None:
    offenders = [
        f"{p.relative_to(SRC).as_posix()} imports {name}"
        for p in _core_files() if p != MODULE_ROOT
        for name in _imports_of_the_boundary(p)
    ]
    assert offenders == []


def test_the_checks_see_a_violation(tmp_path: Path) -> None:
    # The patterns must match what a real violation would look like.
    assert EXPORT.search('const std = @import("std");\nexport fn lx_x() callconv(.c) u32 {}')
    assert IMPORT.findall('const h = @import("c_abi/handles.zig");') == ["c_abi/handles.zig"]
    src = tmp_path.resolve()
    (src / "store").mkdir()
    core = src / "store" / "store.zig"
    core.write_text('const h = @import("../c_abi/handles.zig");\nconst m = @import("meta.zig");\n')
    assert _imports_of_the_boundary(core, src / "c_abi") == ["../c_abi/handles.zig"]
