"""Reading, re-tagging and writing wheel archives (the zip layout of PEP 427 / PEP 491).

setuptools builds one pure-Python wheel (and one mypyc wheel per interpreter); the tools then
specialise them here: add a platform's library and the licence texts, set the tags, and write
the archive back with a RECORD that matches every file. Archives are reproducible: entries are
sorted with RECORD last, and timestamps come from SOURCE_DATE_EPOCH (else 1980-01-01).
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
import zipfile
from pathlib import Path
from typing import Final

ZIP_EPOCH: Final = 315532800  # 1980-01-01, the oldest time a zip entry can hold


class Wheel:
    """A wheel's files in memory, keyed by archive path."""

    def __init__(self, name: str, version: str, files: dict[str, bytes]) -> None:
        self.name = name
        self.version = version
        self.files = files

    @property
    def dist_info(self) -> str:
        return f"{self.name}-{self.version}.dist-info"

    def text(self, member: str) -> str:
        return self.files[f"{self.dist_info}/{member}"].decode("utf-8")

    def set_text(self, member: str, text: str) -> None:
        self.files[f"{self.dist_info}/{member}"] = text.encode("utf-8")

    def copy(self) -> Wheel:
        return Wheel(self.name, self.version, dict(self.files))


def read_wheel(path: Path) -> Wheel:
    name, version = path.name.split("-")[:2]
    with zipfile.ZipFile(path) as archive:
        files = {info.filename: archive.read(info) for info in archive.infolist()
                 if not info.is_dir()}
    return Wheel(name, version, files)


def tag_string(tags: list[tuple[str, str, str]]) -> str:
    """The file-name form of a tag set: each part's values joined by dots (PEP 425)."""
    parts = []
    for position in range(3):
        values: list[str] = []
        for tag in tags:
            if tag[position] not in values:
                values.append(tag[position])
        parts.append(".".join(values))
    return "-".join(parts)


def wheel_file_name(wheel: Wheel, tags: list[tuple[str, str, str]]) -> str:
    return f"{wheel.name}-{wheel.version}-{tag_string(tags)}.whl"


def set_tags(wheel: Wheel, tags: list[tuple[str, str, str]], root_is_purelib: bool) -> None:
    """Rewrites WHEEL's Tag and Root-Is-Purelib lines, keeping the rest as setuptools wrote it."""
    kept = [line for line in wheel.text("WHEEL").splitlines()
            if line and not line.startswith(("Tag:", "Root-Is-Purelib:"))]
    kept.append(f"Root-Is-Purelib: {'true' if root_is_purelib else 'false'}")
    kept += [f"Tag: {'-'.join(tag)}" for tag in tags]
    wheel.set_text("WHEEL", "\n".join(kept) + "\n\n")


def add_licence(wheel: Wheel, relative: str, text: bytes, expression: str) -> None:
    """Ships one more licence under dist-info/licenses/ and declares it in METADATA (2.4)."""
    wheel.files[f"{wheel.dist_info}/licenses/{relative}"] = text
    header, _, body = wheel.text("METADATA").partition("\n\n")
    lines = [line for line in header.splitlines() if not line.startswith("License-Expression:")]
    lines.append(f"License-File: {relative}")
    lines.append(f"License-Expression: {expression}")
    wheel.set_text("METADATA", "\n".join(lines) + "\n\n" + body)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode('ascii')}"


def record_text(wheel: Wheel) -> str:
    record = f"{wheel.dist_info}/RECORD"
    rows = [f"{path},{_record_hash(data)},{len(data)}"
            for path, data in sorted(wheel.files.items()) if path != record]
    return "\n".join([*rows, f"{record},,"]) + "\n"


def write_wheel(wheel: Wheel, path: Path) -> None:
    """Writes the archive with a fresh RECORD; replaces `path` atomically."""
    record = f"{wheel.dist_info}/RECORD"
    wheel.files[record] = record_text(wheel).encode("utf-8")
    stamp = time.gmtime(max(ZIP_EPOCH, int(os.environ.get("SOURCE_DATE_EPOCH", ZIP_EPOCH))))
    # The package first, then its metadata, RECORD last (as installers expect to find them).
    ordered = sorted((p for p in wheel.files if p != record),
                     key=lambda p: (p.startswith(wheel.dist_info + "/"), p)) + [record]
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for member in ordered:
            info = zipfile.ZipInfo(member, date_time=stamp[:6])
            executable = member.endswith((".so", ".dylib", ".dll", ".pyd"))
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, wheel.files[member])
    os.replace(tmp, path)
