"""The documentation: README.md as a first page, and the MkDocs site of docs/.

``mkdocs build --strict`` must pass (every link, anchor and nav entry checked), the settings
reference it builds must name every broker and topic setting, and README.md must stay short
with every relative link leading to a file (and each anchor to a heading there). Imports
nothing of Headrace: the settings are read from broker/config/settings.py by its path, as the
docs hook reads them.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# [text](target) and ![alt](target); reference definitions [name]: target
LINK = re.compile(r'!?\[(?:\\.|[^\]\\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)')
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)", re.M)
FENCED = re.compile(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1", re.M | re.S)
CODE = re.compile(r"(`+).+?\1")


def settings_module():
    spec = importlib.util.spec_from_file_location(
        "_headrace_test_docs_config", ROOT / "broker" / "config" / "settings.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs (Python-Markdown's toc) make it."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    text = FENCED.sub("", path.read_text())
    return {
        slug(m.group(1).strip().strip("#").strip())
        for m in re.finditer(r"^#{1,6}\s+(.*)$", text, re.M)
    }


def relative_links(text: str) -> list[str]:
    text = CODE.sub("", FENCED.sub("", text))
    links = LINK.findall(text) + REFERENCE.findall(text)
    return [u for u in links if not urlsplit(u).scheme and not u.startswith(("//", "mailto:"))]


def test_readme_is_a_first_page_under_300_lines():
    lines = README.read_text().splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines; the rest belongs in docs/"


def test_every_relative_link_of_the_readme_leads_to_a_file():
    links = relative_links(README.read_text())
    assert links, "README.md links to no page of docs/"
    broken = []
    for url in links:
        parts = urlsplit(url)
        target = (ROOT / unquote(parts.path)).resolve() if parts.path else README
        if not target.is_relative_to(ROOT) or not target.exists():
            broken.append(f"{url}: no such file")
            continue
        if parts.fragment and target.suffix == ".md" and parts.fragment not in anchors(target):
            broken.append(f"{url}: no heading #{parts.fragment} in {target.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_mkdocs_build_strict_and_the_settings_reference(tmp_path):
    pytest.importorskip("mkdocs")
    site = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    page = (site / "reference" / "settings" / "index.html").read_text()
    config = settings_module()
    names = set(config.BROKER_SETTINGS) | set(config.TOPIC_SETTINGS)
    assert len(config.TOPIC_SETTINGS) > 10 and len(config.BROKER_SETTINGS) > 100
    missing = sorted(n for n in names if f"<code>{n}</code>" not in page)
    assert not missing, f"the settings reference lacks {missing}"
    # the plots the pages show, from bench/results/, are in the site (docs/hooks/repo_files.py)
    for plot in ("throughput.png", "cluster.png", "faults/faults.png"):
        assert (site / "_repo" / "bench" / "results" / plot).is_file(), plot


# the sections the measuring commands rewrite, and where they now live (bench/report.py,
# bench/cluster.py, bench/transactions.py, bench/faults/__main__.py, compat/matrix.py)
MARKED = {
    "README.md": ["bench-headline"],
    "docs/benchmarks.md": ["bench", "bench-cluster", "bench-cluster-rf3", "bench-transactions",
                           "bench-transactions-cluster"],
    "docs/benchmarks-history.md": ["bench-history"],
    "docs/faults.md": ["bench-faults"],
    "docs/clients.md": ["compat-matrix"],
}


@pytest.mark.parametrize("path", sorted(MARKED))
def test_the_generated_sections_have_their_markers(path):
    text = (ROOT / path).read_text()
    for name in MARKED[path]:
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        assert text.count(start) == 1 and text.count(end) == 1, f"{path}: {name}"
        assert text.index(start) < text.index(end), f"{path}: {name}"


def test_the_settings_the_configuration_page_explains_are_settings():
    """docs/configuration.md explains the common settings in tables of its own: each name in
    their first column must be a broker or topic setting, or a listener's (so a setting that
    is renamed or removed cannot stay explained there)."""
    settings = settings_module()
    known = set(settings.BROKER_SETTINGS) | set(settings.TOPIC_SETTINGS)
    named = re.findall(r"^\| `([a-z0-9.<>_-]+)` \|", (ROOT / "docs/configuration.md").read_text(), re.M)
    assert len(named) > 40
    unknown = [
        n for n in named if n not in known and not n.startswith("listener.name.")
    ]
    assert not unknown, f"docs/configuration.md explains settings that do not exist: {unknown}"
