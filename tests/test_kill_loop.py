"""SIGKILL at random moments in append, delete, compact and conversion with overwrite=True: the
CI-sized run of tools/kill_loop.py (200 kills per operation; `python3 tools/kill_loop.py --kills
1000` is the long version). After every kill the store opens, every acknowledged record is
exact, an interrupted operation is all or nothing, and a conversion leaves the old or the new
dataset complete with no hidden folder once recovered."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILLS = 200


@pytest.mark.parametrize("operation", ["append", "delete", "compact", "convert"])
def test_kill_loop(operation: str) -> None:
    # Its own process: the loop forks a worker per round, which wants a parent without threads
    # of other tests (pytest may hold torch's or jax's).
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tools", "kill_loop.py"), "--kills", str(KILLS),
         "--ops", operation, "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr
    [result] = json.loads(done.stdout)
    assert result["operation"] == operation and result["kills"] == KILLS
    # The workers did real work between kills, so kills landed inside operations.
    assert result["acknowledged"] > 0, result
