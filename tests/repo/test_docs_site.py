"""The documentation site: it builds with `mkdocs build --strict`, its API pages document exactly
each public module's __all__, and every page renders in headless Chromium with no dead link.

The site is built once per run into a temporary folder (about 2 s). The browser check serves that
folder from a local http.server on 127.0.0.1 and loads every page with `chromium --headless
--dump-dom`, which runs the page's scripts and prints the DOM they leave: a page whose main text is
empty fails, and so does any link, image, stylesheet or script of the site that the server
answers with an error, or whose #fragment names no element of its page. Links to other hosts are
listed in the output and never fetched (the tests run offline). Chromium is Debian's `chromium`
package, which `build.py test` installs when it runs as root; without it the check fails.
"""

from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Final

import pytest

# The repository: the nearest folder above holding pyproject.toml (tests/ may gain subfolders).
ROOT: Final = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
# The public modules, one API page each (docs/api/<last part of the name>.md).
API_MODULES: Final = ["loaderx", "loaderx.zrecord", "loaderx.dataset", "loaderx.converter",
                      "loaderx.dataloader", "loaderx.sampler", "loaderx.mixture", "loaderx.shards",
                      "loaderx.errors", "loaderx.verify", "loaderx.result_buffers",
                      "loaderx.torch", "loaderx.jax", "loaderx.ray"]
CHROMIUM_MISSING: Final = ("headless Chromium is needed to check the documentation site: install "
                           "Debian's package `chromium` (apt-get install chromium; `build.py "
                           "test` does that itself when it runs as root)")
PAGE_TIMEOUT_S: Final = 60.0
BROWSERS_AT_ONCE: Final = 3


def build_site(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(config), "--site-dir", str(site)],
                          cwd=config.parent, env=env, capture_output=True, text=True, check=False)


def assert_built(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout + done.stderr
    warnings = [line for line in output.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, f"mkdocs build --strict failed:\n{output}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    assert_built(build_site(ROOT / "mkdocs.yml", folder))
    return folder


def test_the_site_builds_with_no_warning(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "api" / "dataset" / "index.html").is_file()


# --- the API reference -------------------------------------------------------------------------


def exported_names(module: str) -> set[str] | None:
    """The module's __all__, read from its source without importing it; None when it has none."""
    base = ROOT.joinpath(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return set(ast.literal_eval(value))
    return None


def documented_names(page: Path, module: str) -> set[str]:
    """The names a rendered API page documents at the module's top level (by their anchors)."""
    prefix = re.escape(module) + r"\.([A-Za-z_][A-Za-z0-9_]*)"
    return set(re.findall(rf'id="{prefix}"', page.read_text(encoding="utf-8")))


def api_page(module: str) -> str:
    return module.rsplit(".", 1)[-1]


def test_every_public_module_has_an_api_page() -> None:
    pages = {p.stem for p in (ROOT / "docs" / "api").glob("*.md")} - {"index"}
    assert pages == {api_page(m) for m in API_MODULES}
    for module in API_MODULES:
        text = (ROOT / "docs" / "api" / f"{api_page(module)}.md").read_text(encoding="utf-8")
        assert re.search(rf"^::: {re.escape(module)}$", text, flags=re.MULTILINE), module


@pytest.mark.parametrize("module", API_MODULES)
def test_an_api_page_documents_exactly_the_public_names(site: Path, module: str) -> None:
    documented = documented_names(site / "api" / api_page(module) / "index.html", module)
    exported = exported_names(module)
    if module == "loaderx" and exported is not None:
        # The package's page (docs/api/loaderx.md) names its members: __all__ and __version__.
        exported |= {"__version__"}
    if exported is not None:
        assert documented == exported
    else:
        # No __all__ yet: the module's own names that do not start with an underscore.
        assert documented and not any(name.startswith("_") for name in documented)


def test_a_class_page_shows_what_it_inherits_from_a_private_base(site: Path) -> None:
    """DenseDataset and RaggedDataset keep close, verify, compact and the rest in a private
    shared base; their API page must still list them (mkdocstrings' inherited_members)."""
    page = (site / "api" / "dataset" / "index.html").read_text(encoding="utf-8")
    for cls in ("DenseDataset", "RaggedDataset"):
        members = set(re.findall(rf'id="loaderx\.dataset\.{cls}\.([A-Za-z_]+)"', page))
        assert {"close", "verify", "compact", "delete", "stats", "append", "read"} <= members, cls


def throwaway_repository(folder: Path, files: dict[str, str], nav: list[str]) -> Path:
    """A folder laid out like the repository, with mkdocs.yml and its hooks as they are, holding
    files; returns the config that builds it with the given nav."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    shutil.copyfile(ROOT / "mkdocs.yml", folder / "mkdocs.yml")
    (folder / "tools").mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "tools" / "mkdocs_hooks.py", folder / "tools" / "mkdocs_hooks.py")
    config = folder / "throwaway.yml"
    config.write_text("INHERIT: mkdocs.yml\nnav:\n" + "".join(f"  - {p}\n" for p in nav),
                      encoding="utf-8")
    return config


THROWAWAY: Final = {
    "throwaway/__init__.py": '"""A package shaped like loaderx after its move."""\n',
    "throwaway/_store/__init__.py": '"""Private."""\n',
    "throwaway/_store/records.py": '''"""Private definitions."""
from typing import Any, Final

RECORDS_MAX: Final = 8


class Records:
    """A store of records."""

    def __init__(self, count: int) -> None:
        self.count = count

    def read(self, index: int) -> bytes:
        """One record."""
        return b""

    def _check(self) -> None:
        """Private."""


def helper() -> None:
    """Not exported: must not be documented."""
''',
    "throwaway/_loading/__init__.py": '"""Private."""\n',
    "throwaway/_loading/steps.py": '"""Private."""\n\ndef steps() -> int:\n    """Steps."""\n'
                                   '    return 1\n',
    "throwaway/records.py": '''"""Public: re-exports from private subpackages, in __all__."""
import os

from throwaway._loading.steps import steps
from throwaway._store.records import RECORDS_MAX, Records, helper


def local() -> None:
    """Defined here, not exported: must not be documented."""


__all__ = ["RECORDS_MAX", "Records", "steps"]
''',
    "throwaway/optional.py": '''"""An integration whose package is missing: never imported."""
import not_installed_anywhere

raise RuntimeError("imported by the documentation build")


def adapt() -> None:
    """Adapts."""


__all__ = ["adapt"]
''',
    "docs/records.md": "::: throwaway.records\n",
    "docs/optional.md": "::: throwaway.optional\n",
}


def test_the_api_options_document_names_re_exported_from_private_modules(tmp_path: Path) -> None:
    """The public modules are becoming thin modules over private subpackages: mkdocs.yml's
    options, as they are, shown a package of that shape (built with its own nav)."""
    config = throwaway_repository(tmp_path, THROWAWAY, ["records.md", "optional.md"])
    assert_built(build_site(config, tmp_path / "site"))
    page = tmp_path / "site" / "records" / "index.html"
    assert documented_names(page, "throwaway.records") == {"RECORDS_MAX", "Records", "steps"}
    assert 'id="throwaway.records.Records.read"' in page.read_text(encoding="utf-8")
    assert "_check" not in page.read_text(encoding="utf-8")
    optional = tmp_path / "site" / "optional" / "index.html"
    assert documented_names(optional, "throwaway.optional") == {"adapt"}


REPORTED: Final = {
    "docs/index.md": "# Home\n\nThe [gather report](../benchmarks/reports/gather.md#figures).\n",
    "benchmarks/reports/README.md": "# Reports\n\n- [Gather](gather.md)\n",
    "benchmarks/reports/gather.md": "# Gather\n\n## Figures\n\nMade by [compare.py](../compare.py) "
                                    "as [the guide](../../docs/index.md#home) says; "
                                    "[how to run it](../README.md), [the tools](../).\n",
    "benchmarks/compare.py": "print('compare')\n",
    "benchmarks/README.md": "# Benchmarks\n\n[The reports](reports/gather.md).\n",
}
NAV: Final = ["index.md", "benchmarks/reports/README.md"]


def hrefs(page: Path) -> set[str]:
    return set(re.findall(r'<a href="([^"]+)">', page.read_text(encoding="utf-8")))


def test_reports_and_repository_links_keep_working_on_the_site(tmp_path: Path) -> None:
    """Links written for the repository (relative to each Markdown file) lead to the same files
    on the site: docs/ at its root, benchmarks/reports/ at its own path, any other file a page
    links to under repository/."""
    config = throwaway_repository(tmp_path, REPORTED, NAV)
    assert_built(build_site(config, tmp_path / "site"))
    site = tmp_path / "site"
    assert "benchmarks/reports/gather/#figures" in hrefs(site / "index.html")
    assert "gather/" in hrefs(site / "benchmarks" / "reports" / "index.html")
    report = site / "benchmarks" / "reports" / "gather" / "index.html"
    assert {"../../../repository/benchmarks/compare.py", "../../../#home",
            "../../../repository/benchmarks/"} == hrefs(report) - {"#figures"}
    assert (site / "repository" / "benchmarks" / "compare.py").read_text() == "print('compare')\n"
    # The README the report links to is on the site too, and so is what it links to.
    assert "../../benchmarks/reports/gather/" in hrefs(site / "repository" / "benchmarks" /
                                                       "index.html")


def test_a_report_no_page_links_to_fails_the_build(tmp_path: Path) -> None:
    files = {**REPORTED, "benchmarks/reports/other.md": "# Other\n\nNumbers.\n"}
    config = throwaway_repository(tmp_path, files, NAV)
    done = build_site(config, tmp_path / "site")
    assert done.returncode != 0
    assert "benchmarks/reports/other.md is linked from no page" in done.stderr


# --- every page in a browser -------------------------------------------------------------------


@dataclass
class Dom:
    """What the link check needs from one rendered page."""

    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)
    articles: int = 0
    main_text: str = ""


class DomReader(HTMLParser):
    """Collects a page's element ids, its links (a href, img src, link href, script src) and the
    text of its main content: the <article> Material puts a page's Markdown in, without the
    page's title and the headings' permalinks."""

    VOID: Final = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
                   "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.dom = Dom()
        self.main_depth = 0  # open elements inside the main content, 0 when outside it
        self.skip_depth = 0  # open elements inside headings and permalinks within it
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if "id" in values:
            self.dom.ids.add(values["id"])
        if tag == "a" and "name" in values:
            self.dom.ids.add(values["name"])
        for wanted_tag, attribute in (("a", "href"), ("img", "src"), ("link", "href"),
                                      ("script", "src")):
            if tag == wanted_tag and values.get(attribute):
                self.dom.links.append(values[attribute])
        if tag in self.VOID:
            return
        if self.main_depth:
            self.main_depth += 1
            if self.skip_depth or tag in {"h1", "script", "style"} or "headerlink" in values.get(
                    "class", ""):
                self.skip_depth += 1
        elif tag == "article":
            self.dom.articles += 1
            self.main_depth = 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID or not self.main_depth:
            return
        self.main_depth -= 1
        if self.skip_depth:
            self.skip_depth -= 1
        if not self.main_depth:
            self.dom.main_text += " ".join(self.text).strip()
            self.text = []

    def handle_data(self, data: str) -> None:
        if self.main_depth and not self.skip_depth and data.strip():
            self.text.append(data.strip())


def read_dom(html: str) -> Dom:
    reader = DomReader()
    reader.feed(html)
    reader.close()
    return reader.dom


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # Chromium drops connections it no longer needs once the page is dumped; the server's
        # broken pipe is no fault of the site (a missing file is a 404 the check sees).
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(folder: Path) -> Iterator[str]:
    """The folder's base URL on a local http.server, stopped on leaving."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    pytest.fail(CHROMIUM_MISSING)


def rendered(browser: str, url: str) -> str:
    """The page's DOM after its scripts ran, as headless Chromium dumps it."""
    with tempfile.TemporaryDirectory(prefix="loaderx-chromium-") as profile:
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--disable-extensions", "--disable-background-networking",
             f"--user-data-dir={profile}", "--dump-dom", url],
            capture_output=True, text=True, timeout=PAGE_TIMEOUT_S, check=False)
    assert done.returncode == 0 and done.stdout.strip(), (
        f"chromium could not load {url} (exit status {done.returncode}):\n{done.stderr[-2000:]}")
    return done.stdout


def pages_of(site: Path) -> list[str]:
    """Every page's path on the site (folder/ for folder/index.html), 404.html left out: it is
    only shown for a missing address and its links are absolute to where the site is deployed."""
    found = []
    for page in sorted(site.rglob("*.html")):
        relative = page.relative_to(site).as_posix()
        if relative == "404.html":
            continue
        found.append(relative.removesuffix("index.html"))
    return found


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=PAGE_TIMEOUT_S) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as error:
        return error.code


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    external: set[str] = field(default_factory=set)
    addresses: int = 0


def check_site(site: Path) -> Findings:
    """Loads every page of the site in headless Chromium and checks its text and its links."""
    browser = chromium()
    pages = pages_of(site)
    findings = Findings()
    with serving(site) as base, concurrent.futures.ThreadPoolExecutor(BROWSERS_AT_ONCE) as pool:
        doms = dict(zip(pages, pool.map(lambda p: read_dom(rendered(browser, base + p)), pages)))
        statuses: dict[str, int] = {}
        for page, dom in doms.items():
            where = page or "/"
            if dom.articles != 1:
                findings.problems.append(f"{where}: {dom.articles} <article> elements, not one")
            elif not dom.main_text:
                findings.problems.append(f"{where}: the main content has no text")
            for link in dom.links:
                problem = check_link(base, page, link, doms, statuses, findings.external)
                if problem:
                    findings.problems.append(f"{where}: {link} {problem}")
        findings.addresses = len(statuses)
    return findings


def check_link(base: str, page: str, link: str, doms: dict[str, Dom], statuses: dict[str, int],
               external: set[str]) -> str | None:
    """What is wrong with one link of a page (None when nothing is); a link to another host is
    only noted in external."""
    target = urllib.parse.urljoin(base + page, link)
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https"):
        return None
    if parts.netloc != urllib.parse.urlsplit(base).netloc:
        external.add(target)
        return None
    address = urllib.parse.urlunsplit(parts._replace(fragment=""))
    if address not in statuses:
        statuses[address] = status_of(address)
    if statuses[address] >= 400:
        return f"answers {statuses[address]}"
    linked_page = parts.path.removeprefix("/")
    fragment = urllib.parse.unquote(parts.fragment)
    if fragment and linked_page in doms and fragment not in doms[linked_page].ids:
        return f"names no element of {linked_page or '/'}"
    return None


def test_every_page_renders_and_every_link_resolves(site: Path) -> None:
    findings = check_site(site)
    print(f"{len(pages_of(site))} pages, {findings.addresses} addresses of the site checked; "
          f"{len(findings.external)} links to other hosts, not fetched:")
    for link in sorted(findings.external):
        print(f"  {link}")
    assert len(pages_of(site)) >= len(API_MODULES) + 10
    assert not findings.problems, "\n".join(findings.problems)


def test_the_check_finds_a_blank_page_and_dead_links(tmp_path: Path) -> None:
    article = "<html><body><article>{}</article>{}</body></html>"
    (tmp_path / "index.html").write_text(article.format(
        '<h1 id="top">Home</h1><p>Text.</p><a href="gone/">a</a><a href="blank/#nowhere">b</a>'
        '<a href="#top">c</a><img src="missing.png"><a href="https://example.org/">d</a>',
        ""), encoding="utf-8")
    (tmp_path / "blank").mkdir()
    # The text is there in the file, but a script removes it, as a broken theme script could.
    (tmp_path / "blank" / "index.html").write_text(article.format(
        "<h1>Blank</h1><p id=x>Soon gone.</p>",
        "<script>document.getElementById('x').remove()</script>"), encoding="utf-8")
    findings = check_site(tmp_path)
    assert sorted(findings.problems) == [
        "/: blank/#nowhere names no element of blank/",
        "/: gone/ answers 404",
        "/: missing.png answers 404",
        "blank/: the main content has no text",
    ]
    assert findings.external == {"https://example.org/"}


def test_without_chromium_the_check_fails_naming_the_package(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(pytest.fail.Exception, match="install Debian's package `chromium`"):
        chromium()
