"""Generate a table of contents for a Markdown file and insert it between marker comments.

The naïve approach (regex over every line) breaks on fenced code blocks, so headings are
only collected outside fences.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

TOC_START = "<!-- toc -->"
TOC_END = "<!-- tocstop -->"
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^(`{3,}|~{3,})")


@dataclass(frozen=True)
class Heading:
    level: int
    title: str
    anchor: str


def slugify(title: str, used: dict[str, int]) -> str:
    """GitHub-style anchor: lowercase, punctuation dropped, spaces to dashes, duplicates numbered."""
    text = unicodedata.normalize("NFKD", title).lower()
    text = re.sub(r"[^\w\- ]", "", text).strip().replace(" ", "-")
    count = used.get(text, 0)
    used[text] = count + 1
    return text if count == 0 else f"{text}-{count}"


def collect_headings(lines: list[str], max_level: int = 3) -> list[Heading]:
    headings: list[Heading] = []
    used: dict[str, int] = {}
    fence: str | None = None
    for line in lines:
        fence_match = FENCE.match(line)
        if fence_match:
            marker = fence_match.group(1)
            if fence is None:
                fence = marker[0]
            elif marker[0] == fence:
                fence = None
            continue
        if fence is not None:
            continue
        match = HEADING.match(line)
        if match is None:
            continue
        level = len(match.group(1))
        title = match.group(2)
        anchor = slugify(title, used)
        if level <= max_level:
            headings.append(Heading(level, title, anchor))
    return headings


def render_toc(headings: list[Heading]) -> list[str]:
    if not headings:
        return []
    top = min(h.level for h in headings)
    return [f"{'  ' * (h.level - top)}- [{h.title}](#{h.anchor})" for h in headings]


def insert_toc(text: str, max_level: int = 3) -> str:
    lines = text.splitlines()
    try:
        start = lines.index(TOC_START)
        end = lines.index(TOC_END, start)
    except ValueError:
        raise ValueError(f"markers {TOC_START} and {TOC_END} not found in order") from None
    body = lines[:start] + lines[end + 1 :]
    toc = render_toc(collect_headings(body, max_level))
    new_lines = lines[: start + 1] + [""] + toc + [""] + lines[end:]
    return "\n".join(new_lines) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: markdown_toc.py FILE.md", file=sys.stderr)
        return 2
    path = Path(argv[1])
    try:
        original = path.read_text(encoding="utf-8")
        updated = insert_toc(original)
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    if updated != original:
        path.write_text(updated, encoding="utf-8")
        print(f"updated {path}")
    return 0


def test_slugify_numbers_duplicates() -> None:
    used: dict[str, int] = {}
    assert slugify("Getting Started!", used) == "getting-started"
    assert slugify("Getting Started", used) == "getting-started-1"


def test_fenced_headings_are_ignored() -> None:
    doc = ["# Title", "```", "# not a heading", "```", "## Usage"]
    assert [h.title for h in collect_headings(doc)] == ["Title", "Usage"]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
