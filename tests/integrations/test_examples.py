"""Runs the training examples in examples/ for a few steps when their framework is installed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def run_example(script: str, *args: str) -> str:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def check_training(output: str, steps: int) -> None:
    assert f"step {steps}: loss" in output
    summary = re.search(r"mean loss first ([0-9.]+) last ([0-9.]+); resume with seed=0 "
                        rf"start_step={steps}", output)
    assert summary is not None, output
    first, last = float(summary.group(1)), float(summary.group(2))
    # Fixed seeds make the run repeatable; 120 steps are enough to learn something.
    assert last < first - 0.1, output


@pytest.mark.skipif(not installed("torch"), reason="needs torch (pip install torch==2.13.0)")
def test_torch_example_trains() -> None:
    output = run_example("torch_train.py", "--steps", "120", "--records", "1024",
                         "--batch-size", "32", "--log-every", "40")
    check_training(output, 120)


@pytest.mark.skipif(not installed("jax"), reason="jax is not installed (pip install jax)")
@pytest.mark.parametrize("backend", ["jax", "flax"])
def test_jax_example_trains(backend: str) -> None:
    if backend == "flax" and not (installed("flax") and installed("optax")):
        pytest.skip("flax and optax are not installed")
    output = run_example("jax_flax_train.py", "--backend", backend, "--steps", "120",
                         "--records", "1024", "--batch-size", "32", "--log-every", "40")
    check_training(output, 120)
    assert f"[{backend}]" in output
