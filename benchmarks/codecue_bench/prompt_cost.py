"""``codecue bench prompt-cost FILE...``: how many prompt tokens the target must evaluate per keystroke,
for each prompt layout, as the server builds prompts (anchored prefix, KV cache reuse by common prefix).

No model runs: the cache is simulated with the real tokenizer, so the counts do not depend on how busy
the machine is. Time to first ghost text on a CPU is dominated by these tokens (prefill at roughly
160 tokens/s on 2 cores for the default 1.5B target), which is what the settings differ in: the layout,
and whether a place the cache does not hold gets a shorter first prompt (at most ``--first-tokens``
new tokens, what the server allows from its measured prefill speed) or the full one (``LAYOUT:full``).

Two scenarios, as in the keystroke replay: typing characters the suggestion did not predict (each one
needs a new generation; the cache holds the last prompt and its generated tokens), and Enter at the
end of a line at a new place in the file.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from codecue.backends.kv_cache import common_prefix_length
from codecue.engine.fim import LAYOUTS, PromptBudget, build_fim_prompt, choose_prompt, stable_prefix
from codecue.models.resolve import resolve_model
from codecue.models.tokenizer import load_tokenizer
from codecue_bench.replay import choose_stretch, enter_lines
from codecue_bench.report import format_prompt_costs, report_meta, report_path, write_report

GENERATED_TOKENS = 16  # what each generation leaves in the cache after its prompt
DEFAULT_SETTINGS = ("psm", "psm:full", "psm-mid", "psm-mid:full", "spm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="the files to type into")
    parser.add_argument("--layouts", nargs="+", metavar="LAYOUT[:full]", default=DEFAULT_SETTINGS,
                        help="the prompt layouts to compare (psm, psm-mid, spm); LAYOUT:full always sends the "
                             f"full prompt, no shorter first prompt (default: {' '.join(DEFAULT_SETTINGS)})")
    parser.add_argument("--first-tokens", type=int, default=64,
                        help="new prompt tokens allowed at a place the cache does not hold (the server derives it "
                             "from its measured prefill speed; 64 ~ 400 ms on 2 cores)")
    parser.add_argument("--target", help="the target whose tokenizer counts (default: the configured target)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the rows and meta here")


def run(args: argparse.Namespace) -> int:
    target = resolve_model(args.target, "target")  # its tokenizer only: no weights are evaluated
    rows = prompt_costs(load_tokenizer(target), args.files, args.layouts,
                        first_tokens=args.first_tokens)
    print(format_prompt_costs(rows))
    write_report(args.json_out, report_meta("prompt-cost", args.typed_argv, {"tokenizer": target.path}), {"rows": rows})
    return 0


class SimulatedCache:
    """The token ids a KV cache holds; ``feed`` returns how many tokens had to be evaluated."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def feed(self, prompt: Sequence[int]) -> int:
        keep = min(common_prefix_length(self.tokens, prompt), len(prompt) - 1)  # the last is always fed
        self.tokens = list(prompt) + [-1] * GENERATED_TOKENS
        return len(prompt) - keep


def _prompt(tokenizer, budget: PromptBudget, prefix: str, suffix: str, cache: SimulatedCache,
            limit: int | None) -> list[int]:
    """What the server sends: the anchored prefix, and at most ``limit`` new tokens (None: the full prompt)."""
    anchored = stable_prefix(prefix, budget)
    return choose_prompt(lambda b: build_fim_prompt(tokenizer, anchored, suffix, b), budget, cache.tokens, limit)[0]


def typing_costs(tokenizer, text: str, budget: PromptBudget, keystrokes: int = 40,
                 limit: int | None = None) -> list[int]:
    start, end = choose_stretch(text, keystrokes)
    typed, doc = text[start:end], text[:start] + text[end:]
    cache = SimulatedCache()
    cache.feed(_prompt(tokenizer, budget, doc[:start], doc[start:], cache, None))
    costs = []
    for i, ch in enumerate(typed):
        at = start + i
        doc = doc[:at] + ch + doc[at:]
        costs.append(cache.feed(_prompt(tokenizer, budget, doc[: at + 1], doc[at + 1:], cache, limit)))
    return costs


def enter_costs(tokenizer, text: str, budget: PromptBudget, places: int = 8, limit: int | None = None) -> list[int]:
    cache = SimulatedCache()
    cache.feed(_prompt(tokenizer, budget, "", text, cache, None))
    costs = []
    doc = text
    for line_no in enter_lines(text, places):
        lines = doc.split("\n")
        indent = lines[line_no][: len(lines[line_no]) - len(lines[line_no].lstrip())]
        offset = sum(len(li) + 1 for li in lines[:line_no]) + len(lines[line_no])
        doc = doc[:offset] + "\n" + indent + doc[offset:]
        cursor = offset + 1 + len(indent)
        costs.append(cache.feed(_prompt(tokenizer, budget, doc[:cursor], doc[cursor:], cache, limit)))
    return costs


def _summary(costs: list[int]) -> dict[str, Any]:
    ordered = sorted(costs)

    def rank(q: float) -> int:
        return ordered[max(0, -(-len(ordered) * q // 100) - 1)] if ordered else 0

    return {"n": len(costs), "p50": rank(50), "p90": rank(90), "mean": round(statistics.mean(costs), 1) if costs else 0}


def prompt_costs(tokenizer, files: Sequence[Path], settings: Sequence[str] = (*LAYOUTS, "psm-mid:full"),
                 budget: PromptBudget | None = None, first_tokens: int = 64) -> list[dict[str, Any]]:
    """Each setting (a layout; ``:full`` = always the full prompt, else at most ``first_tokens`` new
    tokens at a place the cache does not hold) on each file."""
    base = budget or PromptBudget()
    rows = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for setting in settings:
            layout, _, mode = setting.partition(":")
            b = replace(base, layout=layout)
            limit = None if mode == "full" else first_tokens
            rows.append({"file": report_path(path), "lines": text.count("\n") + 1, "layout": setting,
                         "typing": _summary(typing_costs(tokenizer, text, b, limit=limit)),
                         "enter": _summary(enter_costs(tokenizer, text, b, limit=limit))})
    return rows
