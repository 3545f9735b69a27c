"""The asv dashboard without a network: its JavaScript and CSS come from the npm registry.

asv 0.6.6's pages load jQuery, flot, bootstrap and three small plugins from public CDNs, so on a
machine without internet access they show only asv's "external dependencies failed to load"
page. After `asv publish`, `localize()` fetches the same libraries as npm packages (pinned by
version and by the registry's sha512 integrity, like zstd's sources; cached in .cache/npm, never
committed), unpacks the files the pages use into `<html>/vendor/` and points every page at them.

`check()` opens the published dashboard in headless Chromium through a loopback HTTP server (the
pages read their JSON with XHR, which file:// forbids) and saves screenshots of the summary grid
and of one graph page; it fails unless the graph page draws its lines.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import re
import shutil
import socketserver
import subprocess
import tarfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Asset:
    """One file a page loads: its CDN address in asv's HTML and where the npm package has it."""

    url: str
    package: str
    version: str
    member: str


# sha512 integrity of each package tarball, as the npm registry publishes it (`npm view
# NAME@VERSION dist.integrity`).
INTEGRITY: dict[str, str] = {
    "jquery@3.3.1": "sha512-Ubldcmxp5np52/ENotGxlLe6aGMvmF4R8S6tZjsP6Knsaxd/xp3Zrh50cG93lR6nPXyUFwzN3ZSOQI0wRJNdGg==",
    "flot@0.8.3": "sha512-xg2otcTJDvS+ERK+my4wxG/ASq90QURXtoM4LhacCq0jQW2jbyjdttbRNqU2cPykrpMvJ6b2uSp6SAgYAzj9tQ==",
    "flot-orderbars@1.0.0": "sha512-Jv51fvzevUjNXEeozpwEKfPjhiZhfiJddv0WHjduUTCmSF+7T5K7C9c9Y1wIVmUhDBv5fLMjgbwKecT0GIKPZA==",
    "stupid-table-plugin@1.1.3": "sha512-2Vk7XouQPxUQPRe9w0Fu7ZZ8kHLK7rDoLMsCgtKxRNJ7f4dSOGvW9CkHsq5wD6QsaEnWoyLBYH3xOEsrK3yWBg==",
    "blueimp-md5@2.19.0": "sha512-DRQrD6gJyy8FbiE4s+bDoXS9hiW3Vbx5uCdwvcCf3zLHL+Iv7LtGHLpr+GZV8rHG8tK766FGYBwRbu8pELTt+w==",
    "bootstrap@3.1.1": "sha512-TAzqS8E/ISpVHP29gYhy+1NSV+FJwApDVQhDfgLYsIuUDJiqJzH2DfORN5tiu+Ie2iBLrzEG34t4Rf465cigqg==",
}

CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
JSDELIVR = "https://cdn.jsdelivr.net/npm"

# stupidtable 1.0.1 was never published to npm; 1.1.3 (its only npm release) keeps the same
# jQuery plugin call that asv makes.
ASSETS: tuple[Asset, ...] = (
    Asset("https://code.jquery.com/jquery-3.3.1.min.js", "jquery", "3.3.1", "dist/jquery.min.js"),
    Asset(f"{CDNJS}/flot/0.8.3/jquery.flot.min.js", "flot", "0.8.3", "jquery.flot.js"),
    Asset(f"{CDNJS}/flot/0.8.3/jquery.flot.time.min.js", "flot", "0.8.3", "jquery.flot.time.js"),
    Asset(f"{CDNJS}/flot/0.8.3/jquery.flot.selection.min.js", "flot", "0.8.3",
          "jquery.flot.selection.js"),
    Asset(f"{CDNJS}/flot/0.8.3/jquery.flot.categories.min.js", "flot", "0.8.3",
          "jquery.flot.categories.js"),
    Asset(f"{JSDELIVR}/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js", "flot-orderbars",
          "1.0.0", "js/jquery.flot.orderBars.js"),
    Asset(f"{CDNJS}/stupidtable/1.0.1/stupidtable.min.js", "stupid-table-plugin", "1.1.3",
          "stupidtable.min.js"),
    Asset(f"{CDNJS}/blueimp-md5/2.19.0/js/md5.min.js", "blueimp-md5", "2.19.0", "js/md5.min.js"),
    Asset(f"{JSDELIVR}/bootstrap@3.1.1/dist/js/bootstrap.min.js", "bootstrap", "3.1.1",
          "dist/js/bootstrap.min.js"),
    Asset(f"{JSDELIVR}/bootstrap@3.1.1/dist/css/bootstrap.min.css", "bootstrap", "3.1.1",
          "dist/css/bootstrap.min.css"),
)

# bootstrap.min.css refers to its icon font by a relative path (../fonts/).
EXTRA_MEMBERS: dict[str, tuple[str, ...]] = {
    "bootstrap@3.1.1": tuple(f"dist/fonts/glyphicons-halflings-regular.{ext}"
                             for ext in ("eot", "svg", "ttf", "woff")),
}


def log(message: str) -> None:
    print(f"[dashboard] {message}", flush=True)


def integrity_of(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch(spec: str, cache: Path) -> Path:
    """The package tarball for NAME@VERSION, from the npm registry once, checked every time."""
    name, version = spec.rsplit("@", 1)
    tarball = cache / f"{name}-{version}.tgz"
    if not tarball.exists():
        cache.mkdir(parents=True, exist_ok=True)
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed to fetch the dashboard's JavaScript (apt-get install npm)")
        subprocess.run([npm, "pack", spec, "--silent", "--pack-destination", str(cache)],
                       check=True, stdout=subprocess.DEVNULL)
    found = integrity_of(tarball)
    if found != INTEGRITY[spec]:
        tarball.unlink()
        raise SystemExit(f"{spec}: the tarball's integrity is {found}, expected {INTEGRITY[spec]}")
    return tarball


def unpack(tarball: Path, members: set[str], destination: Path) -> None:
    with tarfile.open(tarball) as archive:
        for member in members:
            source = archive.extractfile(f"package/{member}")
            if source is None:
                raise SystemExit(f"{tarball.name} has no file package/{member}")
            target = destination / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())


def vendor_path(asset: Asset) -> str:
    return f"vendor/{asset.package}-{asset.version}/{asset.member}"


def rewrite(page: str) -> str:
    """Points every CDN tag at its local copy; drops the CDN's integrity/crossorigin attributes
    (the local files are the packages' own builds, not the CDN's byte-identical minified ones)."""
    for asset in ASSETS:
        attribute = "href" if asset.member.endswith(".css") else "src"
        tag = re.compile(rf'{attribute}="{re.escape(asset.url)}"'
                         r'(\s+integrity="[^"]*")?(\s+crossorigin="[^"]*")?'
                         r'(\s+referrerpolicy="[^"]*")?')
        page = tag.sub(f'{attribute}="{vendor_path(asset)}"', page)
    return page


def localize(html_dir: Path, cache: Path) -> None:
    """Makes the published dashboard in html_dir work without a network."""
    wanted: dict[str, set[str]] = {}
    for asset in ASSETS:
        wanted.setdefault(f"{asset.package}@{asset.version}", set()).add(asset.member)
    for spec, extra in EXTRA_MEMBERS.items():
        wanted[spec].update(extra)
    for spec, members in wanted.items():
        name, version = spec.rsplit("@", 1)
        unpack(fetch(spec, cache), members, html_dir / "vendor" / f"{name}-{version}")
    pages = sorted(html_dir.glob("*.html"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        page.write_text(rewrite(text), encoding="utf-8")
    remaining = [p.name for p in pages if "cdn" in p.read_text(encoding="utf-8").lower()]
    if remaining:
        raise SystemExit(f"pages still load from a CDN: {remaining}")
    log(f"{len(pages)} pages now load {len(ASSETS)} libraries from {html_dir / 'vendor'}")


# --- checking it in a browser --------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        del format, args


def serve(directory: Path) -> tuple[socketserver.TCPServer, str]:
    """A loopback HTTP server for directory, on a free port, in a daemon thread."""

    def handler(*args: object, **kwargs: object) -> _QuietHandler:
        return _QuietHandler(*args, directory=str(directory), **kwargs)  # type: ignore[arg-type]

    server = socketserver.TCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise SystemExit("headless Chromium is needed for --check (apt-get install -y chromium)")


CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--virtual-time-budget=15000",
)


def screenshot(url: str, path: Path, profile: Path, size: tuple[int, int]) -> None:
    subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                    f"--window-size={size[0]},{size[1]}", f"--screenshot={path}", url],
                   check=True, capture_output=True, timeout=120)
    if not path.exists():
        raise SystemExit(f"Chromium wrote no screenshot of {url}")


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB(A) rows of an 8-bit PNG (all that Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    position, idat, width, height, channels = 8, b"", 0, 0, 0
    while position < len(data):
        length = int.from_bytes(data[position:position + 4], "big")
        kind = data[position + 4:position + 8]
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            width, height = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
            assert body[8] == 8 and body[9] in (2, 6), "only 8-bit RGB/RGBA PNGs are read"
            channels = 3 if body[9] == 2 else 4
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        filter_type = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if filter_type == 1:
                line[x] = (line[x] + left) & 0xFF
            elif filter_type == 2:
                line[x] = (line[x] + up) & 0xFF
            elif filter_type == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif filter_type == 4:
                estimate = left + up - corner
                pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[x] = (line[x] + best) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, [bytes(r[i] for i in range(len(r)) if i % channels < 3) for r in rows]


def colored_pixels(path: Path) -> int:
    """Pixels of strong colour (plotted lines and markers; the page chrome is gray and white)."""
    _, _, rows = png_pixels(path)
    count = 0
    for row in rows:
        for i in range(0, len(row), 3):
            r, g, b = row[i], row[i + 1], row[i + 2]
            if max(r, g, b) - min(r, g, b) > 90:
                count += 1
    return count


LINE_PIXELS_MIN = 1500


def check(html_dir: Path, out_dir: Path, graph: str) -> tuple[Path, Path]:
    """Screenshots of the grid and of the graph page of `graph`; fails on a blank plot."""
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = out_dir / "chromium-profile"
    shutil.rmtree(profile, ignore_errors=True)
    server, base = serve(html_dir)
    try:
        grid = out_dir / "dashboard-grid.png"
        page = out_dir / "dashboard-graph.png"
        screenshot(f"{base}/index.html", grid, profile, (1200, 900))
        screenshot(f"{base}/index.html#{graph}", page, profile, (1200, 800))
    finally:
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    grid_colour, page_colour = colored_pixels(grid), colored_pixels(page)
    log(f"grid: {grid} ({grid_colour} coloured pixels); graph: {page} ({page_colour})")
    # A plotted line across a graph is thousands of coloured pixels; markers of a single commit,
    # the legend's swatches and the page's links come to well under a thousand.
    if page_colour < LINE_PIXELS_MIN:
        raise SystemExit(f"the graph page of {graph} shows no plotted lines ({page_colour} "
                         f"coloured pixels; a line needs results of at least two commits on main); see {page}")
    if grid_colour < LINE_PIXELS_MIN:
        raise SystemExit(f"the summary grid shows no thumbnails ({grid_colour} coloured "
                         f"pixels); see {grid}")
    return grid, page
