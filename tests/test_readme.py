"""Runs the examples of README.md verbatim, so the README cannot drift from the code.

```python blocks run in this interpreter; ```sh blocks run line by line in a shell, with
`python` meaning this interpreter and `loaderx` the package's command (`python -m loaderx`).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def blocks(language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def python_blocks() -> list[str]:
    return blocks("python")


def test_readme_has_examples() -> None:
    assert len(python_blocks()) >= 1
    assert len(blocks("sh")) >= 1


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = python_blocks()[index]
    namespace: dict[str, object] = {"__name__": f"readme_example_{index}"}
    exec(compile(source, f"README.md example {index}", "exec"), namespace)
    # The first example must have run its loop to step 100 and left a checkpoint behind.
    if index == 0:
        assert namespace["checkpoint"] == 100


@pytest.mark.parametrize("index", range(len(blocks("sh"))))
def test_readme_shell_example_runs(index: int, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    python = shlex.quote(sys.executable)
    for line in blocks("sh")[index].splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command = re.sub(r"^loaderx ", f"{python} -m loaderx ", line)
        command = re.sub(r"^python ", f"{python} ", command)
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True,
                              text=True, check=False)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
