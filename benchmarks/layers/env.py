"""The benchmark environment: a separate venv holding the peers, built on first use.

The peers (h5py, torch, tensorstore, ...) never enter the project's own environment or its
runtime dependencies. They live in `.cache/bench-venv-<tag>` (cp311, cp314t, ...), created from
the interpreter that runs compare.py, without the system site-packages. Each peer is installed by its own pip call so one
that cannot be had only removes its rows; the reason is kept in a stamp and printed on every run.
loaderx itself is not installed there: the repository root goes on PYTHONPATH, so the benchmark
measures the working tree, with the library built by `build.py native`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]


def interpreter_tag() -> str:
    """cp311, cp313, cp314t, ...: one bench venv per interpreter, so runs never mix them."""
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return f"cp{sys.version_info[0]}{sys.version_info[1]}{'t' if free_threaded else ''}"


BENCH_VENV: Final = ROOT / ".cache" / f"bench-venv-{interpreter_tag()}"
STAMP: Final = BENCH_VENV / ".loaderx-peers.json"
# Set in the re-executed process so it does not try to re-exec again.
MARKER: Final = "LOADERX_BENCH_VENV"

# Import name -> pip requirement. torch is pinned exactly: its CPU wheel lies on this machine's
# disk, and any other specifier makes pip fetch gigabytes of CUDA wheels.
PEERS: Final[dict[str, str]] = {
    "numpy": "numpy>=1.26",
    "msgpack": "msgpack>=1.0",
    "zstandard": "zstandard",
    "h5py": "h5py",
    "blosc2": "blosc2",
    "tensorstore": "tensorstore",
    "zarr": "zarr",
    "lance": "pylance",
    "array_record": "array-record==0.8.6",
    "lmdb": "lmdb",
    "torch": "torch==2.13.0",
    "matplotlib": "matplotlib",
    "ray": "ray[data]==2.60.0",
    # The store layer's newer peers, pinned so a run names the version it measured: DeepMind's
    # bagz, and Grain (its ArrayRecord data source in the store layer; its loader runs in the
    # loader layer only with `--only grain`). MosaicML Streaming and LitData are not here:
    # Streaming wants numpy < 2.2, so both live in remote_peers.PEERS_VENV.
    "bagz": "bagz==0.3.8",
    "grain": "grain==0.2.18",
}
# Installed only when some `--only NAME` asks for them (none at present).
OPTIONAL_PEERS: Final[dict[str, str]] = {}


def venv_python() -> Path:
    if sys.platform == "win32":
        return BENCH_VENV / "Scripts" / "python.exe"
    return BENCH_VENV / "bin" / "python"


def inside_bench_venv() -> bool:
    return os.environ.get(MARKER) == "1"


def read_stamp() -> dict[str, str]:
    """Maps each requirement tried to "ok" or the reason it failed."""
    if not STAMP.exists():
        return {}
    loaded = json.loads(STAMP.read_text())
    return {str(k): str(v) for k, v in loaded.items()}


def write_stamp(stamp: dict[str, str]) -> None:
    STAMP.write_text(json.dumps(stamp, indent=1, sort_keys=True))


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[0][:200]


def pip_install(requirement: str) -> str:
    """Installs one requirement into the bench venv; returns "ok" or why it failed."""
    cmd = [str(venv_python()), "-m", "pip", "install", "--quiet", "--only-binary", ":all:",
           requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode == 0:
        return "ok"
    return f"pip install {requirement} failed: {last_line(done.stderr or done.stdout)}"


def ensure_venv(wanted: dict[str, str], retry_failed: bool) -> dict[str, str]:
    """Creates the venv if needed and installs every wanted peer not yet tried."""
    if not venv_python().exists():
        print(f"[bench] creating the benchmark environment {BENCH_VENV.relative_to(ROOT)}",
              flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run([str(venv_python()), "-m", "pip", "install", "--quiet", "--upgrade",
                        "pip"], check=True)
    stamp = read_stamp()
    for name, requirement in wanted.items():
        previous = stamp.get(requirement)
        if previous == "ok" or (previous is not None and not retry_failed):
            continue
        print(f"[bench] installing {requirement} into the benchmark environment", flush=True)
        stamp[requirement] = pip_install(requirement)
        write_stamp(stamp)
        if stamp[requirement] != "ok":
            print(f"[bench] skipping {name}: {stamp[requirement]}", flush=True)
    return stamp


def reexec(argv: list[str], wanted: dict[str, str], retry_failed: bool) -> None:
    """Re-runs compare.py inside the bench venv (never returns)."""
    ensure_venv(wanted, retry_failed)
    env = dict(os.environ)
    env[MARKER] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    # pip's own variables must not leak into the measured process; nothing else changes.
    env.pop("PYTHONHOME", None)
    python = str(venv_python())
    os.execve(python, [python, *argv], env)


def install_failures() -> dict[str, str]:
    """Requirement -> reason, for every peer whose install failed (inside the bench venv)."""
    return {req: why for req, why in read_stamp().items() if why != "ok"}
