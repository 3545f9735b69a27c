"""The C ABI agrees with itself: zig/include/loaderx.h, loaderx/_native.py and the built library.

Statuses, flags, sampler modes and limits are written in the header, in Zig and in Python; this
test parses the header and compares it with _native.py's constants, its exception table and
signature table, and with what the library itself answers (status names, the ABI version, the
size of lx_stats). zig/src/c_abi/abi_test.zig does the same between the header and the Zig sources.
Everything is derived from the header, so a status or function added there is checked too.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import pytest

from loaderx._native import library as _native
from loaderx._store import zrecord
from loaderx._store.schema import Codec

HEADER = Path(__file__).resolve().parents[2] / "zig" / "include" / "loaderx.h"


def header_text() -> str:
    """The header without comments."""
    text = HEADER.read_text()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def header_statuses() -> dict[str, int]:
    body = re.search(r"typedef enum lx_status \{(.*?)\} lx_status;", header_text(), re.DOTALL)
    assert body, "loaderx.h has no lx_status enum"
    found = dict(
        (name, int(value)) for name, value in re.findall(r"(LX_\w+)\s*=\s*(\d+)", body.group(1))
    )
    assert found, "no statuses parsed from loaderx.h"
    return found


def header_defines() -> dict[str, int]:
    return {
        name: int(value, 0)
        for name, value in re.findall(r"#define\s+(LX_\w+)\s+(0x[0-9a-fA-F]+|\d+)[uUlL]*\b", header_text())
    }


def header_struct(name: str) -> list[tuple[str, str]]:
    """(C type, field name) of each field; a pointer's type ends with its star."""
    body = re.search(rf"typedef struct {name} \{{(.*?)\}} {name};", header_text(), re.DOTALL)
    assert body, f"loaderx.h has no struct {name}"
    fields = re.findall(r"(\w+)\s*(\*?)\s*(\w+)\s*;", body.group(1))
    return [(c_type + star, field) for c_type, star, field in fields]


def header_prototypes() -> dict[str, tuple[str, list[str]]]:
    """name -> (return type, parameter types) for every lx_* function in the header."""
    text = "\n".join(l for l in header_text().splitlines() if not l.lstrip().startswith("#"))
    found: dict[str, tuple[str, list[str]]] = {}
    for ret, name, params in re.findall(r"([\w\s\*]+?)\s*\b(lx_\w+)\s*\(([^)]*)\)\s*;", text):
        kinds = [] if params.strip() in ("", "void") else [
            re.sub(r"\s*\b\w+$", "", p.strip()) if not p.strip().endswith("*") else p.strip()
            for p in params.split(",")
        ]
        found[name] = (" ".join(ret.split()), [" ".join(k.split()) for k in kinds])
    assert found, "no prototypes parsed from loaderx.h"
    return found


_INTEGERS: dict[str, Any] = {
    "uint8_t": ctypes.c_uint8,
    "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64,
    "int64_t": ctypes.c_int64,
    "int": ctypes.c_int,
    "lx_status": ctypes.c_int,
}


def _agrees(c_type: str, declared: Any) -> bool:
    """Whether a ctypes declaration passes/returns what the C type says (size and kind)."""
    if "*" in c_type:
        if declared in (ctypes.c_void_p, ctypes.c_char_p):
            return True
        return isinstance(declared, type) and issubclass(declared, ctypes._Pointer)
    if c_type == "void":
        return declared is None
    if c_type == "lx_maintenance_check":  # a function pointer: the CFUNCTYPE of _native
        return declared is _native.MaintenanceCheck
    expected = _INTEGERS.get(c_type)
    assert expected is not None, f"the test does not know the C type {c_type!r}: add it"
    return declared is not None and ctypes.sizeof(declared) == ctypes.sizeof(expected) and (
        declared(-1).value < 0) == (expected(-1).value < 0)


def test_statuses_agree_in_header_python_and_library() -> None:
    statuses = header_statuses()
    count = statuses.pop("LX_STATUS_COUNT")
    assert sorted(statuses.values()) == list(range(count)), "statuses must be 0..count-1"
    for name, value in statuses.items():
        python_name = name.removeprefix("LX_")
        assert getattr(_native, python_name, None) == value, f"_native.{python_name} != {value}"
        assert _native.lib.lx_status_name(value).decode() == name
        if value != _native.OK:
            assert value in _native._EXCEPTIONS, f"{name} has no exception class in _native"
    assert _native.lib.lx_status_name(count) == b"unknown"
    assert _native.lib.lx_status_name(-1) == b"unknown"
    # And no status in Python that the header lacks.
    assert set(_native._EXCEPTIONS) <= set(statuses.values())


def test_defines_agree_with_python_constants() -> None:
    defines = header_defines()
    for expected in ("LX_OPEN_CREATE", "LX_SAMPLER_IID", "LX_RECORD_SIZE_MAX", "LX_RECORD_COUNT_MAX"):
        assert expected in defines, f"{expected} not parsed from loaderx.h"
    for name, value in defines.items():
        python_name = name.removeprefix("LX_")
        holders = [m for m in (_native, zrecord) if hasattr(m, python_name)]
        assert holders, f"{name} has no Python constant {python_name} in _native or zrecord"
        for module in holders:
            assert getattr(module, python_name) == value, f"{module.__name__}.{python_name}"


def test_lx_stats_agrees_with_the_ctypes_mirror() -> None:
    fields = header_struct("lx_stats")
    mirror: list[tuple[str, Any]] = [(field[0], field[1]) for field in _native.Stats._fields_]
    assert [name for _, name in fields] == [name for name, _ in mirror]
    for (c_type, name), (_, declared) in zip(fields, mirror):
        assert _agrees(c_type, declared), f"lx_stats.{name}: {c_type} vs {declared}"
    assert ctypes.sizeof(_native.Stats) == 8 * len(fields)


def test_lx_sampler_request_agrees_with_the_ctypes_mirror() -> None:
    fields = header_struct("lx_sampler_request")
    mirror: list[tuple[str, Any]] = [(f[0], f[1]) for f in _native.SamplerRequest._fields_]
    assert [name for _, name in fields] == [name for name, _ in mirror]
    for (c_type, name), (_, declared) in zip(fields, mirror):
        assert _agrees(c_type, declared), f"lx_sampler_request.{name}: {c_type} vs {declared}"


def test_lx_gather_stream_agrees_with_the_ctypes_mirror() -> None:
    fields = header_struct("lx_gather_stream")
    mirror: list[tuple[str, Any]] = [(f[0], f[1]) for f in _native.GatherStream._fields_]
    assert [name for _, name in fields] == [name for name, _ in mirror]
    assert [c_type for c_type, _ in fields] == ["lx_store*", "uint8_t*", "uint64_t", "uint64_t"]
    for (c_type, name), (_, declared) in zip(fields, mirror):
        assert _agrees(c_type, declared), f"lx_gather_stream.{name}: {c_type} vs {declared}"
    assert ctypes.sizeof(_native.GatherStream) == 32


def test_lx_array_facts_agrees_with_the_ctypes_mirror() -> None:
    fields = header_struct("lx_array_facts")
    mirror: list[tuple[str, Any]] = [(f[0], f[1]) for f in _native.ArrayFacts._fields_]
    assert [name for _, name in fields] == [name for name, _ in mirror]
    for (c_type, name), (_, declared) in zip(fields, mirror):
        assert _agrees(c_type, declared), f"lx_array_facts.{name}: {c_type} vs {declared}"


@pytest.mark.parametrize(
    ("c_name", "mirror"),
    [("lx_verify_problem", _native.VerifyProblem), ("lx_verify_summary", _native.VerifySummary)],
)
def test_lx_verify_structs_agree_with_their_ctypes_mirrors(c_name: str, mirror: Any) -> None:
    fields = header_struct(c_name)
    declared: list[tuple[str, Any]] = [(f[0], f[1]) for f in mirror._fields_]
    assert [name for _, name in fields] == [name for name, _ in declared]
    for (c_type, name), (_, field_type) in zip(fields, declared):
        assert _agrees(c_type, field_type), f"{c_name}.{name}: {c_type} vs {field_type}"
    assert ctypes.sizeof(mirror) == sum(8 if c == "uint64_t" else 4 for c, _ in fields)


def test_python_codec_tags_are_the_ones_the_library_writes_to_the_table(tmp_path: Path) -> None:
    # The tags have no define in loaderx.h: what pins Python's names to the library's enum is the
    # codec byte of each table entry (meta.zr: a 16-byte header, then 16-byte entries whose
    # byte 14 is the codec).
    samples = [bytes([i % 7]) * 64 for i in range(64)]
    with zrecord.Zrecord(tmp_path / "s", create=True) as store:
        store.train_dict(samples, 1024)
        names: tuple[Codec, ...] = ("raw", "zstd", "zstd_dict")
        assert names == tuple(zrecord.CODECS)
        for name in names:
            store.append([b"abc" * 50], codec=name)
        assert store.gather([0, 1, 2]) == [b"abc" * 50] * 3
    table = (tmp_path / "s" / "meta.zr").read_bytes()[16:]
    written = [table[16 * i + 14] for i in range(len(names))]
    assert written == list(zrecord.CODECS.values()) == [0, 1, 2]


def test_every_stats_byte_is_written_and_no_more(tmp_path: Path) -> None:
    # The library's view of lx_stats: it fills the struct and does not write past it.
    with zrecord.Zrecord(str(tmp_path / "s"), create=True) as store:
        store.append([b"abc", b"defg"])
        size = ctypes.sizeof(_native.Stats)
        buffer = (ctypes.c_uint8 * (size + 16))(*([0xEE] * (size + 16)))
        mark = object()
        try:
            handle = store._enter(mark)
            code = _native.lib.lx_store_stats(handle, ctypes.cast(buffer, ctypes.POINTER(_native.Stats)))
        finally:
            store._marks.discard(mark)
        assert code == _native.OK
        stats = _native.Stats.from_buffer(buffer)
        assert (stats.records, stats.live_bytes) == (2, 7)
        assert bytes(buffer[size:]) == b"\xee" * 16


@pytest.mark.parametrize("name", sorted(header_prototypes()))
def test_every_prototype_agrees_with_its_ctypes_declaration(name: str) -> None:
    ret, params = header_prototypes()[name]
    function = getattr(_native.lib, name)
    if function.argtypes is None:
        # Called untyped on purpose: ctypes passes an int as a C int, which only a uint32_t
        # parameter reads right (array_fields.py checks the rest at import).
        assert name in _native.UNTYPED_CALLS, f"{name} has no argtypes"
        assert all(p == "uint32_t" or p.endswith("*") for p in params), f"{name}: {params}"
        assert _agrees(ret.replace("const ", ""), function.restype), f"{name} returns {ret}"
        return
    argtypes = function.argtypes
    assert len(argtypes) == len(params), f"{name}: {len(params)} parameters in the header"
    for position, (c_type, declared) in enumerate(zip(params, argtypes)):
        assert _agrees(c_type, declared), f"{name} parameter {position}: {c_type} vs {declared}"
    assert _agrees(ret.replace("const ", ""), function.restype), f"{name} returns {ret}"


def test_every_untyped_call_is_in_the_header_and_every_array_gather_is_untyped() -> None:
    # The fast paths' gathers (lx_*_gather_arrays, lx_*_gather_packed_arrays) take NumPy
    # fields in halves: declared untyped, each with the status as its restype; the parameters
    # are checked against the header by the test above.
    prototypes = header_prototypes()
    assert _native.UNTYPED_CALLS <= set(prototypes)
    gathers = {name for name in prototypes if name.endswith("_arrays")}
    assert gathers == {f"lx_{noun}_{call}_arrays" for noun in ("store", "view")
                       for call in ("gather", "gather_packed")}
    assert gathers <= _native.UNTYPED_CALLS
    for name in gathers:
        assert getattr(_native.lib, name).restype is ctypes.c_int, name
        assert prototypes[name][0] == "lx_status", name


def test_the_abi_version_the_library_reports_is_the_one_python_wants() -> None:
    assert _native.lib.lx_abi_version() == _native.ABI_VERSION
