"""`build.py asv --noise-check`: proves the asv settings tell noise from a real slowdown.

In a throwaway clone of HEAD it makes three commits: A (HEAD as it is), B (the same code again:
an empty commit) and C (a deliberate 2x slowdown: every dense gather runs twice).
It benchmarks all three on this machine, as it is (loaded or not), then asks `asv compare` with
the same factor as `--compare` for the benchmarks it flags:
- A against B must flag nothing (the same code measured twice is noise only);
- A against C must flag the gather benchmarks.
It exits 1 when either expectation fails. It takes about 15 minutes on a 2-core machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# The slowdown, appended to loaderx/zrecord.py (an interpreted module, so this works whatever
# mypyc compiles): every Zrecord.gather_into, the call every dense read ends in, runs twice. The
# second copy writes the same bytes again, so results stay right and only the cost doubles.
SLOWDOWN = """

_gather_into_once = Zrecord.gather_into


def _gather_into_twice(self: Zrecord, indices: Any, out: Any, record_size: int) -> None:
    _gather_into_once(self, indices, out, record_size)
    _gather_into_once(self, indices, out, record_size)


Zrecord.gather_into = _gather_into_twice  # type: ignore[method-assign]
"""
BENCHMARKS = r"Gather\.|Sampler\.time_batch"


def git(clone: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_commits(root: Path, clone: Path) -> tuple[str, str, str]:
    subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
    git(clone, "config", "user.email", "noise-check@loaderx.invalid")
    git(clone, "config", "user.name", "noise check")
    first = git(clone, "rev-parse", "HEAD")
    git(clone, "commit", "-q", "--allow-empty", "-m", "noise check: the same code again")
    same = git(clone, "rev-parse", "HEAD")
    source = clone / "loaderx" / "zrecord.py"
    source.write_text(source.read_text() + SLOWDOWN)
    git(clone, "commit", "-q", "-am", "noise check: a deliberate 2x slowdown of gather")
    return first, same, git(clone, "rev-parse", "HEAD")


def flagged(compare_output: str) -> list[str]:
    """Benchmarks `asv compare` marks as worse ('+' in its change column)."""
    names = []
    for line in compare_output.splitlines():
        # asv prints a Markdown table: | Change | Before | After | Ratio | Benchmark (Parameter) |
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0] == "+":
            names.append(cells[-1])
    return names


def run(asv: Callable[..., int], factor: float, env: dict[str, str], python: str) -> int:
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="loaderx-noise-") as folder:
        clone = Path(folder) / "repo"
        first, same, slow = make_commits(root, clone)
        asv(["machine", "--yes"], env, cwd=clone)
        asv(["run", "--show-stderr", "-E", f"virtualenv:{python}", "--bench", BENCHMARKS,
             "HEAD~3..HEAD"], env, check=False, cwd=clone)
        verdicts = {}
        for label, other in (("same code", same), ("2x slowdown", slow)):
            done = subprocess.run([sys.executable, "-m", "asv", "compare", "--factor", str(factor),
                                   "--split", first, other], cwd=clone, env=env,
                                  capture_output=True, text=True)
            print(done.stdout)
            verdicts[label] = flagged(done.stdout)
    noise, slowdown = verdicts["same code"], verdicts["2x slowdown"]
    gathers = [name for name in slowdown if re.search(r"Gather\.", name)]
    print(f"[noise-check] same code measured twice: {len(noise)} flagged {noise}")
    print(f"[noise-check] 2x slower gather: {len(gathers)} gather benchmarks flagged {gathers}")
    ok = not noise and bool(gathers)
    print("[noise-check] " + ("passed" if ok else "FAILED"))
    return 0 if ok else 1
