"""The front door stays a front door: a short README, links that resolve, no ticket history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
# "issue 10", "issue #13", "the copy tasks", "(#11)": which ticket asked, not why.
TICKET = re.compile(
    r"\bissue\s*#?\d+|\bissue's\b|\bthe issue\b|\bticket|(?<![\w&/])#\d+\b(?!\])", re.IGNORECASE
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move reference material into docs/"
    assert any("make demo" in line for line in lines[:12]) and any("make test" in line for line in lines[:12])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    targets = [t for t in LINK.findall(page.read_text(encoding="utf-8")) if "://" not in t]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to {missing}"


def test_no_ticket_history_in_the_code_or_the_docs():
    pages = [page for page in PAGES if page.name != "CHANGELOG.md"]  # history's own place
    files = [*(ROOT / "src").rglob("*.py"), *pages, ROOT / "benchmarks" / "README.md"]
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TICKET.search(line)
    ]
    assert not hits, "say why, not which ticket (history goes into CHANGELOG.md):\n" + "\n".join(hits)


@pytest.mark.parametrize("line", ["after #13's loop work", "the issue's copy tasks", "(issue 10, item 5)"])
def test_the_ticket_pattern_catches_history(line):
    assert TICKET.search(line)


@pytest.mark.parametrize(
    "line", ["business issue side kind", "self.issued += 1", "byte {x:#04x}", "# 2026", r"%[-+ #0]*(\d+)"]
)
def test_the_ticket_pattern_leaves_plain_words(line):
    assert not TICKET.search(line)
