"""No `while <condition>:` loop inside a `with` or `try` block of the same function in loaderx.

CPython 3.13 (3.13.0 here; reported for 3.13.1 and 3.13.2 as python/cpython#130279, still
open) looks up the handler of an exception raised at a loop's jump back by the wrong
instruction when the loop has a condition: a KeyboardInterrupt that a signal handler raises
there leaves the function without running the enclosing `except`, `finally` or `__exit__`.
A scratch probe (a `with lock:` around `while n < limit: n += 1`, SIGALRM raising
KeyboardInterrupt, 5,000 rounds) escaped with the lock held 5,000 times on 3.13.0 and never on
3.11.7 or 3.12.1; the same loop written `while True:` with `if n >= limit: break` was caught
every time. In loaderx that wedged the thread loader after a Ctrl-C on 3.13 (the step maker's
lock stayed held: test_dataloader_threads' interrupt test hung in 2 of 20 runs), and the same
shape sat in the cache gate's waits, the CLI's Ctrl-C handling, the store's open wait and the
conversion pool. So such loops are written `while True:` with the condition as a break.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "loaderx"


def _conditional_loops_in_protected_blocks(tree: ast.AST) -> list[ast.While]:
    found: list[ast.While] = []

    def visit(node: ast.AST, protected: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)  # a handler protects only its own function's code
                continue
            if (isinstance(child, ast.While) and protected
                    and not (isinstance(child.test, ast.Constant) and child.test.value is True)):
                found.append(child)
            visit(child, protected or isinstance(child, (ast.With, ast.Try, ast.TryStar)))

    visit(tree, False)
    return found


def test_no_conditional_loop_sits_inside_a_with_or_try_block() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{loop.lineno}: while {ast.unparse(loop.test)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for loop in _conditional_loops_in_protected_blocks(ast.parse(path.read_text()))
    ]
    assert offenders == [], "write these `while True:` with `if not (...): break` (module doc)"


def test_the_check_finds_the_shapes_it_forbids() -> None:
    source = (
        "def f(lock, n):\n"
        "    with lock:\n"
        "        while n:\n"
        "            n -= 1\n"
        "    try:\n"
        "        if n:\n"
        "            while n > 1:\n"
        "                n -= 1\n"
        "    finally:\n"
        "        pass\n"
        "    while n:\n"  # outside any with or try: the exception leaves the function anyway
        "        n -= 1\n"
        "    with lock:\n"
        "        while True:\n"
        "            if not n:\n"
        "                break\n"
        "        def g(m):\n"  # a function of its own: the with above does not protect it
        "            while m:\n"
        "                m -= 1\n"
    )
    found = _conditional_loops_in_protected_blocks(ast.parse(source))
    assert [loop.lineno for loop in found] == [3, 7]
