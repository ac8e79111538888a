"""Micro-benchmark: cursor context time on a 2,000-line Python file after a one-character edit.

Run ``codecue bench context``. Each sample types one character into a generated file
(``DocumentTrees.apply_change``: ``tree.edit``), then asks for the context right after it
(``DocumentTrees.context``: the incremental reparse plus the analysis, probe reparse included). The edit
is undone between samples, outside the timed region. Target: median under 2 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from codecue.context.documents import DocumentTrees
from codecue_bench.report import format_context_timings, report_meta, write_report

TEMPLATE = '''\
class Widget{i}(Base):
    """A generated widget number {i}."""

    def __init__(self, name: str, size: int = {i}) -> None:
        self.name = name
        self.size = size  # the size in pixels

    def render(self, canvas, scale: float = 1.0) -> list[str]:
        result = []
        for index in range(self.size):
            value = compute(index, scale, name=self.name)
            if value > {i}:
                result.append(format_value(value, width=8))
        return result

'''
LINES_PER_BLOCK = TEMPLATE.count("\n")
TYPED_LINE = 10  # "            value = compute(index, ...)": the edit goes into "compute"


def generate_source(lines: int = 2000) -> str:
    blocks = [TEMPLATE.format(i=i) for i in range(lines // LINES_PER_BLOCK + 1)]
    return "".join(blocks[: lines // LINES_PER_BLOCK]) + "x = 1\n" * (lines % LINES_PER_BLOCK)


def run_benchmark(lines: int = 2000, samples: int = 200, char: str = "e") -> dict[str, float]:
    """Median/percentile times in milliseconds for edit + context, and the edit + reparse alone."""
    source = generate_source(lines)
    trees = DocumentTrees()
    uri = "file:///bench.py"
    trees.open(uri, source, "python")
    source_lines = source.split("\n")
    column = source_lines[TYPED_LINE].index("compute") + len("comp")
    blocks = max(1, lines // LINES_PER_BLOCK)
    context_times: list[float] = []
    reparse_times: list[float] = []
    for sample in range(samples):
        line = (sample * 7919 % blocks) * LINES_PER_BLOCK + TYPED_LINE
        trees.tree(uri)  # the previous undo's reparse stays outside the timed region
        start = time.perf_counter()
        trees.apply_change(uri, line, column, line, column, char)
        context = trees.context(uri, line, column + 1)
        context_times.append(time.perf_counter() - start)
        assert context.context_class == "identifier", context
        trees.apply_change(uri, line, column, line, column + 1, "")
        trees.tree(uri)
        start = time.perf_counter()
        trees.apply_change(uri, line, column, line, column, char)
        trees.tree(uri)
        reparse_times.append(time.perf_counter() - start)
        trees.apply_change(uri, line, column, line, column + 1, "")
    return {
        "lines": float(len(source_lines) - 1),
        "samples": float(samples),
        "context_median_ms": statistics.median(context_times) * 1000,
        "context_p90_ms": statistics.quantiles(context_times, n=10)[-1] * 1000,
        "reparse_median_ms": statistics.median(reparse_times) * 1000,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lines", type=int, default=2000, help="length of the generated Python file")
    parser.add_argument("--samples", type=int, default=200, help="one-character edits to time")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the timings and meta here")


def run(args: argparse.Namespace) -> int:
    result = run_benchmark(args.lines, args.samples)
    print(format_context_timings(result))
    write_report(args.json_out, report_meta("context", args.typed_argv, {}), result)
    return 0
