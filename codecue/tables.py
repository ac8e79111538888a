"""Markdown tables for the commands' reports (benchmarks, replays): one rendering for all of them."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(rows: Sequence[Sequence[str]]) -> str:
    """``rows`` (the first is the header) as a Markdown table, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
