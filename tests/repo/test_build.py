"""build.py's long steps say what they do, how long they usually take, and that they still run;
fetching zstd's sources and the venv recover from a failed or interrupted run; a failed step ends
with a message, not a traceback.

The fetch cases use a stand-in for pip and a small tarball shaped like the pinned sdist, so
nothing is downloaded and the real .cache is untouched. All of these need the repository's
build.py, so they skip against an installed package's copied tests/ (install-check)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
if not (ROOT / "build.py").exists() or not (ROOT / "zig").is_dir():
    pytest.skip("the repository's build.py is not beside these tests", allow_module_level=True)


def load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loaderx_build_script", ROOT / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_long_step_reports_while_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    build = load_build()
    setattr(build, "HEARTBEAT_S", 0.2)
    build.run_long([sys.executable, "-c", "import time; time.sleep(1.0)"], "waiting", "a second")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[build] waiting (a second)"
    assert sum(line.startswith("[build] ... still waiting, ") for line in out) >= 2
    assert out[-1].startswith("[build] waiting: done in ")
    with pytest.raises(subprocess.CalledProcessError):
        build.run_long([sys.executable, "-c", "raise SystemExit(3)"], "failing", "no time")


def tar_of(members: dict[str, bytes]) -> bytes:
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("filters", [True, False], ids=["python-with-filters", "3.11.0-3.11.3"])
def test_the_zstd_sources_unpack_safely_with_or_without_tar_filters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: bool
) -> None:
    import io
    import tarfile

    build = load_build()
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter")
    good = tar_of({"zstd/lib/a.c": b"int a;", "zstd/lib/b.h": b"#define B 1"})
    with tarfile.open(fileobj=io.BytesIO(good)) as archive:
        build.extract_plain(archive, archive.getmembers(), tmp_path / "good")
    assert (tmp_path / "good/zstd/lib/a.c").read_bytes() == b"int a;"
    assert (tmp_path / "good/zstd/lib/b.h").read_bytes() == b"#define B 1"
    bad = tar_of({"zstd/ok.c": b"1", "zstd/../../escaped.c": b"2"})
    with tarfile.open(fileobj=io.BytesIO(bad)) as archive:
        with pytest.raises((SystemExit, getattr(tarfile, "FilterError", SystemExit))):
            build.extract_plain(archive, archive.getmembers(), tmp_path / "bad" / "in")
    assert not (tmp_path / "escaped.c").exists() and not (tmp_path / "bad/escaped.c").exists()


# Stands in for `python -m pip download ... --dest DIR ...`: copies $FAKE_SDIST into DIR, or
# fails as pip does when $FAKE_SDIST is unset (no network, no such version).
FAKE_PIP = """#!/bin/sh
dest=""
while [ $# -gt 0 ]; do
    if [ "$1" = "--dest" ]; then dest="$2"; fi
    shift
done
if [ -z "$FAKE_SDIST" ]; then
    echo "ERROR: No matching distribution found" >&2
    exit 1
fi
cp "$FAKE_SDIST" "$dest/"
"""


def fake_sdist(build: ModuleType, folder: Path, header: bytes = b"/* zstd.h */\n") -> Path:
    """A tarball named and laid out like the pinned sdist (just zstd.h and LICENSE)."""
    folder.mkdir(parents=True, exist_ok=True)
    path: Path = folder / build.ZSTD_SDIST_FILE
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("lib/zstd.h", header), ("LICENSE", b"BSD\n")):
            info = tarfile.TarInfo(build.ZSTD_TREE_PREFIX + name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def build() -> ModuleType:
    """A fresh copy of build.py per test, so that patching it leaks nowhere."""
    return load_build()


@pytest.fixture
def pinned(build: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A good sdist in tmp_path/registry, pinned by its checksum; returns it and the fake pip."""
    good = fake_sdist(build, tmp_path / "registry")
    monkeypatch.setattr(build, "ZSTD_SDIST_SHA256", hashlib.sha256(good.read_bytes()).hexdigest())
    pip = tmp_path / "fake-python"
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    return good, str(pip)


def test_a_failed_download_says_what_failed_and_the_next_run_recovers(
        build: ModuleType, pinned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    monkeypatch.delenv("FAKE_SDIST", raising=False)
    with pytest.raises(SystemExit) as failed:
        build.fetch_zstd(cache=cache, python=pip)
    message = str(failed.value.code)
    assert f"could not download {build.ZSTD_SDIST_NAME}=={build.ZSTD_SDIST_VERSION}" in message
    assert "run the command again" in message
    monkeypatch.setenv("FAKE_SDIST", str(good))
    tree = build.fetch_zstd(cache=cache, python=pip)
    assert (tree / "lib" / "zstd.h").read_bytes() == b"/* zstd.h */\n"


def test_a_checksum_mismatch_is_refused_and_the_next_run_downloads_again(
        build: ModuleType, pinned: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    tampered = fake_sdist(build, tmp_path / "tampered", header=b"/* not zstd's */\n")
    monkeypatch.setenv("FAKE_SDIST", str(tampered))
    with pytest.raises(SystemExit) as failed:
        build.fetch_zstd(cache=cache, python=pip)
    message = str(failed.value.code)
    assert hashlib.sha256(tampered.read_bytes()).hexdigest() in message
    assert f"expected {build.ZSTD_SDIST_SHA256}" in message and "refusing it" in message
    assert not (cache / f"zstd-from-{build.ZSTD_SDIST_NAME}-{build.ZSTD_SDIST_VERSION}").exists()
    monkeypatch.setenv("FAKE_SDIST", str(good))
    tree = build.fetch_zstd(cache=cache, python=pip)
    assert (tree / "LICENSE").read_bytes() == b"BSD\n"


def test_an_interrupted_extraction_is_redone(build: ModuleType, pinned: tuple[Path, str],
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    good, pip = pinned
    cache = tmp_path / "cache"
    tree = cache / f"zstd-from-{build.ZSTD_SDIST_NAME}-{build.ZSTD_SDIST_VERSION}"
    # What a kill leaves: a half-filled staging folder, and a tree without zstd.h.
    (cache / "zstd-staging" / "half").mkdir(parents=True)
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "zstd_partial.c").write_text("")
    monkeypatch.setenv("FAKE_SDIST", str(good))
    assert build.fetch_zstd(cache=cache, python=pip) == tree
    assert sorted(p.name for p in (tree / "lib").iterdir()) == ["zstd.h"]
    assert not (cache / "zstd-staging").exists()
    # Once complete, a re-run neither downloads nor unpacks.
    monkeypatch.delenv("FAKE_SDIST")
    (cache / "downloads" / build.ZSTD_SDIST_FILE).unlink()
    assert build.fetch_zstd(cache=cache, python=pip) == tree


def run_main(build: ModuleType, monkeypatch: pytest.MonkeyPatch, command: object) -> str:
    monkeypatch.setattr(build, "reexec_in_venv", lambda command: None)
    monkeypatch.setattr(build, "COMMANDS", {"step": command})
    monkeypatch.setattr(sys, "argv", ["build.py", "step"])
    with pytest.raises(SystemExit) as ended:
        build.main()
    return str(ended.value.code)


def test_a_failed_step_ends_with_a_message_not_a_traceback(
        build: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(_: list[str]) -> None:
        build.run([sys.executable, "-c", "raise SystemExit(3)"])

    message = run_main(build, monkeypatch, fails)
    assert message.startswith("[build] failed (exit status 3): ")
    assert "raise SystemExit(3)" in message and "run the same command again" in message


def test_an_interrupted_step_says_so(build: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_: list[str]) -> None:
        raise KeyboardInterrupt

    assert run_main(build, monkeypatch, interrupted) == "130"


def test_bench_hands_its_command_to_the_report(build: ModuleType,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`build.py bench ... --report FILE` runs compare.py with the command as typed in
    LOADERX_BENCH_COMMAND, which the report's header prints (compare.py sees only its own
    arguments). Nothing is built or measured here."""
    ran: list[tuple[list[str], dict[str, str] | None]] = []
    monkeypatch.setattr(build, "build_native", lambda: None)
    monkeypatch.setattr(build, "compile_mypyc", lambda: None)
    monkeypatch.setattr(build, "run", lambda cmd, env=None: ran.append((cmd, env)))
    build.cmd_bench(["store", "--report", "benchmarks/reports/a b.md"])
    [(cmd, env)] = ran
    assert cmd[1:] == [str(ROOT / "benchmarks" / "compare.py"), "store", "--report",
                       "benchmarks/reports/a b.md"]
    assert env is not None
    assert env["LOADERX_BENCH_COMMAND"] == (
        "python3 build.py bench store --report 'benchmarks/reports/a b.md'")


def test_a_venv_whose_python_is_gone_is_made_anew(build: ModuleType, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv made from an interpreter that was since removed or upgraded: bin/python dangles."""
    venv = tmp_path / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    for name in ("python", "python3"):
        (venv / "bin" / name).unlink()
        (venv / "bin" / name).symlink_to(tmp_path / "uninstalled" / "python3")
    monkeypatch.setattr(build, "VENV", venv)
    for stage, requirements in build.VENV_STAGES.items():
        build.stage_stamp(stage).write_text("\n".join(requirements))
    installs: list[list[str]] = []
    real_run_long = build.run_long

    def run_long(cmd: list[str], doing: str, expect: str, cwd: Path = build.ROOT,
                 env: dict[str, str] | None = None) -> None:
        if "pip" in cmd:
            installs.append(cmd)  # the real pip installs would take minutes
        else:
            real_run_long(cmd, doing, expect, cwd, env)

    monkeypatch.setattr(build, "run_long", run_long)
    build.ensure_venv()
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import pip, sys; print(sys.prefix)"],
                          capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()) == venv
    # pip itself, then each stage: the stamps went with the old venv.
    assert len(installs) == 1 + len(build.VENV_STAGES)
    assert installs[-1][-1] == build.VENV_STAGES["test"][-1]



def test_an_old_python_is_refused_up_front_and_an_old_venv_is_made_anew(
        build: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run by Python 3.10, build.py made a 3.10 .venv and failed minutes later on jaxlib==0.10.2;
    run again by 3.11 it kept that venv and failed the same way on every run."""
    message = build.too_old((3, 10))
    assert message is not None and "needs Python 3.11 or newer" in message and "3.10" in message
    assert build.too_old((3, 11)) is None and build.too_old((3, 13)) is None
    # A venv whose python is this one (it has pip): fine as it is, and too old for a project
    # that would need 3.99.
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(build, "VENV", venv)
    assert build.venv_runs()
    monkeypatch.setattr(build, "PYTHON_MIN", (3, 99))
    assert not build.venv_runs()


def chromium_steps(build: ModuleType, monkeypatch: pytest.MonkeyPatch, found: set[str],
                   euid: int) -> list[list[str]]:
    """The commands ensure_chromium runs when `found` are the programs on PATH."""
    steps: list[list[str]] = []
    monkeypatch.setattr(build.shutil, "which", lambda name: f"/usr/bin/{name}" if name in found
                        else None)
    monkeypatch.setattr(build.os, "geteuid", lambda: euid)
    monkeypatch.setattr(build, "run_long", lambda cmd, *_, **__: steps.append(cmd))
    build.ensure_chromium()
    return steps


def test_chromium_is_installed_with_apt_get_when_missing_and_root(
        build: ModuleType, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert chromium_steps(build, monkeypatch, {"chromium", "apt-get"}, 0) == []
    installs = chromium_steps(build, monkeypatch, {"apt-get"}, 0)
    assert installs == [["apt-get", "update"],
                        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]]
    assert chromium_steps(build, monkeypatch, {"apt-get"}, 1000) == []
    assert chromium_steps(build, monkeypatch, set(), 0) == []
    assert capsys.readouterr().out.count("apt-get install chromium") == 2

def requirement_name(requirement: str) -> str:
    return re.split(r"[\[<>=!~]", requirement, maxsplit=1)[0].lower()


def azurite_steps(build: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                  found: set[str], euid: int) -> list[list[str]]:
    """The commands ensure_azurite runs when `found` are the programs on PATH; a stand-in npm
    "installs" by making the program that the real package puts there."""
    steps: list[list[str]] = []
    folder = tmp_path / "azurite"
    program = folder / "node_modules" / ".bin" / "azurite-blob"
    monkeypatch.setattr(build, "AZURITE_DIR", folder)
    monkeypatch.setattr(build, "AZURITE_PROGRAM", program)
    monkeypatch.setattr(build, "AZURITE_STAMP", folder / ".loaderx-version")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build.shutil, "which", lambda name: f"/usr/bin/{name}" if name in found
                        else None)
    monkeypatch.setattr(build.os, "geteuid", lambda: euid)

    def step(cmd: list[str], *_: object, **__: object) -> None:
        steps.append(cmd)
        if cmd[0] == "npm":
            program.parent.mkdir(parents=True)
            program.write_text("#!/bin/sh\n")

    monkeypatch.setattr(build, "run_long", step)
    build.ensure_azurite()
    return steps


def test_azurite_is_installed_pinned_once_and_again_for_another_pin(
        build: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    npm = ["npm", "install", "--prefix", str(tmp_path / "azurite"), "--no-audit", "--no-fund",
           "--no-update-notifier", "--save-exact", f"azurite@{build.AZURITE_VERSION}"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", build.AZURITE_VERSION)  # pinned exactly
    assert azurite_steps(build, monkeypatch, tmp_path, {"node", "npm"}, 1000) == [npm]
    assert azurite_steps(build, monkeypatch, tmp_path, {"node", "npm"}, 1000) == []
    monkeypatch.setattr(build, "AZURITE_VERSION", "0.0.1")
    assert azurite_steps(build, monkeypatch, tmp_path, {"node", "npm"}, 1000)[0][-1] \
        == "azurite@0.0.1"
    monkeypatch.setattr(build, "AZURITE_VERSION", "0.0.2")
    without_node = azurite_steps(build, monkeypatch, tmp_path, {"apt-get"}, 0)
    assert without_node[:2] == [["apt-get", "update"], ["apt-get", "install", "-y",
                                                        "--no-install-recommends", "nodejs", "npm"]]
    assert without_node[2][0] == "npm"
    monkeypatch.setattr(build, "AZURITE_VERSION", "0.0.3")
    assert azurite_steps(build, monkeypatch, tmp_path, {"apt-get"}, 1000) == []
    assert "apt-get install nodejs npm" in capsys.readouterr().out


def test_the_azurite_kit_runs_what_build_py_installs(build: ModuleType) -> None:
    kit = (ROOT / "tests" / "remote" / "azurite_server.py").read_text()
    where = build.AZURITE_PROGRAM.relative_to(ROOT).parts
    assert "ROOT / " + " / ".join(f'"{part}"' for part in where) in kit


def test_the_demo_installs_only_what_it_needs(build: ModuleType) -> None:
    """`build.py demo` is the first thing a newcomer runs: no test tool, no integration."""
    demo = {requirement_name(r) for r in build.VENV_STAGES["demo"]}
    assert demo == {"numpy", "msgpack", "ziglang", "mypy", "setuptools"}
    assert not demo & {"torch", "jax", "jaxlib", "flax", "optax", "ray", "pytest", "hypothesis",
                       "asv", "virtualenv", "mkdocs"}
    assert build.stages_for("demo") == ["demo"]
    assert build.stages_for("test") == list(build.VENV_STAGES) == ["demo", "test"]
    # The release tools still find every tool in DEV_REQUIREMENTS, and the extras are the tests'.
    assert build.DEV_REQUIREMENTS == build.DEMO_REQUIREMENTS + build.TEST_REQUIREMENTS
    assert set(build.TEST_EXTRAS + build.DOCS_REQUIREMENTS) <= set(build.VENV_STAGES["test"])


@pytest.fixture
def working_venv(build: ModuleType, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """A .venv whose python runs (this one); returns the pip installs ensure_venv asks for,
    which are recorded instead of run."""
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(build, "VENV", venv)
    installs: list[list[str]] = []
    monkeypatch.setattr(build, "run_long", lambda cmd, *_, **__: installs.append(cmd))
    return installs


def installed(installs: list[list[str]]) -> list[str]:
    """The requirements of the recorded `pip install --quiet ...` calls, in order."""
    return [r for cmd in installs for r in cmd[cmd.index("--quiet") + 1:]]


def test_demo_after_test_installs_nothing(build: ModuleType,
                                          working_venv: list[list[str]]) -> None:
    build.ensure_venv(build.stages_for("test"))
    assert installed(working_venv) == build.DEMO_REQUIREMENTS + build.VENV_STAGES["test"]
    working_venv.clear()
    build.ensure_venv(build.stages_for("demo"))
    build.ensure_venv(build.stages_for("test"))
    assert working_venv == []


def test_test_after_demo_installs_only_the_rest(build: ModuleType,
                                                working_venv: list[list[str]]) -> None:
    build.ensure_venv(build.stages_for("demo"))
    assert installed(working_venv) == build.DEMO_REQUIREMENTS
    working_venv.clear()
    build.ensure_venv(build.stages_for("test"))
    assert installed(working_venv) == build.VENV_STAGES["test"]
    # A requirement that changes re-installs its own stage only.
    working_venv.clear()
    build.VENV_STAGES["demo"] = [*build.DEMO_REQUIREMENTS, "tomli"]
    build.ensure_venv(build.stages_for("test"))
    assert installed(working_venv) == [*build.DEMO_REQUIREMENTS, "tomli"]


def test_a_listed_mypyc_module_that_does_not_exist_fails_loudly(
        build: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """setup.py compiles mypyc_sources(): a module moved without MYPYC_MODULES following would
    otherwise ship interpreted without a word."""
    assert build.mypyc_sources() == build.MYPYC_MODULES
    assert all((ROOT / m).is_file() for m in build.MYPYC_MODULES)
    monkeypatch.setattr(build, "MYPYC_MODULES", [*build.MYPYC_MODULES, "loaderx/_data/gone.py"])
    with pytest.raises(SystemExit, match=r"names \['loaderx/_data/gone.py'\], which do not exist"):
        build.mypyc_sources()


def test_compiled_artifacts_are_found_at_any_depth_but_the_library_is_kept(
        build: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "LIB_DIR", tmp_path / "loaderx" / "lib")
    made = [tmp_path / "loaderx" / "_a" / "_b" / "deep.cpython-311-x86_64-linux-gnu.so",
            tmp_path / "loaderx" / "top.cpython-311-x86_64-linux-gnu.so",
            tmp_path / "loaderx" / "_c" / "lib" / "nested.cpython-311-x86_64-linux-gnu.so",
            tmp_path / "loaderx_compiled__mypyc.cpython-311-x86_64-linux-gnu.so"]
    kept = [tmp_path / "loaderx" / "lib" / "libloaderx.so", tmp_path / "loaderx" / "_a" / "m.py"]
    for path in made + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    assert sorted(build.compiled_artifacts()) == sorted(made)
    build.remove_compiled()
    assert [p for p in made + kept if p.exists()] == kept
    assert build.compiled_module_names() == [
        m.removesuffix(".py").replace("/", ".") for m in build.MYPYC_MODULES]


def test_the_compiled_run_selects_its_tests_by_marker(build: ModuleType,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Test modules move between folders: the compiled run names none of them."""
    runs: list[tuple[list[str], str]] = []
    for step in ("build_native", "zig_tests", "run", "ensure_chromium", "ensure_azurite",
                 "remove_compiled", "compile_mypyc", "assert_compiled"):
        monkeypatch.setattr(build, step, lambda *_, **__: None)
    monkeypatch.setattr(build, "pytest", lambda args, label: runs.append((args, label)))
    monkeypatch.setenv("LOADERX_FORBID_SKIPS", "0")
    build.cmd_test(["-x"])
    assert runs == [(["-q", "-x"], "interpreted"),
                    (["-q", "-p", "no:cacheprovider", "-m", "compiled", "-x"], "mypyc-compiled")]
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in options["addopts"].split()
    assert [m.split(":")[0] for m in options["markers"]] == ["compiled"]


def test_an_sdists_vendored_zstd_is_used_and_a_forbidden_download_fails(
        build: ModuleType, pinned: tuple[Path, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unpacked sdist holds vendor/zstd/: the build takes it and downloads nothing.
    LOADERX_NO_ZSTD_DOWNLOAD=1 turns any download into a failure, which is how the sdist
    install check proves that."""
    good, pip = pinned
    monkeypatch.setenv("FAKE_SDIST", str(good))
    monkeypatch.setenv("LOADERX_NO_ZSTD_DOWNLOAD", "1")
    monkeypatch.setattr(build, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(build, "VENDORED_ZSTD", tmp_path / "sdist" / "vendor" / "zstd")
    with pytest.raises(SystemExit, match="LOADERX_NO_ZSTD_DOWNLOAD=1 forbids downloading"):
        build.zstd_sources(python=pip)
    with tarfile.open(good) as archive:
        build.extract_plain(archive, archive.getmembers(), tmp_path / "unpacked")
    build.VENDORED_ZSTD.parent.mkdir(parents=True)
    (tmp_path / "unpacked" / build.ZSTD_TREE_PREFIX).rename(build.VENDORED_ZSTD)
    assert build.zstd_sources(python=pip) == build.VENDORED_ZSTD
    monkeypatch.delenv("LOADERX_NO_ZSTD_DOWNLOAD")
    monkeypatch.setattr(build, "VENDORED_ZSTD", tmp_path / "nowhere")
    assert (build.zstd_sources(python=pip) / "LICENSE").read_bytes() == b"BSD\n"
