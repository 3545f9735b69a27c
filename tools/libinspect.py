"""Reads what a shared library exports and needs, for ELF, Mach-O and PE, without external tools.

The wheel checks use it to prove that each platform's library is the platform it claims (format
and CPU), exports exactly the C ABI of zig/include/loaderx.h and nothing of zstd's, and asks the
loader for no more than its wheel tag promises (glibc symbol versions, macOS deployment target).
Only the 64-bit little-endian flavours are understood: every published platform is one.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final


class FormatError(ValueError):
    """The bytes are not a library this module understands, or are truncated."""


@dataclass(frozen=True)
class LibraryInfo:
    """What the checks need to know about one shared library."""

    format: str  # "elf", "macho" or "pe"
    arch: str  # "x86_64" or "aarch64"
    exports: frozenset[str]  # exported symbol names, without Mach-O's leading underscore
    needed: tuple[str, ...]  # libraries the loader must find (DT_NEEDED, LC_LOAD_DYLIB, imports)
    symbol_versions: frozenset[str]  # ELF only: versions required, e.g. "GLIBC_2.14"
    macos_min: tuple[int, int] | None  # Mach-O only: the deployment target (major, minor)


def inspect_file(path: Path) -> LibraryInfo:
    return inspect_bytes(path.read_bytes())


def inspect_bytes(data: bytes) -> LibraryInfo:
    if data[:4] == b"\x7fELF":
        return _Elf(data).info()
    if data[:4] == b"\xcf\xfa\xed\xfe":
        return _MachO(data).info()
    if data[:2] == b"MZ":
        return _Pe(data).info()
    raise FormatError(f"unknown binary format (first bytes {data[:4]!r})")


def glibc_floor(info: LibraryInfo) -> tuple[int, int]:
    """The oldest glibc that provides every GLIBC_x.y version the library asks for."""
    floor = (2, 0)
    for version in info.symbol_versions:
        found = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", version)
        if found:
            floor = max(floor, (int(found.group(1)), int(found.group(2))))
    return floor


def header_functions(header_text: str) -> frozenset[str]:
    """The function names declared by a C header (comments and macros ignored)."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    # A typedef declares no function, though a function pointer's reads like one: int (*f)(...).
    text = re.sub(r"\btypedef\b[^;]*;", " ", text)
    return frozenset(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text)) - {"sizeof"}


def _cstring(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset < 0 or end < 0:
        raise FormatError(f"string at {offset} runs past the end of the file")
    return data[offset:end].decode("utf-8", "replace")


def _unpack(fmt: str, data: bytes, offset: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from("<" + fmt, data, offset)
    except struct.error as exc:
        raise FormatError(f"truncated file: {fmt} at offset {offset}") from exc


# --- ELF ------------------------------------------------------------------------------------

ELF_MACHINES: Final = {62: "x86_64", 183: "aarch64"}
SHT_DYNAMIC: Final = 6
SHT_DYNSYM: Final = 11
SHT_GNU_VERNEED: Final = 0x6FFFFFFE
STB_GLOBAL: Final = 1
STB_WEAK: Final = 2
STV_DEFAULT: Final = 0
STV_PROTECTED: Final = 3
DT_NEEDED: Final = 1


@dataclass(frozen=True)
class _Section:
    kind: int
    offset: int
    size: int
    link: int
    info: int


class _Elf:
    def __init__(self, data: bytes) -> None:
        if data[4] != 2 or data[5] != 1:
            raise FormatError("only 64-bit little-endian ELF is supported")
        self.data = data
        (machine,) = _unpack("H", data, 18)
        if machine not in ELF_MACHINES:
            raise FormatError(f"unexpected ELF machine {machine}")
        self.arch = ELF_MACHINES[machine]
        (shoff,) = _unpack("Q", data, 0x28)
        shentsize, shnum = _unpack("HH", data, 0x3A)
        self.sections = []
        for index in range(shnum):
            _, kind, _, _, offset, size, link, info = _unpack("IIQQQQII", data, shoff + index * shentsize)
            self.sections.append(_Section(kind, offset, size, link, info))

    def info(self) -> LibraryInfo:
        return LibraryInfo("elf", self.arch, self._exports(), self._needed(),
                           self._versions(), None)

    def _of_kind(self, kind: int) -> list[_Section]:
        return [s for s in self.sections if s.kind == kind]

    def _exports(self) -> frozenset[str]:
        names = set()
        for dynsym in self._of_kind(SHT_DYNSYM):
            strtab = self.sections[dynsym.link].offset
            for offset in range(dynsym.offset + 24, dynsym.offset + dynsym.size, 24):
                name, info, other, shndx = _unpack("IBBH", self.data, offset)
                bind, visibility = info >> 4, other & 3
                if shndx == 0 or bind not in (STB_GLOBAL, STB_WEAK):
                    continue
                if visibility in (STV_DEFAULT, STV_PROTECTED):
                    names.add(_cstring(self.data, strtab + name))
        return frozenset(names)

    def _needed(self) -> tuple[str, ...]:
        found: list[str] = []
        for dynamic in self._of_kind(SHT_DYNAMIC):
            strtab = self.sections[dynamic.link].offset
            for offset in range(dynamic.offset, dynamic.offset + dynamic.size, 16):
                tag, value = _unpack("qQ", self.data, offset)
                if tag == DT_NEEDED:
                    found.append(_cstring(self.data, strtab + value))
        return tuple(found)

    def _versions(self) -> frozenset[str]:
        found = set()
        for verneed in self._of_kind(SHT_GNU_VERNEED):
            strtab = self.sections[verneed.link].offset
            entry = verneed.offset
            for _ in range(verneed.info):
                _, count, _, aux, next_entry = _unpack("HHIII", self.data, entry)
                aux_entry = entry + aux
                for _ in range(count):
                    _, _, _, name, next_aux = _unpack("IHHII", self.data, aux_entry)
                    found.add(_cstring(self.data, strtab + name))
                    aux_entry += next_aux
                entry += next_entry
        return frozenset(found)


# --- Mach-O ---------------------------------------------------------------------------------

MACHO_CPUS: Final = {0x01000007: "x86_64", 0x0100000C: "aarch64"}
LC_SYMTAB: Final = 0x2
LC_LOAD_DYLIB: Final = 0xC
LC_DYLD_INFO: Final = 0x22
LC_DYLD_INFO_ONLY: Final = 0x80000022
LC_DYLD_EXPORTS_TRIE: Final = 0x80000033
LC_VERSION_MIN_MACOSX: Final = 0x24
LC_BUILD_VERSION: Final = 0x32
LC_REEXPORT_DYLIB: Final = 0x8000001F
EXPORT_SYMBOL_FLAGS_REEXPORT: Final = 0x08
EXPORT_SYMBOL_FLAGS_STUB_AND_RESOLVER: Final = 0x10


def _uleb128(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(data):
            raise FormatError("ULEB128 runs past the end of the file")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, offset


class _MachO:
    def __init__(self, data: bytes) -> None:
        self.data = data
        cputype, _, filetype, ncmds = _unpack("IIII", data, 4)
        if cputype not in MACHO_CPUS:
            raise FormatError(f"unexpected Mach-O CPU type {cputype:#x}")
        if filetype != 6:
            raise FormatError(f"Mach-O file type {filetype} is not a dylib (6)")
        self.arch = MACHO_CPUS[cputype]
        self.commands: list[tuple[int, int]] = []  # (cmd, offset of the command)
        offset = 32
        for _ in range(ncmds):
            cmd, size = _unpack("II", data, offset)
            self.commands.append((cmd, offset))
            offset += size

    def info(self) -> LibraryInfo:
        needed: list[str] = []
        trie: tuple[int, int] | None = None
        minimum: tuple[int, int] | None = None
        for cmd, at in self.commands:
            if cmd in (LC_LOAD_DYLIB, LC_REEXPORT_DYLIB):
                (name,) = _unpack("I", self.data, at + 8)
                needed.append(_cstring(self.data, at + name))
            elif cmd in (LC_DYLD_INFO, LC_DYLD_INFO_ONLY):
                export_off, export_size = _unpack("II", self.data, at + 40)
                if export_size:
                    trie = (export_off, export_size)
            elif cmd == LC_DYLD_EXPORTS_TRIE:
                data_offset, data_size = _unpack("II", self.data, at + 8)
                trie = (data_offset, data_size)
            elif cmd == LC_BUILD_VERSION:
                (packed,) = _unpack("I", self.data, at + 12)
                minimum = (packed >> 16, (packed >> 8) & 0xFF)
            elif cmd == LC_VERSION_MIN_MACOSX:
                (packed,) = _unpack("I", self.data, at + 8)
                minimum = (packed >> 16, (packed >> 8) & 0xFF)
        exports = self._trie_exports(*trie) if trie else frozenset[str]()
        return LibraryInfo("macho", self.arch, exports, tuple(needed), frozenset(), minimum)

    def _trie_exports(self, start: int, size: int) -> frozenset[str]:
        """Walks dyld's export trie: the exact set of names another image can bind to."""
        names: set[str] = set()
        pending = [(0, "")]
        while pending:
            node, prefix = pending.pop()
            if node >= size:
                raise FormatError("export trie edge points outside the trie")
            terminal_size, offset = _uleb128(self.data, start + node)
            if terminal_size:
                flags, _ = _uleb128(self.data, offset)
                if not flags & EXPORT_SYMBOL_FLAGS_REEXPORT:
                    names.add(prefix.removeprefix("_"))
            offset += terminal_size
            child_count = self.data[offset]
            offset += 1
            for _ in range(child_count):
                end = self.data.index(b"\0", offset)
                edge = self.data[offset:end].decode("utf-8", "replace")
                child, offset = _uleb128(self.data, end + 1)
                pending.append((child, prefix + edge))
        return frozenset(names)


# --- PE (Windows DLL) -----------------------------------------------------------------------

PE_MACHINES: Final = {0x8664: "x86_64", 0xAA64: "aarch64"}
PE32_PLUS: Final = 0x20B


class _Pe:
    def __init__(self, data: bytes) -> None:
        self.data = data
        (pe_offset,) = _unpack("I", data, 0x3C)
        if data[pe_offset:pe_offset + 4] != b"PE\0\0":
            raise FormatError("MZ file without a PE header")
        coff = pe_offset + 4
        machine, sections, _, _, _, optional_size, _ = _unpack("HHIIIHH", data, coff)
        if machine not in PE_MACHINES:
            raise FormatError(f"unexpected PE machine {machine:#x}")
        self.arch = PE_MACHINES[machine]
        optional = coff + 20
        (magic,) = _unpack("H", data, optional)
        if magic != PE32_PLUS:
            raise FormatError(f"PE optional header magic {magic:#x} is not PE32+")
        (directory_count,) = _unpack("I", data, optional + 108)
        self.directories = [_unpack("II", data, optional + 112 + 8 * i)
                            for i in range(directory_count)]
        table = optional + optional_size
        self.sections = [_unpack("IIII", data, table + 40 * i + 8) for i in range(sections)]

    def _file_offset(self, rva: int) -> int:
        for virtual_size, address, raw_size, raw_offset in self.sections:
            if address <= rva < address + max(virtual_size, raw_size):
                return raw_offset + rva - address
        raise FormatError(f"RVA {rva:#x} is in no section")

    def info(self) -> LibraryInfo:
        return LibraryInfo("pe", self.arch, self._exports(), self._imports(), frozenset(), None)

    def _exports(self) -> frozenset[str]:
        rva, size = self.directories[0] if self.directories else (0, 0)
        if not size:
            return frozenset()
        at = self._file_offset(rva)
        functions, names = _unpack("II", self.data, at + 20)
        (names_rva,) = _unpack("I", self.data, at + 32)
        if functions != names:
            raise FormatError(f"{functions} exports but {names} names: some export by ordinal only")
        table = self._file_offset(names_rva)
        return frozenset(_cstring(self.data, self._file_offset(_unpack("I", self.data, table + 4 * i)[0]))
                         for i in range(names))

    def _imports(self) -> tuple[str, ...]:
        rva, size = self.directories[1] if len(self.directories) > 1 else (0, 0)
        if not size:
            return ()
        found: list[str] = []
        at = self._file_offset(rva)
        while True:
            descriptor = _unpack("IIIII", self.data, at)
            if not any(descriptor):
                return tuple(found)
            found.append(_cstring(self.data, self._file_offset(descriptor[3])))
            at += 20
