"""The README and docs/ link only to files of the repository, and every one they name exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deploy" / "README.md",
         ROOT / "benchmarks" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _links(page: Path) -> list[str]:
    return LINK.findall(page.read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(page):
    for link in _links(page):
        target, _, anchor = link.partition("#")
        assert "://" not in target, f"{page.name} links outside the repository: {link}"
        if not target:
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name} links outside the checkout: {link}"
        assert resolved.exists(), f"{page.name} links to a missing file: {link}"
        if anchor and resolved.suffix == ".md":
            headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                        for h in re.findall(r"^#+ (.+)$", resolved.read_text(), re.M)}
            assert anchor in headings, f"{page.name}: no heading #{anchor} in {target}"


def test_every_reference_page_is_linked_from_the_readme():
    linked = {(ROOT / link.partition("#")[0]).resolve() for link in _links(ROOT / "README.md")}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.resolve() in linked, f"README.md does not link docs/{page.name}"
