"""Builds and checks every release artefact into dist/ (run through `python3 build.py wheels`).

1. `zig build dist` cross-compiles the library for every published platform into
   zig/zig-out/dist/<wheel tag>/ and writes targets.json, the one table of targets and tags.
2. The sdist is built from the working tree (MANIFEST.in decides its files) and checked.
3. Every wheel is built from the unpacked sdist, which proves the sdist is complete:
   - one pure-Python wheel, specialised per platform into py3-none-<tag> by adding that
     platform's library and the licence texts;
   - for this host, one mypyc-compiled wheel per CPython interpreter found (the .venv's, and
     pyenv's 3.12+), tagged cp3XX-cp3XX-<manylinux tag>, honest about the glibc it needs.
4. Every wheel is checked after packing (tools/wheel_check.py); the first failure stops the run.

Options: --skip-compiled (platform wheels and sdist only), --host-only (this machine's platform
only: its py3-none wheel, its compiled wheels unless skipped, and the sdist), --interpreter PATH
(repeatable; replaces the search), --dist-prefix DIR (where `zig build dist` installs).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build as project_build  # noqa: E402  (the repository's build.py)
from tools import libinspect, symbol_dump, wheel_check, wheelfile  # noqa: E402
from tools.wheel_check import CheckFailed, Expected, Target  # noqa: E402

DIST: Final = ROOT / "dist"
WORK: Final = ROOT / "build" / "wheels"
HEADER: Final = ROOT / "zig" / "include" / "loaderx.h"
LICENCE_EXPRESSION: Final = "MIT AND BSD-3-Clause"  # loaderx, and the zstd it links in
COMPILED_LICENCE_EXPRESSION: Final = "MIT AND BSD-3-Clause AND PSF-2.0"  # plus mypyc's runtime
BUILD_TOOLS: Final = ("numpy", "msgpack", "mypy", "setuptools", "wheel")


def log(message: str) -> None:
    print(f"[wheels] {message}", flush=True)


def nice(cmd: list[str]) -> list[str]:
    """The machine is shared: every heavy build runs at the lowest priority."""
    return ["nice", "-n", "19", *cmd] if shutil.which("nice") else cmd


def run(cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    log(" ".join(cmd))
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def run_long(cmd: list[str], doing: str, expect: str, cwd: Path = ROOT,
             env: dict[str, str] | None = None) -> None:
    """A step that can take minutes, at the lowest priority: says what it does and how long that
    usually takes, then that it is still at it every 30 s (build.py's run_long)."""
    project_build.run_long(nice(cmd), doing, expect, cwd=cwd, env=env)


# --- native libraries -----------------------------------------------------------------------


def zig_dist(prefix: Path, host_only: bool = False) -> tuple[list[Target], float]:
    """Runs `zig build dist` into a clean prefix/dist; returns the targets and the seconds.
    With host_only, only the published platform this machine runs is built."""
    zstd = project_build.fetch_zstd()
    shutil.rmtree(prefix / "dist", ignore_errors=True)
    started = time.monotonic()
    if host_only:
        run_long([sys.executable, "-m", "ziglang", "build", "dist", "-Ddist-host-only",
                  f"-Dzstd={zstd}", "--prefix", str(prefix)],
                 "compiling the library for this host's wheel (zig build dist -Ddist-host-only)",
                 "about 2 minutes with an empty Zig cache, seconds afterwards", cwd=ROOT / "zig")
    else:
        run_long([sys.executable, "-m", "ziglang", "build", "dist", f"-Dzstd={zstd}",
                  "--prefix", str(prefix)],
                 "cross-compiling the library for every platform (zig build dist)",
                 "about 15 minutes on 2 busy cores with an empty Zig cache, seconds afterwards",
                 cwd=ROOT / "zig")
    seconds = time.monotonic() - started
    manifest = json.loads((prefix / "dist" / "targets.json").read_text())
    targets = [Target(**row) for row in manifest["targets"]]
    for target in targets:
        found = sorted(p.name for p in (prefix / "dist" / target.wheel_tag).iterdir())
        if found != [target.library]:
            raise CheckFailed(f"zig-out/dist/{target.wheel_tag} holds {found}, "
                              f"expected exactly {target.library}")
    return targets, seconds


def check_libraries(targets: list[Target], prefix: Path, abi: frozenset[str]) -> None:
    """Each built library against its target, and LLVM's reading of its exports against ours."""
    for target in targets:
        path = prefix / "dist" / target.wheel_tag / target.library
        info = wheel_check.check_library(str(path), path.read_bytes(), target, abi,
                                         target.wheel_tag)
        llvm = symbol_dump.llvm_exports(path, info.format)
        if llvm is None:
            log(f"{target.wheel_tag}: LLVM tools not installed, exports read by libinspect only")
        elif llvm != info.exports:
            raise CheckFailed(f"{path}: LLVM reads exports {sorted(llvm ^ info.exports)} "
                              "differently from tools/libinspect.py")
        linker = sorted(info.exports & wheel_check.LINKER_SYMBOLS.get(info.format, frozenset()))
        log(f"{target.wheel_tag}: {info.format}/{info.arch}, exports = loaderx.h's {len(abi)}"
            + (f" + the linker's {linker}" if linker else "")
            + f", needs {', '.join(info.needed) or 'nothing'}"
            + (f", glibc {libinspect.glibc_floor(info)}" if info.symbol_versions else "")
            + (f", macOS {info.macos_min}" if info.macos_min else ""))


def host_target(targets: list[Target]) -> Target:
    """The published target this machine runs (its library goes into the compiled wheels)."""
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                        platform.machine().lower())
    if sys.platform == "linux":
        family = "manylinux" if platform.libc_ver()[0] == "glibc" else "musllinux"
    else:
        family = {"darwin": "macosx", "win32": "win"}.get(sys.platform, sys.platform)
    for target in targets:
        if target.arch == machine and target.wheel_tag.startswith(family):
            return target
    raise CheckFailed(f"no published target matches this host ({family}, {machine})")


# --- setuptools, driven through its PEP 517 hooks --------------------------------------------

# setuptools rewrites sys.argv inside its hooks, so the arguments are read first.
HOOK: Final = ("import sys; hook, out, answer = sys.argv[1:4]; "
               "from setuptools import build_meta as backend; "
               "open(answer, 'w').write(getattr(backend, hook)(out))")


def pep517(python: str, hook: str, source: Path, out: Path, env: dict[str, str],
           doing: str = "", expect: str = "") -> Path:
    """Calls one setuptools build hook in `source`; returns the artefact it made in `out`.
    A hook that compiles (mypyc) says so through `doing` and `expect`."""
    out.mkdir(parents=True, exist_ok=True)
    answer = out / ".artefact-name"
    cmd = [python, "-c", HOOK, hook, str(out), str(answer)]
    if doing:
        run_long(cmd, doing, expect, cwd=source, env={**os.environ, **env})
    else:
        run(nice(cmd), cwd=source, env={**os.environ, **env})
    return out / answer.read_text().strip()


def build_sdist(root: Path) -> Path:
    out = WORK / "sdist"
    shutil.rmtree(out, ignore_errors=True)
    # No mypyc while listing sources: setup.py would otherwise compile just to build a tarball.
    sdist = pep517(sys.executable, "build_sdist", root, out, {"LOADERX_NO_MYPYC": "1"})
    wheel_check.check_sdist(sdist, root)
    return sdist


def unpack(sdist: Path, into: Path) -> Path:
    """A fresh copy of the sdist's tree; every wheel is built from one."""
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    return into / sdist.name.removesuffix(".tar.gz")


# --- wheels ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: tuple[int, int]
    free_threaded: bool
    extension_suffix: str

    @property
    def tag(self) -> str:
        return f"cp{self.version[0]}{self.version[1]}"

    @property
    def abi(self) -> str:
        return self.tag + ("t" if self.free_threaded else "")


def describe(python: str) -> Interpreter | None:
    probe = ("import json, sys, sysconfig; print(json.dumps([sys.implementation.name, "
             "sys.version_info[:2], bool(sysconfig.get_config_var('Py_GIL_DISABLED')), "
             "sysconfig.get_config_var('EXT_SUFFIX')]))")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    name, version, free_threaded, suffix = json.loads(out.stdout)
    if name != "cpython" or tuple(version) < (3, 11):
        return None
    return Interpreter(python, (version[0], version[1]), free_threaded, suffix)


def find_interpreters() -> list[Interpreter]:
    """This venv's CPython first, then pyenv's (one per ABI; 3.11 and newer)."""
    pyenv = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [sys.executable, *sorted(glob.glob(f"{pyenv}/versions/3.*/bin/python3*"))]
    found: dict[str, Interpreter] = {}
    for candidate in candidates:
        if candidate.endswith("-config"):
            continue
        interpreter = describe(candidate)
        if interpreter and interpreter.abi not in found:
            found[interpreter.abi] = interpreter
    return list(found.values())


def build_environment(interpreter: Interpreter) -> str:
    """A Python with setuptools, mypy(c) and the packages mypyc type-checks against."""
    if Path(interpreter.path) == Path(sys.executable):
        return sys.executable
    venv = ROOT / ".cache" / "wheel-build" / f"venv-{interpreter.abi}"
    python = venv / "bin" / "python"
    wanted = [r for r in project_build.DEV_REQUIREMENTS
              if r.split("=")[0].split(">")[0].split("<")[0] in BUILD_TOOLS]
    stamp = venv / ".loaderx-build-tools"
    if not (stamp.exists() and stamp.read_text() == "\n".join(wanted) and python.exists()):
        run([interpreter.path, "-m", "venv", "--clear", str(venv)])
        run_long([str(python), "-m", "pip", "install", "--quiet", *wanted],
                 f"installing the build tools for {interpreter.abi}", "a minute or two")
        stamp.write_text("\n".join(wanted))
    return str(python)


def licence_texts(compiled: bool) -> dict[str, bytes]:
    """zstd's licence from the fetched sources; for compiled wheels also mypy(c)'s."""
    zstd = project_build.fetch_zstd() / "LICENSE"
    texts = {wheel_check.ZSTD_LICENCE: zstd.read_bytes()}
    if compiled:
        from importlib.metadata import distribution

        files = distribution("mypy").files or []
        mypy = [f for f in files if f.name == "LICENSE" and "licenses" in f.parts
                and "typeshed" not in f.parts]
        if not mypy:
            raise CheckFailed("mypy's LICENSE was not found in its installed metadata")
        texts[wheel_check.MYPYC_LICENCE] = Path(str(mypy[0].locate())).read_bytes()
    return texts


def finish(wheel: wheelfile.Wheel, library: Path, expected: Expected, abi: frozenset[str],
           compiled: bool) -> Path:
    """Adds the library and licences, sets the tags, writes into dist/ and checks the result."""
    out = wheel.copy()
    out.files[f"loaderx/lib/{expected.target.library}"] = library.read_bytes()
    expression = COMPILED_LICENCE_EXPRESSION if compiled else LICENCE_EXPRESSION
    for relative, text in licence_texts(compiled).items():
        wheelfile.add_licence(out, relative, text, expression)
    wheelfile.set_tags(out, expected.tags, root_is_purelib=False)
    path = DIST / wheelfile.wheel_file_name(out, expected.tags)
    wheelfile.write_wheel(out, path)
    wheel_check.check_wheel(path, expected, abi)
    log(f"checked {path.name} ({path.stat().st_size / 1024:.0f} KiB)")
    return path


def platform_wheels(source: Path, targets: list[Target], prefix: Path,
                    abi: frozenset[str]) -> list[Path]:
    """One py3-none-<tag> wheel per target, all from one pure-Python build."""
    env = {"LOADERX_SKIP_NATIVE": "1", "LOADERX_NO_MYPYC": "1"}
    pure = wheelfile.read_wheel(pep517(sys.executable, "build_wheel", source, WORK / "pure", env))
    natives = [p for p in pure.files if p.endswith(wheel_check.NATIVE_SUFFIXES)]
    if natives:
        raise CheckFailed(f"the pure-Python wheel already holds native files: {natives}")
    return [finish(pure, prefix / "dist" / t.wheel_tag / t.library,
                   Expected([("py3", "none", t.wheel_tag)], t), abi, compiled=False)
            for t in targets]


def strip_debug(data: bytes) -> bytes:
    """mypyc compiles with -g1; the debug sections would make up a third of the wheel."""
    strip = shutil.which("strip")
    if strip is None:
        log("strip not found: compiled modules keep their debug sections")
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.so"
        path.write_bytes(data)
        subprocess.run([strip, "--strip-debug", str(path)], check=True)
        return path.read_bytes()


def compiled_wheel(sdist: Path, interpreter: Interpreter, host: Target, prefix: Path,
                   abi: frozenset[str]) -> Path:
    """mypyc-compiled wheel for one interpreter, tagged by the glibc its modules really need."""
    source = unpack(sdist, WORK / f"src-{interpreter.abi}")
    python = build_environment(interpreter)
    built = pep517(python, "build_wheel", source, WORK / interpreter.abi,
                   {"LOADERX_SKIP_NATIVE": "1"},
                   f"compiling the mypyc modules for {interpreter.abi}", "a minute or two")
    wheel = wheelfile.read_wheel(built)
    suffix = interpreter.extension_suffix
    modules = tuple(sorted(p.removesuffix(suffix) for p in wheel.files if p.endswith(suffix)))
    for module in modules:
        wheel.files[module + suffix] = strip_debug(wheel.files[module + suffix])
    expected_modules = sorted([m.removesuffix(".py") for m in project_build.MYPYC_MODULES
                               if (source / m).exists()] + ["loaderx_compiled__mypyc"])
    if list(modules) != expected_modules:
        raise CheckFailed(f"{built.name}: compiled modules {modules}, expected {expected_modules}")
    platform_tag = host.wheel_tag
    if platform_tag.startswith("manylinux"):
        floors = [libinspect.glibc_floor(libinspect.inspect_bytes(wheel.files[m + suffix]))
                  for m in modules]
        glibc = max([wheel_check.tag_floor(platform_tag) or (2, 17), *floors])
        platform_tag = f"manylinux_{glibc[0]}_{glibc[1]}_{host.arch}"
    elif sys.platform == "linux":
        raise CheckFailed("compiled wheels are only built on glibc Linux hosts here")
    expected = Expected([(interpreter.tag, interpreter.abi, platform_tag)], host, suffix, modules)
    return finish(wheel, prefix / "dist" / host.wheel_tag / host.library, expected, abi,
                  compiled=True)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-compiled", action="store_true")
    parser.add_argument("--host-only", action="store_true",
                        help="only this machine's platform wheel(s) and the sdist")
    parser.add_argument("--interpreter", action="append", default=[])
    parser.add_argument("--dist-prefix", type=Path, default=ROOT / "zig" / "zig-out")
    args = parser.parse_args(argv)
    abi = libinspect.header_functions(HEADER.read_text())
    started = time.monotonic()
    targets, zig_seconds = zig_dist(args.dist_prefix, args.host_only)
    log(f"zig build dist: {len(targets)} targets in {zig_seconds:.1f} s")
    check_libraries(targets, args.dist_prefix, abi)
    DIST.mkdir(exist_ok=True)
    for stale in list(DIST.glob("loaderx-*.whl")) + list(DIST.glob("loaderx-*.tar.gz")):
        stale.unlink()
    sdist = build_sdist(ROOT)
    shutil.copyfile(sdist, DIST / sdist.name)
    log(f"checked {sdist.name} ({sdist.stat().st_size / 1024:.0f} KiB)")
    source = unpack(sdist, WORK / "src")
    made = platform_wheels(source, targets, args.dist_prefix, abi)
    if not args.skip_compiled:
        host = host_target(targets)
        interpreters = ([i for i in map(describe, args.interpreter) if i] if args.interpreter
                        else find_interpreters())
        for interpreter in interpreters:
            made.append(compiled_wheel(sdist, interpreter, host, args.dist_prefix, abi))
    log(f"{len(made)} wheels and the sdist in {DIST} after {time.monotonic() - started:.0f} s:")
    for path in [*made, DIST / sdist.name]:
        log(f"  {path.stat().st_size / 1024:8.0f} KiB  {path.name}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except CheckFailed as failure:
        raise SystemExit(f"[wheels] check failed: {failure}") from None
    except subprocess.CalledProcessError as failed:
        raise SystemExit(f"[wheels] failed (exit status {failed.returncode}): "
                         f"{' '.join(str(c) for c in failed.cmd)}; its output is above") from None
