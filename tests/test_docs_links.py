"""The README and the pages under docs/: every relative link resolves (the file, and the heading its #anchor names),
and no page reads as a diary (issue numbers, sessions, rounds, "this week", "today"). In process, text only."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DIARY = re.compile(r"issue #?\d+|session|round \d|this week|today", re.IGNORECASE)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The page without fenced blocks, indented code blocks and code spans: links there are not links."""
    text = FENCE.sub("", text)
    lines = [line for line in text.splitlines() if not line.startswith(("    ", "\t"))]
    return CODE_SPAN.sub("", "\n".join(lines))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (-1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def test_there_are_pages_and_links():
    assert len(PAGES) > 5
    assert sum(len(relative_links(p)) for p in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_a_heading(page):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if ROOT in dest.parents else dest}")
        elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_reads_as_a_diary(page):
    hits = [f"{n}: {line.strip()[:120]}" for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if DIARY.search(line)]
    assert not hits, f"{page.relative_to(ROOT)}:\n" + "\n".join(hits)


def test_the_slug_follows_githubs_rule():
    assert slug("Image classification: CARAML's script against `--preset caraml`") == \
        "image-classification-caramls-script-against---preset-caraml"
    assert slug("`caraml plan`: an estimate on paper") == "caraml-plan-an-estimate-on-paper"
    assert slug("2026-12-04: fp8 loss on the CPU, and the learning rate") == \
        "2026-12-04-fp8-loss-on-the-cpu-and-the-learning-rate"
