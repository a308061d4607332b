"""MkDocs hook: links from the docs to files of the repository outside docs/.

A page links to such a file by its path relative to the page, the path GitHub follows
(``../bench/results/throughput.png`` from docs/benchmarks.md). MkDocs knows only the files
under docs/, so this hook adds each file linked that way to the site under ``_repo/``
(``_repo/bench/results/throughput.png``) and points the link there. A linked Markdown file
becomes a page of the site (outside the nav), and its own links are followed the same way.

A link to a file that does not exist is left as it is written, so ``mkdocs build --strict``
fails on it as on any broken link. Links inside code (fenced blocks, backquotes) are text.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.structure.files import File, Files, InclusionLevel

PREFIX = "_repo"
# [text](target) and ![alt](target), with an optional "title"
LINK = re.compile(r'(!?\[(?:\\.|[^\]\\])*\]\()([^)\s]+)((?:\s+"[^"]*")?\))')
CODE = re.compile(r"(`+)(?:.+?)\1")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def _outside_code(markdown: str) -> Iterator[tuple[bool, str]]:
    """The text in pieces: (True, prose) and (False, code), in order."""
    fence = None
    for line in markdown.splitlines(keepends=True):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            yield False, line
            continue
        if m:
            fence = m.group(1)
            yield False, line
            continue
        pos = 0
        for code in CODE.finditer(line):
            yield True, line[pos : code.start()]
            yield False, code.group(0)
            pos = code.end()
        yield True, line[pos:]


def _target(page_repo_path: str, url: str) -> tuple[str, str] | None:
    """(repository path, the url's ?query#anchor) of a relative link, or None."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or not parts.path or url.startswith(("/", "\\")):
        return None
    target = posixpath.normpath(
        posixpath.join(posixpath.dirname(page_repo_path), unquote(parts.path))
    )
    if target == ".." or target.startswith("../"):
        return None
    rest = (f"?{parts.query}" if parts.query else "") + (
        f"#{parts.fragment}" if parts.fragment else ""
    )
    return target, rest


def _repo_path(file: File, root: Path) -> str | None:
    if not file.abs_src_path:
        return None
    try:
        return Path(file.abs_src_path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def _links(markdown: str, page_repo_path: str) -> Iterator[str]:
    for prose, text in _outside_code(markdown):
        if prose:
            for m in LINK.finditer(text):
                found = _target(page_repo_path, m.group(2))
                if found:
                    yield found[0]


def on_files(files: Files, config) -> Files:
    root = _root(config)
    docs = Path(config.docs_dir).resolve().relative_to(root).as_posix()
    queue = []
    for file in files.documentation_pages():
        where = _repo_path(file, root)
        if where:
            queue.append((where, Path(file.abs_src_path).read_text(encoding="utf-8")))
    added: set[str] = set()
    while queue:
        where, text = queue.pop()
        for target in _links(text, where):
            if target == docs or target.startswith(docs + "/") or target in added:
                continue
            if not (root / target).is_file():
                continue  # left to MkDocs, which reports it
            added.add(target)
            files.append(
                File.generated(
                    config,
                    f"{PREFIX}/{target}",
                    abs_src_path=str(root / target),
                    inclusion=InclusionLevel.NOT_IN_NAV,
                )
            )
            if target.endswith(".md"):
                queue.append((target, (root / target).read_text(encoding="utf-8")))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    root = _root(config)
    docs = Path(config.docs_dir).resolve().relative_to(root).as_posix()
    where = _repo_path(page.file, root)
    if where is None:
        return markdown
    here = posixpath.dirname(page.file.src_uri)

    def relink(m: re.Match) -> str:
        found = _target(where, m.group(2))
        if found is None:
            return m.group(0)
        target, rest = found
        if target.startswith(docs + "/"):
            site = target[len(docs) + 1 :]
        elif (root / target).is_file():
            site = f"{PREFIX}/{target}"
        else:
            return m.group(0)
        return m.group(1) + posixpath.relpath(site, here or ".") + rest + m.group(3)

    return "".join(
        LINK.sub(relink, text) if prose else text for prose, text in _outside_code(markdown)
    )
