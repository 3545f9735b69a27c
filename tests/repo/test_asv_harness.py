"""The asv harness: the offline dashboard's asset rewriting and fetching, the screenshot check's
PNG reading, and the interpreter plan (free-threaded environments included)."""

from __future__ import annotations

import importlib.util
import shutil
import struct
import zlib
from pathlib import Path

from benchmarks import asv_noise, dashboard, run_asv

ROOT = Path(__file__).resolve().parents[2]


def asv_www() -> Path:
    spec = importlib.util.find_spec("asv")
    assert spec is not None and spec.origin is not None, "asv is part of the test environment"
    return Path(spec.origin).parent / "www"


def test_every_cdn_address_in_asv_pages_has_a_pinned_local_copy() -> None:
    for page in sorted(asv_www().glob("*.html")):
        rewritten = dashboard.rewrite(page.read_text(encoding="utf-8"))
        assert "cdn" not in rewritten.lower() and "code.jquery.com" not in rewritten, page.name
        assert "integrity=" not in rewritten, page.name
    index = dashboard.rewrite((asv_www() / "index.html").read_text(encoding="utf-8"))
    for asset in dashboard.ASSETS:
        assert dashboard.vendor_path(asset) in index
    assert {f"{a.package}@{a.version}" for a in dashboard.ASSETS} == set(dashboard.INTEGRITY)


def test_localize_fetches_verified_packages_and_points_pages_at_them(tmp_path: Path) -> None:
    html = tmp_path / "html"
    shutil.copytree(asv_www(), html)
    dashboard.localize(html, tmp_path / "npm")
    for asset in dashboard.ASSETS:
        assert (html / dashboard.vendor_path(asset)).stat().st_size > 1000, asset
    assert (html / "vendor/bootstrap-3.1.1/dist/fonts/glyphicons-halflings-regular.woff").exists()
    assert "cdn" not in (html / "index.html").read_text(encoding="utf-8").lower()
    # A tarball that does not match its pinned integrity is refused and removed.
    tarball = tmp_path / "npm" / "jquery-3.3.1.tgz"
    tarball.write_bytes(b"tampered")
    try:
        dashboard.fetch("jquery@3.3.1", tmp_path / "npm")
    except SystemExit as refusal:
        assert "integrity" in str(refusal)
    else:
        raise AssertionError("a tampered tarball was accepted")
    assert not tarball.exists()


def png(width: int, height: int, pixel: tuple[int, int, int], filter_type: int) -> bytes:
    """An RGB PNG whose every row uses filter_type (1 = Sub, 2 = Up) to encode one colour."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    rows = b""
    for y in range(height):
        if filter_type == 1:
            line = bytes(pixel) + bytes(3 * (width - 1))  # later pixels: difference 0
        else:
            line = bytes(pixel) * width if y == 0 else bytes(3 * width)
        rows += bytes([filter_type if (filter_type == 1 or y > 0) else 0]) + line
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def test_screenshot_reader_decodes_filtered_rows_and_counts_colour(tmp_path: Path) -> None:
    for filter_type in (1, 2):
        path = tmp_path / f"f{filter_type}.png"
        path.write_bytes(png(7, 5, (220, 40, 30), filter_type))
        width, height, rows = dashboard.png_pixels(path)
        assert (width, height) == (7, 5)
        assert all(row == bytes((220, 40, 30)) * 7 for row in rows)
        assert dashboard.colored_pixels(path) == 35
    gray = tmp_path / "gray.png"
    gray.write_bytes(png(4, 4, (128, 128, 128), 2))
    assert dashboard.colored_pixels(gray) == 0


def test_asv_plan_names_every_interpreter_including_free_threaded() -> None:
    plan = run_asv.plan_run(["3.11", "3.13", "3.14", "3.14t"], 2, None, False)
    assert plan[:3] == ["run", "--show-stderr", "HEAD~2..HEAD"]
    assert plan[3:] == ["-E", "virtualenv:3.11", "-E", "virtualenv:3.13",
                        "-E", "virtualenv:3.14", "-E", "virtualenv:3.14t"]
    compare = run_asv.plan_compare("main", ["3.11", "3.14t"], "Gather")
    assert compare[:4] == ["continuous", "--show-stderr", "--factor", "1.5"]
    assert compare[-4:] == ["main", "HEAD", "--bench", "Gather"]
    assert "virtualenv:3.14t" not in compare  # one interpreter is enough to judge a regression


def test_noise_check_reads_the_benchmarks_asv_compare_flags() -> None:
    output = """
Benchmarks that have stayed the same:

| Change   | Before [a9cadb13]   | After [459dd212]   |   Ratio | Benchmark (Parameter)                  |
|----------|---------------------|--------------------|---------|----------------------------------------|
|          | 552+-50us           | 653+-100us         |    1.18 | bench_store.Gather.time_getitem('raw') |

Benchmarks that have got worse:

| Change   | Before [a9cadb13]   | After [459dd212]   |   Ratio | Benchmark (Parameter)                   |
|----------|---------------------|--------------------|---------|-----------------------------------------|
| +        | 3.93+-0.3ms         | 6.59+-0.1ms        |    1.68 | bench_store.Gather.time_getitem('zstd') |
"""
    assert asv_noise.flagged(output) == ["bench_store.Gather.time_getitem('zstd')"]
    assert asv_noise.flagged(output.split("Benchmarks that have got worse")[0]) == []
