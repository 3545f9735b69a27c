"""Runs the code blocks of README.md, docs/ and benchmarks/reports/ verbatim, so that no page of
the documentation can drift from the code.

A ```python block runs in this interpreter, a ```sh block line by line in a shell (with `python`
meaning this interpreter and `loaderx` the package's command, `python -m loaderx`); each block
starts in a fresh temporary folder. Blocks in any other language (```text, ```console, ...) are
shown, never run. A test's id is the file and the block's number among that file's blocks of its
language, counted from 0 (`docs/guide.md:2`); a failure names the line the block starts on.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

# The repository: the nearest folder above holding pyproject.toml (tests/ may gain subfolders).
ROOT: Final = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
README: Final = "README.md"
# An opening fence: its indentation, its backticks or tildes, and the language after them.
FENCE: Final = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and its text, unindented."""

    file: str  # relative to the repository, with forward slashes
    line: int  # the line of its first line of code, counted from 1
    language: str
    source: str


def markdown_files() -> list[str]:
    found = [ROOT / README, *sorted((ROOT / "docs").rglob("*.md")),
             *sorted((ROOT / "benchmarks" / "reports").rglob("*.md"))]
    return [path.relative_to(ROOT).as_posix() for path in found if path.is_file()]


def blocks_of(file: str) -> list[Block]:
    return blocks_in(file, (ROOT / file).read_text(encoding="utf-8"))


def blocks_in(file: str, text: str) -> list[Block]:
    """The fenced code blocks of one Markdown text, in order (a fence inside a list item may be
    indented; a block ends at a fence of the same character, at least as long)."""
    found: list[Block] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        number += 1
        if opening is None:
            continue
        indent, fence, language = len(opening.group(1)), opening.group(2), opening.group(3)
        first = number
        while number < len(lines) and not re.match(
                rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[number]):
            number += 1
        code = [line[indent:] if not line[:indent].strip() else line.lstrip()
                for line in lines[first:number]]
        found.append(Block(file, first + 1, language, "\n".join(code) + "\n"))
        number += 1
    return found


def blocks(language: str) -> list[Block]:
    return [b for f in markdown_files() for b in blocks_of(f) if b.language == language]


def ids(found: list[Block]) -> list[str]:
    """file:n, n counting the file's blocks of that language from 0."""
    seen: dict[str, int] = {}
    names = []
    for block in found:
        names.append(f"{block.file}:{seen.get(block.file, 0)}")
        seen[block.file] = seen.get(block.file, 0) + 1
    return names


PYTHON: Final = blocks("python")
SHELL: Final = blocks("sh")


def test_readme_has_examples() -> None:
    assert any(b.file == README for b in PYTHON)
    assert any(b.file == README for b in SHELL)


def test_the_blocks_are_found_where_they_are() -> None:
    first = next(b for b in PYTHON if b.file == README)
    lines = (ROOT / README).read_text(encoding="utf-8").splitlines()
    assert lines[first.line - 2].startswith("```python")
    assert first.source.startswith(lines[first.line - 1])


def test_code_blocks_are_read_as_markdown_fences_them() -> None:
    text = ("Intro\n\n```python\nx = 1\n```\n\n1. A step:\n\n   ```sh\n   loaderx --help\n"
            "   ```\n\n````text\n```python\nnot a block\n```\n````\n\n~~~python title=\"a\"\n"
            "if x:\n    y = 2\n~~~\n\n```\nplain\n```\n")
    found = blocks_in("page.md", text)
    assert [(b.line, b.language, b.source) for b in found] == [
        (4, "python", "x = 1\n"),
        (10, "sh", "loaderx --help\n"),
        (14, "text", "```python\nnot a block\n```\n"),
        (20, "python", "if x:\n    y = 2\n"),
        (25, "", "plain\n"),
    ]
    assert ids([found[0], found[3]]) == ["page.md:0", "page.md:1"]


def python_path() -> str:
    """PYTHONPATH for the processes an example starts: the repository first."""
    return os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


@pytest.mark.parametrize("block", PYTHON, ids=ids(PYTHON))
def test_python_example_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # Processes the example starts (Ray's workers, a spawned pool) import loaderx from here too.
    monkeypatch.setenv("PYTHONPATH", python_path())
    namespace: dict[str, object] = {"__name__": "doc_example"}
    # Padded so that a traceback names the line of the Markdown file.
    source = "\n" * (block.line - 1) + block.source
    exec(compile(source, str(ROOT / block.file), "exec"), namespace)
    # README's first example must have run its loop to step 100 and left a checkpoint behind.
    if block == next(b for b in PYTHON if b.file == README):
        assert namespace["checkpoint"] == 100


def shell_commands(source: str) -> list[str]:
    """The commands of a ```sh block: lines ending in a backslash go on, comments and empty
    lines are left out."""
    commands: list[str] = []
    pending = ""
    for line in source.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        commands.append(pending + line)
        pending = ""
    if pending:
        commands.append(pending)
    return commands


@pytest.mark.parametrize("block", SHELL, ids=ids(SHELL))
def test_shell_example_runs(block: Block, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": python_path()}
    python = shlex.quote(sys.executable)
    for line in shell_commands(block.source):
        command = re.sub(r"^loaderx ", f"{python} -m loaderx ", line)
        command = re.sub(r"^python ", f"{python} ", command)
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, (f"{block.file} line {block.line}: {line}\n{done.stdout}\n"
                                      f"{done.stderr}")
