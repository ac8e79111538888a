"""Fill-in-the-middle prompts (Qwen2.5-Coder's ``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``).

The prompt keeps the end of the prefix and the start of the suffix within a token budget. The prefix is
cut at a line boundary that moves in steps of ``anchor_lines`` lines, so that while the user types, the
prompt's beginning stays put and the KV cache's common prefix with the last request stays long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"


@dataclass(frozen=True)
class PromptBudget:
    total: int = 1536  # tokens for prefix + suffix + extra context
    suffix: int = 128  # the suffix is re-evaluated on every keystroke: keep it short
    extra: int = 256  # other open documents
    anchor_lines: int = 32

    @classmethod
    def for_benchmark(cls, total: int) -> PromptBudget:
        """A budget of ``total`` tokens for measuring (bench, tune): a quarter at most, and at most 128, for
        the suffix; no other documents."""
        return cls(total=total, suffix=min(128, total // 4), extra=0)


def _token_count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


def trim_prefix(tokenizer, prefix: str, budget: int, anchor_lines: int) -> str:
    """The longest tail of ``prefix`` that starts on an anchored line boundary and fits ``budget``."""
    if budget <= 0:
        return ""
    # Cheap bound first: never tokenize more than ~8 characters per budget token. The cut is on an
    # absolute line number (a multiple of anchor_lines), so it does not move while the user types.
    max_chars = budget * 8
    if len(prefix) > max_chars:
        starts = [0]
        for i, ch in enumerate(prefix):
            if ch == "\n":
                starts.append(i + 1)
        step = max(1, anchor_lines)
        cut_line = next((n for n in range(0, len(starts), step) if len(prefix) - starts[n] <= max_chars), None)
        prefix = prefix[starts[cut_line] :] if cut_line is not None else prefix[starts[-1] :][-max_chars:]
    if _token_count(tokenizer, prefix) <= budget:
        return prefix
    lines = prefix.splitlines(keepends=True)
    # Drop whole blocks of anchor_lines lines from the top until it fits: the start moves in big steps.
    # Where a block is more than the budget holds, fall back to finer steps (8 lines, then 1).
    for step in sorted({max(1, anchor_lines), 8, 1}, reverse=True):
        for start in range(step, len(lines), step):
            candidate = "".join(lines[start:])
            if _token_count(tokenizer, candidate) <= budget:
                if start < len(lines) - 1 or step == 1:
                    return candidate
                break
    # The last line alone is too long: keep its tail in tokens.
    ids = tokenizer.encode(lines[-1], add_special_tokens=False)[-budget:]
    return tokenizer.decode(ids)


def trim_suffix(tokenizer, suffix: str, budget: int) -> str:
    if budget <= 0 or not suffix:
        return ""
    suffix = suffix[: budget * 8]
    ids = tokenizer.encode(suffix, add_special_tokens=False)
    if len(ids) <= budget:
        return suffix
    text = tokenizer.decode(ids[:budget])
    cut = text.rfind("\n")
    return text[: cut + 1] if cut > 0 else text


def build_fim_text(
    tokenizer,
    prefix: str,
    suffix: str,
    budget: PromptBudget = PromptBudget(),
    extra_context: Sequence[tuple[str, str]] = (),
) -> str:
    """The prompt as text (special tokens spelled out); ``extra_context`` is (path, text) pairs."""
    extra_parts = []
    extra_left = budget.extra
    for path, text in extra_context:
        if extra_left <= 0:
            break
        snippet = trim_prefix(tokenizer, text, extra_left, budget.anchor_lines)
        extra_left -= _token_count(tokenizer, snippet)
        if snippet:
            extra_parts.append(f"{FILE_SEP}{path}\n{snippet}\n")
    used_extra = budget.extra - extra_left
    suffix_text = trim_suffix(tokenizer, suffix, budget.suffix)
    prefix_budget = budget.total - used_extra - _token_count(tokenizer, suffix_text)
    prefix_text = trim_prefix(tokenizer, prefix, prefix_budget, budget.anchor_lines)
    return "".join(extra_parts) + f"{FIM_PREFIX}{prefix_text}{FIM_SUFFIX}{suffix_text}{FIM_MIDDLE}"


def build_fim_prompt(tokenizer, prefix: str, suffix: str, budget: PromptBudget = PromptBudget(),
                     extra_context: Sequence[tuple[str, str]] = ()) -> list[int]:
    text = build_fim_text(tokenizer, prefix, suffix, budget, extra_context)
    return tokenizer.encode(text, add_special_tokens=False)

