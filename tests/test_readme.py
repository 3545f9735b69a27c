"""Runs the Python examples of README.md verbatim, so the README cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_readme_has_examples() -> None:
    assert len(python_blocks()) >= 1


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = python_blocks()[index]
    namespace: dict[str, object] = {"__name__": f"readme_example_{index}"}
    exec(compile(source, f"README.md example {index}", "exec"), namespace)
    # The first example must have run its loop to step 100 and left a checkpoint behind.
    if index == 0:
        assert namespace["checkpoint"] == 100
