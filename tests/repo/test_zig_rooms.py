"""The native core's rooms: zig/src's folders, bottom up, each importing only itself and the
rooms below it, so that the folder layout shows the import graph. docs/architecture.md says
what each room holds.
"""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "zig" / "src"
# Bottom up. c_abi/ (the C boundary) sits on top; root.zig, the module root, above every room.
ROOMS = ("base", "sampler", "os", "batch", "files", "codec", "store", "view", "c_abi")
IMPORT = re.compile(r'@import\("([^"]+\.zig)"\)')


def _imports(path: Path) -> list[Path]:
    return [(path.parent / name).resolve() for name in IMPORT.findall(path.read_text())]


def _upward_imports(src: Path) -> list[str]:
    src = src.resolve()
    offenders = []
    for path in sorted(src.glob("*/*.zig")):
        rank = ROOMS.index(path.parent.name)
        for target in _imports(path):
            if ROOMS.index(target.relative_to(src).parts[0]) > rank:
                offenders.append(f"{path.relative_to(src).as_posix()} imports "
                                 f"{target.relative_to(src).as_posix()}")
    return offenders


def test_every_core_file_lives_in_a_room() -> None:
    assert sorted(p.name for p in SRC.glob("*.zig")) == ["root.zig"]
    assert all(p.parent.parent == SRC for p in SRC.rglob("*.zig") if p.parent != SRC)
    assert {p.parent.name for p in SRC.glob("*/*.zig")} == set(ROOMS)


def test_every_import_names_a_file_that_exists() -> None:
    missing = [f"{p.relative_to(SRC).as_posix()} imports {t}"
               for p in SRC.rglob("*.zig") for t in _imports(p) if not t.is_file()]
    assert missing == []


def test_no_room_imports_a_room_above_it() -> None:
    assert _upward_imports(SRC) == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    # A file of files/ that imports store/ is what a violation looks like; the other way is fine.
    (tmp_path / "files").mkdir()
    (tmp_path / "store").mkdir()
    (tmp_path / "files" / "meta.zig").write_text('const Store = @import("../store/store.zig").Store;\n')
    (tmp_path / "store" / "store.zig").write_text('const meta = @import("../files/meta.zig");\n')
    assert _upward_imports(tmp_path) == ["files/meta.zig imports store/store.zig"]
