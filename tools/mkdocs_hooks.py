"""mkdocs hooks: the site shows docs/ and benchmarks/reports/ and keeps the repository's links.

Every page is written for the repository first: a link is relative to the Markdown file, as
GitHub and an editor resolve it (docs/index.md links `../benchmarks/reports/README.md`, a report
links `../../docs/format.md`). mkdocs only knows docs_dir, so these hooks
  - add every benchmarks/reports/*.md to the site at the same path (benchmarks/reports/x/);
  - add every other repository file a page links to (README.md, benchmarks/README.md, a source
    file; a folder stands for its README.md, as on GitHub) under repository/ (Markdown as a page,
    anything else as it is), and so on for the links of those pages, so that no link of the
    repository is dead on the site;
  - rewrite each relative link from its repository path to its site path.
A link to something that exists nowhere stays as written, and the strict build fails on it.
The reports stay where they are (not copied into docs/, and no symlink: a symlinked folder is no
folder on GitHub); their index, benchmarks/reports/README.md, is the site's Benchmarks page, and
the build fails on a report that no page links to.
"""

from __future__ import annotations

import logging
import posixpath
import re
from pathlib import Path
from typing import Final

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT: Final = Path(__file__).resolve().parent.parent
DOCS: Final = "docs/"
REPORTS: Final = "benchmarks/reports/"
INDEX_OF_REPORTS: Final = REPORTS + "README.md"
# Where the other repository files that pages link to appear on the site.
OTHER_FILES: Final = "repository/"

log = logging.getLogger("mkdocs.hooks.loaderx")

# A Markdown inline link or image `](target)` (an optional "title" after the target), and a
# reference definition `[name]: target` at the start of a line.
INLINE_LINK: Final = re.compile(r"(\]\()(<[^>]*>|[^)\s]+)([^)]*\))")
REFERENCE_LINK: Final = re.compile(r"^( {0,3}\[[^\]]+\]:[ \t]*)(\S+)", re.MULTILINE)
# A link is relative when it names no scheme (http:, mailto:) and is not absolute or a fragment.
NOT_RELATIVE: Final = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*:|/|#)")
HTML_COMMENT: Final = re.compile(r"<!--.*?-->", re.DOTALL)


def site_path(repo_path: str) -> str:
    """Where the repository file at repo_path appears on the site (as a src_uri)."""
    if repo_path.startswith(DOCS):
        return repo_path[len(DOCS):]
    if repo_path.startswith(REPORTS):
        return repo_path
    return OTHER_FILES + repo_path


def repo_path_of(src_uri: str) -> str:
    """The inverse of site_path."""
    if src_uri.startswith(REPORTS):
        return src_uri
    if src_uri.startswith(OTHER_FILES):
        return src_uri[len(OTHER_FILES):]
    return DOCS + src_uri


def split_target(target: str) -> tuple[str, str]:
    """A link target's path and its '#fragment' or '?query' (with the sign), apart."""
    match = re.search(r"[#?]", target)
    if match is None:
        return target, ""
    return target[:match.start()], target[match.start():]


def resolve(page_repo_path: str, target: str) -> str | None:
    """The repository path a relative link of page_repo_path points to, or None when the link is
    not relative or leaves the repository."""
    path, _ = split_target(target.strip("<>"))
    if not path or NOT_RELATIVE.match(path):
        return None
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), path))
    if joined == ".." or joined.startswith("../"):
        return None
    # A folder's link shows its README on GitHub; on the site it goes to that README's page.
    if (ROOT / joined).is_dir() and (ROOT / joined / "README.md").is_file():
        return posixpath.normpath(posixpath.join(joined, "README.md"))
    return joined


def link_targets(text: str) -> list[str]:
    return ([m.group(2) for m in INLINE_LINK.finditer(text)]
            + [m.group(2) for m in REFERENCE_LINK.finditer(text)])


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the benchmark reports, then every repository file the pages link to, transitively."""
    pending: list[str] = []
    reports = ROOT / REPORTS
    for report in sorted(reports.glob("*.md")) if reports.is_dir() else []:
        pending.append(add(files, config, REPORTS + report.name))
    pending += [repo_path_of(f.src_uri) for f in files.documentation_pages()]
    seen = set(pending)
    while pending:
        page = pending.pop()
        for target in link_targets((ROOT / page).read_text(encoding="utf-8")):
            linked = resolve(page, target)
            if linked is None or linked in seen or not (ROOT / linked).is_file():
                continue
            seen.add(linked)
            if files.get_file_from_path(site_path(linked)) is None:
                add(files, config, linked)
            if linked.endswith(".md"):
                pending.append(linked)
    return files


def add(files: Files, config: MkDocsConfig, repo_path: str) -> str:
    files.append(File.generated(config, site_path(repo_path), abs_src_path=str(ROOT / repo_path)))
    return repo_path


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Rewrites the page's relative links from repository paths to site paths."""
    page_repo_path = repo_path_of(page.file.src_uri)

    def rewrite(target: str) -> str:
        linked = resolve(page_repo_path, target)
        if linked is None or not (ROOT / linked).is_file():
            return target
        _, rest = split_target(target.strip("<>"))
        here = posixpath.dirname(page.file.src_uri) or "."
        return posixpath.relpath(site_path(linked), here) + rest

    markdown = INLINE_LINK.sub(lambda m: m.group(1) + rewrite(m.group(2)) + m.group(3), markdown)
    markdown = REFERENCE_LINK.sub(lambda m: m.group(1) + rewrite(m.group(2)), markdown)
    here = posixpath.dirname(page.file.src_uri)
    for target in link_targets(HTML_COMMENT.sub("", markdown)):
        path, _ = split_target(target.strip("<>"))
        if path and not NOT_RELATIVE.match(path):
            LINKED_PAGES.add(posixpath.normpath(posixpath.join(here, path)))
    return markdown


# The site paths that pages link to, gathered as their Markdown is read: mkdocs reads every
# page before on_env.
LINKED_PAGES: set[str] = set()


def on_pre_build(config: MkDocsConfig) -> None:
    LINKED_PAGES.clear()


def on_env(env: object, config: MkDocsConfig, files: Files) -> object:
    """Warns (so that the strict build fails) about every report that no page links to."""
    for file in files.documentation_pages():
        uri = file.src_uri
        if uri.startswith(REPORTS) and uri != INDEX_OF_REPORTS and uri not in LINKED_PAGES:
            log.warning(f"{uri} is linked from no page: add it to {INDEX_OF_REPORTS}, the "
                        "index of the reports")
    return env
