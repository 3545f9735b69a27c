"""Proves the artefacts in dist/ install and work: each into a fresh venv, tested from outside.

    python3 tools/install_check.py            every host wheel in dist/ (compiled and generic)
    python3 tools/install_check.py --sdist    the sdist, built by pip from a venv holding only pip
Other arguments are handed to pytest (e.g. --deselect tests/test_x.py::test_y).

The test suite (with benchmarks/, examples/, typings/, zig/include/, docs/, README.md and
pyproject.toml, which some tests use) is copied to a temporary folder and run from there, so `import loaderx` can only resolve to
the installed package; that is asserted before pytest runs (and, for a compiled wheel, that the
mypyc modules really are extension modules), as is that the `loaderx` console script and
`python -m loaderx` run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build as project_build  # noqa: E402
from tools.wheels import (DIST, Interpreter, find_interpreters, host_target, log, nice,  # noqa: E402
                          run_long)
from tools.wheel_check import CheckFailed, Target  # noqa: E402

# What the suite imports besides loaderx and its dependencies: the test tools (mypy for the typing
# tests, asv for the dashboard's, moto and fake-gcs-server for the remote tests' S3 and GCS
# servers) and the pinned integrations, as in .venv; no test may lack one.
TEST_TOOLS: Final = [r for r in project_build.DEV_REQUIREMENTS
                     if r.startswith(("pytest", "hypothesis", "mypy", "asv", "virtualenv", "moto",
                                      "fake-gcs-server"))
                     ] + project_build.TEST_EXTRAS
# Copied beside the tests: the harnesses and examples some tests drive, the C header test_abi
# reads, the stubs pyproject.toml's mypy settings name and the pages whose examples
# test_doc_examples.py runs. Never loaderx itself.
BESIDE_TESTS: Final = ("tests", "benchmarks", "examples", "typings", "zig/include", "docs")
# Tests of the repository rather than of the installed package: the documentation site is built
# from the sources in the checkout (tests/repo/test_doc_examples.py still runs docs/'s examples).
REPOSITORY_ONLY: Final = ("test_docs_site.py",)
WHERE: Final = """
import json, sys, sysconfig, loaderx, loaderx._native.library as native
modules = {}
for name in sys.argv[1:]:
    modules[name] = __import__(name, fromlist=["_"]).__file__
print(json.dumps({"site": sysconfig.get_paths()["purelib"], "platsite": sysconfig.get_paths()["platlib"],
                  "package": loaderx.__file__, "library": native.library_path(), "modules": modules}))
"""


def fresh_venv(interpreter: str, where: Path) -> str:
    subprocess.run([interpreter, "-m", "venv", "--clear", str(where)], check=True)
    return str(where / "bin" / "python")


def assert_installed(python: str, compiled: list[str], env: dict[str, str]) -> None:
    out = subprocess.run([python, "-c", WHERE, *compiled], capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir(), env=env)
    found = json.loads(out.stdout)
    sites = (found["site"], found["platsite"])
    for key in ("package", "library"):
        if not found[key].startswith(sites):
            raise CheckFailed(f"loaderx's {key} came from {found[key]}, not {sites}")
    for name, path in found["modules"].items():
        if not path.endswith((".so", ".pyd")):
            raise CheckFailed(f"{name} imported from {path}: not the compiled extension module")
    log(f"installed package: {found['package']}, library {found['library']}")
    # The console script pip wrote, and `python -m loaderx`, from outside the repository.
    script = Path(python).parent / ("loaderx.exe" if sys.platform == "win32" else "loaderx")
    for command in ([str(script), "--help"], [python, "-m", "loaderx", "--help"]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=tempfile.gettempdir(),
                              env=env)
        if done.returncode != 0 or "convert" not in done.stdout:
            raise CheckFailed(f"{' '.join(command)} exited with {done.returncode}: "
                              f"{done.stderr.strip() or done.stdout.strip()}")
    log("the loaderx command and python -m loaderx answer --help")


def run_suite(python: str, label: str, compiled: list[str], pytest_args: list[str]) -> None:
    """pytest over a copy of tests/, from a folder with no loaderx in it."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOADERX_LIBRARY", "PYTHONPATH")}
    assert_installed(python, compiled, env)
    with tempfile.TemporaryDirectory(prefix="loaderx-installed-") as tmp:
        tests = Path(tmp) / "tests"
        # Some tests drive the benchmark harness and the examples: they come along, the package
        # does not.
        for folder in BESIDE_TESTS:
            if (ROOT / folder).is_dir():
                shutil.copytree(ROOT / folder, Path(tmp) / folder,
                                ignore=shutil.ignore_patterns("__pycache__", "results", "*.so"))
        for name in ("README.md", "LICENSE", "pyproject.toml"):
            shutil.copyfile(ROOT / name, Path(tmp) / name)
        if (Path(tmp) / "loaderx").exists():
            raise CheckFailed(f"{tmp} holds a loaderx folder; the test would not be of the wheel")
        log(f"pytest ({label}) in {tmp}")
        ignored = [f"--ignore-glob=*/{name}" for name in REPOSITORY_ONLY]
        subprocess.run(nice([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests),
                             *ignored, *pytest_args]),
                       cwd=tmp, env=env, check=True)


def check_wheel_install(wheel: Path, interpreter: Interpreter, work: Path,
                        pytest_args: list[str]) -> None:
    python = fresh_venv(interpreter.path, work / f"venv-{wheel.stem}")
    run_long([python, "-m", "pip", "install", "--quiet", str(wheel), *TEST_TOOLS],
             f"installing {wheel.name}, the test tools and the integrations into a fresh venv",
             "a few minutes: torch, jax and ray are about 1 GB; pip prints nothing meanwhile")
    compiled = ([m.removesuffix(".py").replace("/", ".") for m in project_build.MYPYC_MODULES]
                if wheel.name.split("-")[2].startswith("cp") else [])
    run_suite(python, wheel.name, compiled, pytest_args)


def host_wheels(host: Target) -> list[tuple[Path, Interpreter]]:
    """Each compiled wheel with its interpreter, and the generic one with this venv's."""
    interpreters = {i.abi: i for i in find_interpreters()}
    chosen = []
    for wheel in sorted(DIST.glob("loaderx-*.whl")):
        _, _, python_tag, abi, platform_tag = wheel.stem.split("-")
        if python_tag == "py3" and platform_tag == host.wheel_tag:
            chosen.append((wheel, interpreters[f"cp{sys.version_info[0]}{sys.version_info[1]}"]))
        elif abi in interpreters and platform_tag.endswith(host.arch):
            chosen.append((wheel, interpreters[abi]))
    return chosen


def check_sdist_install(work: Path, pytest_args: list[str]) -> None:
    sdists = sorted(DIST.glob("loaderx-*.tar.gz"))
    if len(sdists) != 1:
        raise CheckFailed(f"expected one sdist in {DIST}, found {sdists}")
    python = fresh_venv(sys.executable, work / "venv-sdist")
    # Only pip is in this venv: Zig comes from the ziglang build requirement, zstd from the sdist
    # itself (vendor/zstd/); a build that tried to download zstd fails.
    run_long([python, "-m", "pip", "install", "--verbose", str(sdists[0])],
             f"building and installing {sdists[0].name} with pip (Zig and mypyc)",
             "several minutes: pip fetches numpy, mypy and ziglang into its build environment",
             env={**os.environ, "LOADERX_NO_ZSTD_DOWNLOAD": "1"})
    run_long([python, "-m", "pip", "install", "--quiet", *TEST_TOOLS],
             "installing the test tools and the integrations",
             "a few minutes: torch, jax and ray are about 1 GB; pip prints nothing meanwhile")
    run_suite(python, sdists[0].name, [m.removesuffix(".py").replace("/", ".")
                                       for m in project_build.MYPYC_MODULES], pytest_args)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", action="store_true", help="install the sdist instead")
    parser.add_argument("--dist-prefix", type=Path, default=ROOT / "zig" / "zig-out")
    # Anything not understood here goes to pytest (e.g. -k, --deselect, -x).
    args, pytest_args = parser.parse_known_args(argv)
    work = ROOT / "build" / "install-check"
    work.mkdir(parents=True, exist_ok=True)
    if args.sdist:
        check_sdist_install(work, pytest_args)
        return
    manifest = json.loads((args.dist_prefix / "dist" / "targets.json").read_text())
    host = host_target([Target(**row) for row in manifest["targets"]])
    chosen = host_wheels(host)
    if not chosen:
        raise CheckFailed(f"no wheel for this host in {DIST}; run 'python3 build.py wheels'")
    for wheel, interpreter in chosen:
        check_wheel_install(wheel, interpreter, work, pytest_args)
    log(f"passed: {', '.join(w.name for w, _ in chosen)}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except CheckFailed as failure:
        raise SystemExit(f"[install-check] failed: {failure}") from None
    except subprocess.CalledProcessError as failed:
        raise SystemExit(f"[install-check] failed (exit status {failed.returncode}): "
                         f"{' '.join(str(c) for c in failed.cmd)}; its output is above") from None
