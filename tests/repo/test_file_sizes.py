"""A source file fits in a reader's head: none of the project's code, tests or guides is longer
than LINES_MAX lines. A file that grows past it is split by subject, not waved through; the
few that wait for more than a move are listed in WAITING with the reason, and the list may not
go stale.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINES_MAX = 700
# Where the project's own text lives, and what counts as source there. Benchmark reports are
# records of runs, kept whole; vendored or generated folders are not the project's.
FOLDERS = ("loaderx", "tests", "zig/src", "zig/include", "benchmarks", "tools", "docs", "examples")
SUFFIXES = {".py", ".zig", ".c", ".h", ".md", ".sh", ".toml"}
SKIPPED_PARTS = {"reports", "__pycache__", ".zig-cache", "node_modules", "site"}
TOP_LEVEL = ("build.py", "README.md", "pyproject.toml", "setup.py")

# A file that needs more than a move to be split, by relative path, with the reason (none now).
WAITING: dict[str, str] = {}


def _sources(root: Path) -> list[Path]:
    found = [root / name for name in TOP_LEVEL if (root / name).is_file()]
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and not SKIPPED_PARTS & set(path.parts):
                found.append(path)
    return found


def _too_long(root: Path) -> dict[str, int]:
    """Each source file under root longer than LINES_MAX lines, by relative path."""
    lengths = {p.relative_to(root).as_posix(): len(p.read_text(errors="replace").splitlines())
               for p in _sources(root)}
    return {name: count for name, count in lengths.items() if count > LINES_MAX}


def test_no_source_file_is_longer_than_the_limit_but_the_waiting_ones() -> None:
    assert set(_too_long(ROOT)) - set(WAITING) == set()


def test_the_waiting_list_names_only_files_still_too_long() -> None:
    too_long = _too_long(ROOT)
    assert [name for name in WAITING if name not in too_long] == []


def test_the_check_sees_a_long_file(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "short.py").write_text("x = 1\n" * LINES_MAX)
    (tmp_path / "tests" / "long.py").write_text("x = 1\n" * (LINES_MAX + 1))
    (tmp_path / "benchmarks" / "reports").mkdir(parents=True)
    (tmp_path / "benchmarks" / "reports" / "diary.md").write_text("run\n" * 5000)
    assert _too_long(tmp_path) == {"tests/long.py": LINES_MAX + 1}
