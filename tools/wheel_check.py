"""Checks a packed wheel or sdist against what it must contain; any failure stops the release.

A wheel must carry the tags its file name states, exactly one native library (its own
platform's: right format, CPU, exports and loader floor), py.typed, METADATA requiring exactly
numpy and msgpack (the integrations as extras) and Python 3.11, the `loaderx` console script,
and the licence texts of loaderx and of zstd (the library contains zstd). A compiled
wheel must also carry the mypyc extension modules of exactly its interpreter, and none of them
may need a newer glibc than the tag claims. The sdist must hold the sources and nothing built,
zstd's pinned sources with their licence under vendor/zstd/ (so that installing it downloads
nothing), and, built from a git checkout, nothing else git does not track.
"""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from tools import libinspect
from tools.wheelfile import Wheel, read_wheel, wheel_file_name

NATIVE_SUFFIXES: Final = (".so", ".dylib", ".dll", ".pyd")
REQUIRED_DEPENDENCIES: Final = ("numpy", "msgpack")
EXTRAS: Final = ("arrow", "jax", "ray", "remote", "torch")  # the optional integrations, one extra each
REQUIRES_PYTHON: Final = ">=3.11"
CONSOLE_SCRIPT: Final = "loaderx = loaderx.cli:entry_point"
ZSTD_LICENCE: Final = "zstd/LICENSE"
MYPYC_LICENCE: Final = "mypyc/LICENSE"  # compiled wheels embed mypyc's runtime library
# What a library may ask the loader for, beyond the C library itself.
WINDOWS_SYSTEM_DLL: Final = re.compile(r"(?i)(kernel32|ntdll|ucrtbase|msvcrt|api-ms-win-[\w-]+)\.dll")
MACOS_SYSTEM_DYLIBS: Final = ("/usr/lib/libSystem.B.dylib",)
# Zig's Mach-O linker exports the image's own header symbols from every dylib it links (Apple's
# ld keeps them private). They are not code and not zstd's; nothing else beyond the ABI is allowed.
LINKER_SYMBOLS: Final = {"macho": frozenset({"_mh_dylib_header", "__dso_handle"})}


class CheckFailed(Exception):
    """A packed artefact is wrong; the message says which file and what."""


@dataclass(frozen=True)
class Target:
    """One row of zig-out/dist/targets.json, with the facts its Zig triple implies."""

    wheel_tag: str
    triple: str
    cpu: str
    library: str

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def format(self) -> str:
        os_name = self.triple.split("-")[1].split(".")[0]
        return {"linux": "elf", "macos": "macho", "windows": "pe"}[os_name]

    @property
    def floor(self) -> tuple[int, int] | None:
        """The glibc or macOS version pinned in the triple, if any."""
        found = re.search(r"(?:gnu|macos)\.(\d+)\.(\d+)", self.triple)
        return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass(frozen=True)
class Expected:
    """What one wheel must be."""

    tags: list[tuple[str, str, str]]
    target: Target
    extension_suffix: str | None = None  # e.g. ".cpython-313-x86_64-linux-gnu.so" when compiled
    compiled_modules: tuple[str, ...] = field(default=())  # archive paths without the suffix


def tag_floor(platform_tag: str) -> tuple[int, int] | None:
    """The glibc (manylinux_X_Y) or macOS (macosx_X_Y) version a platform tag promises."""
    found = re.match(r"(?:manylinux|macosx)_(\d+)_(\d+)_", platform_tag)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_library(name: str, data: bytes, target: Target, abi: frozenset[str],
                  platform_tag: str) -> libinspect.LibraryInfo:
    """The platform library is the platform's, exports exactly the C ABI, and needs no more."""
    info = libinspect.inspect_bytes(data)
    if (info.format, info.arch) != (target.format, target.arch):
        raise CheckFailed(f"{name} is {info.format}/{info.arch}, "
                          f"{target.wheel_tag} needs {target.format}/{target.arch}")
    exports = info.exports - LINKER_SYMBOLS.get(info.format, frozenset())
    if exports != abi:
        zstd = sorted(s for s in exports if re.match(r"(?i)(zstd|zdict|huf|fse|hist)_", s))
        raise CheckFailed(f"{name} exports differ from loaderx.h: extra {sorted(exports - abi)} "
                          f"(zstd's: {zstd}), missing {sorted(abi - exports)}")
    _check_loader_needs(name, info, platform_tag)
    return info


def _check_loader_needs(name: str, info: libinspect.LibraryInfo, platform_tag: str) -> None:
    promised = tag_floor(platform_tag)
    if info.format == "elf":
        if platform_tag.startswith("manylinux"):
            needs = libinspect.glibc_floor(info)
            if promised is None or needs > promised:
                raise CheckFailed(f"{name} needs glibc {needs}, the tag {platform_tag} promises {promised}")
        elif platform_tag.startswith("musllinux"):
            if info.symbol_versions or any(n != "libc.so" for n in info.needed):
                raise CheckFailed(f"{name} is not a plain musl library: needs {info.needed}, "
                                  f"versions {sorted(info.symbol_versions)}")
    elif info.format == "macho":
        if info.macos_min is None or promised is None or info.macos_min > promised:
            raise CheckFailed(f"{name} targets macOS {info.macos_min}, the tag promises {promised}")
        if any(n not in MACOS_SYSTEM_DYLIBS for n in info.needed):
            raise CheckFailed(f"{name} links non-system dylibs: {info.needed}")
    elif info.format == "pe":
        foreign = [n for n in info.needed if not WINDOWS_SYSTEM_DLL.fullmatch(n)]
        if foreign:
            raise CheckFailed(f"{name} imports DLLs a Windows machine may lack: {foreign}")


def _check_record(wheel: Wheel, label: str) -> None:
    record = f"{wheel.dist_info}/RECORD"
    listed = {}
    for row in wheel.files[record].decode("utf-8").splitlines():
        path, digest, size = row.rsplit(",", 2)
        listed[path] = (digest, size)
    if set(listed) != set(wheel.files):
        raise CheckFailed(f"{label}: RECORD and archive disagree: "
                          f"{sorted(set(listed) ^ set(wheel.files))}")
    for path, data in wheel.files.items():
        if path == record:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if listed[path] != (f"sha256={digest}", str(len(data))):
            raise CheckFailed(f"{label}: RECORD hash or size is wrong for {path}")


def _check_metadata(wheel: Wheel, label: str, licences_needed: tuple[str, ...]) -> None:
    header = wheel.text("METADATA").partition("\n\n")[0]
    fields: dict[str, list[str]] = {}
    for line in header.splitlines():
        key, _, value = line.partition(": ")
        fields.setdefault(key, []).append(value)
    if fields.get("Name") != [wheel.name] or fields.get("Version") != [wheel.version]:
        raise CheckFailed(f"{label}: METADATA names {fields.get('Name')} {fields.get('Version')}")
    # Runtime dependencies: exactly numpy and msgpack; everything else only behind an extra.
    required = sorted(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower()
                      for r in fields.get("Requires-Dist", []) if "extra ==" not in r)
    if required != sorted(REQUIRED_DEPENDENCIES):
        raise CheckFailed(f"{label}: METADATA requires {required} at run time, expected exactly "
                          f"{sorted(REQUIRED_DEPENDENCIES)} (anything else belongs in an extra)")
    if sorted(fields.get("Provides-Extra", [])) != sorted(EXTRAS):
        raise CheckFailed(f"{label}: METADATA provides extras {fields.get('Provides-Extra')}, "
                          f"expected {sorted(EXTRAS)}")
    if fields.get("Requires-Python") != [REQUIRES_PYTHON]:
        raise CheckFailed(f"{label}: METADATA says Requires-Python {fields.get('Requires-Python')}, "
                          f"expected {REQUIRES_PYTHON}")
    scripts = wheel.files.get(f"{wheel.dist_info}/entry_points.txt", b"").decode("utf-8")
    if CONSOLE_SCRIPT not in scripts.splitlines():
        raise CheckFailed(f"{label}: entry_points.txt lacks the console script {CONSOLE_SCRIPT!r}")
    licences = set(fields.get("License-File", []))
    for relative in licences_needed:
        text = wheel.files.get(f"{wheel.dist_info}/licenses/{relative}", b"")
        if relative not in licences or not text.strip():
            raise CheckFailed(f"{label}: licence {relative} missing (listed: {sorted(licences)})")
    if b"MIT License" not in wheel.files[f"{wheel.dist_info}/licenses/LICENSE"]:
        raise CheckFailed(f"{label}: dist-info/licenses/LICENSE is not loaderx's MIT licence")
    if b"Zstandard" not in wheel.files[f"{wheel.dist_info}/licenses/{ZSTD_LICENCE}"]:
        raise CheckFailed(f"{label}: dist-info/licenses/{ZSTD_LICENCE} is not zstd's licence")


def _check_tags(wheel: Wheel, path: Path, expected: Expected) -> None:
    if path.name != wheel_file_name(wheel, expected.tags):
        raise CheckFailed(f"{path.name}: file name should be {wheel_file_name(wheel, expected.tags)}")
    lines = wheel.text("WHEEL").splitlines()
    tags = [tuple(line.removeprefix("Tag: ").split("-")) for line in lines if line.startswith("Tag: ")]
    if tags != expected.tags:
        raise CheckFailed(f"{path.name}: WHEEL tags {tags}, expected {expected.tags}")
    if "Root-Is-Purelib: false" not in lines or "Wheel-Version: 1.0" not in lines:
        raise CheckFailed(f"{path.name}: WHEEL must say Wheel-Version 1.0, Root-Is-Purelib false")


def _check_natives(wheel: Wheel, label: str, expected: Expected) -> list[str]:
    """Exactly the platform library plus, when compiled, exactly this interpreter's modules."""
    natives = sorted(p for p in wheel.files if p.endswith(NATIVE_SUFFIXES))
    library = f"loaderx/lib/{expected.target.library}"
    in_lib = [p for p in wheel.files if p.startswith("loaderx/lib/")]
    if in_lib != [library]:
        raise CheckFailed(f"{label}: loaderx/lib/ holds {in_lib}, expected exactly {library}")
    extensions = [p for p in natives if p != library]
    wanted = sorted(m + (expected.extension_suffix or "") for m in expected.compiled_modules)
    if extensions != wanted:
        raise CheckFailed(f"{label}: extension modules {extensions}, expected {wanted}")
    return extensions


def check_wheel(path: Path, expected: Expected, abi: frozenset[str]) -> Wheel:
    """Raises CheckFailed on the first thing wrong with the wheel at `path`."""
    wheel = read_wheel(path)
    label = path.name
    _check_tags(wheel, path, expected)
    _check_record(wheel, label)
    needed = ("LICENSE", ZSTD_LICENCE) + ((MYPYC_LICENCE,) if expected.compiled_modules else ())
    _check_metadata(wheel, label, needed)
    if "loaderx/py.typed" not in wheel.files:
        raise CheckFailed(f"{label}: loaderx/py.typed is missing")
    stray = [p for p in wheel.files if "__pycache__" in p or p.endswith(".pyc")
             or not p.startswith(("loaderx/", wheel.dist_info + "/", "loaderx_compiled__mypyc"))]
    if stray:
        raise CheckFailed(f"{label}: unexpected files {stray}")
    extensions = _check_natives(wheel, label, expected)
    platform_tag = expected.tags[0][2]
    library = f"loaderx/lib/{expected.target.library}"
    check_library(f"{label}:{library}", wheel.files[library], expected.target, abi, platform_tag)
    for extension in extensions:
        info = libinspect.inspect_bytes(wheel.files[extension])
        _check_loader_needs(f"{label}:{extension}", info, platform_tag)
    return wheel


SDIST_REQUIRED: Final = ("PKG-INFO", "setup.py", "build.py", "pyproject.toml", "README.md",
                         "LICENSE", "MANIFEST.in", "zig/build.zig", "zig/include/loaderx.h",
                         "zig/src/root.zig", "zig/src/c_abi/exports.zig", "loaderx/__init__.py",
                         "loaderx/_native/library.py", "loaderx/py.typed",
                         "vendor/zstd/LICENSE", "vendor/zstd/lib/zstd.h")
SDIST_GENERATED: Final = ("PKG-INFO", "setup.cfg")  # written by setuptools into every sdist
# zstd's sources, copied into the sdist at build time (setup.py); git never tracks them.
SDIST_VENDORED: Final = "vendor/zstd/"
SDIST_FORBIDDEN: Final = re.compile(
    r"(^|/)(\.zig-cache|zig-out|\.cache|\.venv|__pycache__|build|dist)/|^loaderx/lib/"
    r"|\.(so|dylib|dll|pyd|o|a|obj|lib|whl|pyc)$")


def check_sdist(path: Path, root: Path) -> list[str]:
    """Sources only, and every source the build needs; returns the member list."""
    prefix = path.name.removesuffix(".tar.gz") + "/"
    with tarfile.open(path) as archive:
        members = [m.name for m in archive.getmembers() if m.isfile()]
        zstd_licence = read_member(archive, prefix + SDIST_VENDORED + "LICENSE")
    outside = [m for m in members if not m.startswith(prefix)]
    if outside:
        raise CheckFailed(f"{path.name}: members outside {prefix}: {outside}")
    relative = {m.removeprefix(prefix) for m in members}
    built = sorted(m for m in relative if SDIST_FORBIDDEN.search(m))
    if built:
        raise CheckFailed(f"{path.name}: holds build outputs, not sources: {built}")
    sources = [p.relative_to(root).as_posix() for pattern in
               ("loaderx/**/*.py", "zig/src/**/*.zig", "zig/include/*.h", "typings/**/*.pyi")
               for p in root.glob(pattern)]
    missing = sorted(set(SDIST_REQUIRED).union(sources) - relative)
    if missing:
        raise CheckFailed(f"{path.name}: lacks {missing}")
    if b"Zstandard" not in zstd_licence:
        raise CheckFailed(f"{path.name}: {SDIST_VENDORED}LICENSE is not zstd's licence")
    stray = untracked(relative, root)
    if stray:
        raise CheckFailed(f"{path.name}: holds files git does not track (scratch files? MANIFEST.in "
                          f"takes whatever matches in the working tree): {stray}; remove them, or "
                          "git add them if they belong in the release")
    return sorted(relative)


def untracked(relative: set[str], root: Path) -> list[str]:
    """The members of an sdist built from a git checkout that git does not track (setuptools'
    own PKG-INFO, setup.cfg and egg-info aside). Outside a checkout there is nothing to ask."""
    if not (root / ".git").exists():
        return []
    if shutil.which("git") is None:
        raise CheckFailed(f"{root} is a git checkout but git is not installed: it is needed to "
                          "check that the sdist holds only tracked files")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
    tracked = set(listed.stdout.decode("utf-8").split("\0"))
    return sorted(m for m in relative if m not in tracked and m not in SDIST_GENERATED
                  and not m.startswith(("loaderx.egg-info/", SDIST_VENDORED)))


def read_member(archive: tarfile.TarFile, name: str) -> bytes:
    """A regular file's bytes from the archive, or b"" when it holds no such file."""
    try:
        extracted = archive.extractfile(name)
    except KeyError:
        return b""
    return extracted.read() if extracted is not None else b""
