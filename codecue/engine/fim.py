"""Fill-in-the-middle prompts (Qwen2.5-Coder's ``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``).

The prompt keeps the end of the prefix and the start of the suffix within a token budget. The prefix is
cut at a line boundary that moves in steps of ``anchor_lines`` lines, so that while the user types, the
prompt's beginning stays put and the KV cache's common prefix with the last request stays long.

Context from other files comes first, in Qwen2.5-Coder's repository format (``<|repo_name|>`` then one
``<|file_sep|>path`` entry per chunk, then the current file's entry holding the FIM part), so that it is
cached once and survives typing in the current file. The FIM part has one of three layouts:

- ``psm``: ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>`` — a keystroke at the cursor changes the
  end of P, so the whole suffix is evaluated again;
- ``psm-mid`` (after llama.vim's): ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>L`` where L is what was
  written of the cursor's paragraph up to the cursor (:func:`middle_start`) and P ends before it: typing,
  a new line and its first characters only append to L, and the suffix stays cached through a
  paragraph's lines. While the cursor's line holds only indentation, it is PSM;
- ``spm``: ``<|fim_suffix|>S<|fim_prefix|>P<|fim_middle|>`` — typing only appends to P, but the model
  was trained mostly on PSM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from codecue.backends.kv_cache import common_prefix_length

if TYPE_CHECKING:
    from codecue.models.config import DecodingSettings

FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
FILE_SEP = "<|file_sep|>"
REPO_NAME = "<|repo_name|>"
LAYOUTS = ("psm", "psm-mid", "spm")
DEFAULT_LAYOUT = "psm-mid"


#: the most lines the middle of a ``psm-mid`` prompt holds before the cursor's line: lines typed one after
#: another extend one prompt, and the suffix is evaluated again once in this many lines.
MIDDLE_LINES = 8

#: the window a first suggestion at a new place is never shown from below. A smaller window falls further
#: short of the full prompt's exact match (the aim: within about 5 points); a larger one is what Enter at a
#: new place waits for on a slow CPU, and keys typed there wait behind it. 192 weighs the two; 256 came
#: closer to the full prompt but made Enter and typing wait too long on the AVX2 class (docs/experiments.md,
#: the window floor).
WINDOW_FLOOR = 192


# The budget is in tokens; text is cut to characters first only where tokenizing all of it would cost
# every keystroke, and then trimmed to the exact tokens (:func:`trim_prefix`, the chunks' trim in
# :func:`build_fim_text`). Both estimates live here, beside that trim:
#: generous characters per token for the prefix's first cut (:func:`stable_prefix`): the exact trim follows,
#: and it never tokenizes more than 8 characters per token.
PREFIX_CHARS_PER_TOKEN = 6
#: characters of other files' chunks picked per token of ``extra`` (code's mean is about 3.2): picking by
#: characters keeps ranking free of the tokenizer; the exact trim drops the last chunks that do not fit.
CONTEXT_CHARS_PER_TOKEN = 3.2


@dataclass(frozen=True)
class PromptBudget:
    """The prompt's budget, in tokens: the whole prompt, the suffix's part, the other files' part."""

    total: int = 2048  # tokens for prefix + suffix + extra context (the extra part is kept for context only)
    # 256 gave better first lines when every new line evaluated the suffix again; with the paragraph in the
    # middle it did not (docs/experiments.md, the prompt). A short window gives a quarter of its tokens to
    # the suffix.
    suffix: int = 128
    # Other files' chunks: more of them matched more lines (cross-file names above all) up to 768 tokens,
    # the most tried. The window around the cursor keeps its 1,152 + 128 tokens beside them: the context
    # costs the full prompt's evaluation, which idle time and the rest pay, and a short window at a new
    # place takes it only where the cache holds it.
    extra: int = 768
    anchor_lines: int = 32
    layout: str = DEFAULT_LAYOUT  # one of LAYOUTS: where the suffix and the cursor line go
    # At a place the KV cache does not hold, evaluate no more prompt than this machine does in this long
    # before the first text (a shorter window, see :func:`shorter_budgets`); idle time warms the full
    # prompt. 0: always the full prompt.
    first_text_ms: int = 400
    # ... but never fewer new tokens around the cursor than this: below it the first suggestion at a new
    # place is too often wrong to be worth showing (measured with ``codecue bench quality``, variants
    # ``psm-mid/chunks/first@N`` against the full prompt; a property of the model, not of the machine).
    # A request whose time budget allows less waits for this window instead (``waited_for_window``).
    window_floor: int = WINDOW_FLOOR

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown prompt layout {self.layout!r}; choose one of {', '.join(LAYOUTS)}")

    @property
    def prefix_chars(self) -> int:
        """The most characters of prefix worth tokenizing for this budget (:data:`PREFIX_CHARS_PER_TOKEN`)."""
        return max(0, self.total - self.suffix - self.extra) * PREFIX_CHARS_PER_TOKEN

    @property
    def context_chars(self) -> int:
        """Characters of other files' chunks to pick for ``extra`` (:data:`CONTEXT_CHARS_PER_TOKEN`)."""
        return int(self.extra * CONTEXT_CHARS_PER_TOKEN)

    @classmethod
    def for_benchmark(cls, total: int) -> PromptBudget:
        """A budget of ``total`` tokens for measuring (bench, tune): a quarter at most, and at most 128, for
        the suffix; no other documents."""
        return cls(total=total, suffix=min(128, total // 4), extra=0, layout="psm", first_text_ms=0)


def prompt_budget(decoding: DecodingSettings) -> PromptBudget:
    """The budget these decoding settings build prompts with: theirs (else the default), with their
    ``first_text_ms`` where they set one."""
    budget = decoding.budget or PromptBudget()
    if decoding.first_text_ms >= 0:
        budget = replace(budget, first_text_ms=decoding.first_text_ms)
    return budget


def shorter_budgets(budget: PromptBudget, tokens: int) -> list[PromptBudget]:
    """Budgets whose prompt has about ``tokens`` tokens beyond the project context, for a place the cache
    does not hold: the same context with a window of ``tokens`` around the cursor (the context is often
    cached already), then the window alone. Their prefix moves in steps of 8 lines, not 32: a short window
    must not shrink to a few lines after each anchor."""
    suffix = min(budget.suffix, max(8, tokens // 4))
    window = replace(budget, total=budget.extra + tokens, suffix=suffix, anchor_lines=min(8, budget.anchor_lines))
    return [window, replace(window, total=tokens, extra=0)]


def choose_prompt(build: Callable[[PromptBudget], list[int]], budget: PromptBudget,
                  cached: Sequence[int] | Callable[[list[int]], int], limit: int | None,
                  held: Sequence[int] = (), soon: int | None = None) -> tuple[list[int], int | None]:
    """The prompt to send when the cache holds ``cached`` (token ids, whose common prefix with a prompt is
    reused; or a function giving how many tokens of a prompt the cache would evaluate, such as
    :meth:`~codecue.backends.kv_cache.CachedSequence.uncached`), and the window size it was built for (None:
    the full prompt). The full one (``build(budget)``) when it evaluates at most ``soon`` new tokens (what
    this machine evaluates within the first text's time; None: ``limit``); else, of the full one and the
    :func:`shorter_budgets` for ``limit`` and for each size in ``held`` (windows sent before, which the cache
    may hold), the one that reuses the most of the cache (then the longest) among those that evaluate at
    most ``soon`` new tokens, or where none does, at most ``limit`` (the window floor's); else the one with
    the fewest new tokens. So a limit that drifts with the measured prefill speed does not move the
    window's start, and so re-evaluate it, at every keystroke; and a key where the window is cached is not
    held back by the context a longer prompt would evaluate (shifting keeps the window's tokens in both)."""
    def new_tokens(prompt: list[int]) -> int:
        return cached(prompt) if callable(cached) else uncached_tokens(cached, prompt)

    prompt = build(budget)
    if limit is None:
        return prompt, None
    soon = limit if soon is None else min(soon, limit)
    full = (prompt, None, new_tokens(prompt))
    if full[2] <= soon:
        return prompt, None
    candidates = [full]
    for size in dict.fromkeys([limit, *held]):
        candidates += [(p, size, new_tokens(p)) for p in map(build, shorter_budgets(budget, size))]
    fitting = [c for c in candidates if c[2] <= soon] or [c for c in candidates if c[2] <= limit]
    if not fitting:
        best = min(candidates, key=lambda c: c[2])
    else:
        best = max(fitting, key=lambda c: (len(c[0]) - c[2], len(c[0])))
    return best[0], best[1]


def uncached_tokens(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """How many tokens of ``prompt`` a cache holding ``cached`` would evaluate (it keeps their common prefix)."""
    return len(prompt) - common_prefix_length(cached, prompt)


def _token_count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


def stable_prefix(prefix: str, budget: PromptBudget) -> str:
    """A long document's prefix cut cheaply before it is tokenized (every keystroke builds a prompt): the
    tail starting on a line whose number is a multiple of ``budget.anchor_lines`` (counted from the
    document's start, so the start stays put while the user types and the KV cache keeps it), short
    enough that :func:`trim_prefix` never has to cut from a moving start."""
    max_chars = budget.prefix_chars
    if len(prefix) <= max_chars:
        return prefix
    anchor = max(1, budget.anchor_lines)
    lines_before_limit = prefix.count("\n", 0, len(prefix) - max_chars)
    # The first anchored line at or after the character limit.
    start_line = -(-(lines_before_limit + 1) // anchor) * anchor
    offset = 0
    for _ in range(start_line):
        offset = prefix.find("\n", offset) + 1
        if offset == 0:  # fewer lines than that: the cursor line itself is huge
            return prefix[-max_chars:]
    return prefix[offset:]


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


def render_context(tokenizer, extra_context: Sequence[tuple[str, str]], budget: int,
                   repo_name: str = "project") -> tuple[str, int]:
    """``<|repo_name|>`` and one ``<|file_sep|>path`` entry per (path, text) pair, within ``budget`` tokens;
    returns the text and its token count. A chunk that does not fit whole keeps its first lines (the
    chunks before it are unchanged, so their cache survives)."""
    if budget <= 0 or not extra_context:
        return "", 0
    header = f"{REPO_NAME}{repo_name}\n"
    used = _token_count(tokenizer, header)
    parts = []
    for path, text in extra_context:
        entry_head = f"{FILE_SEP}{path}\n"
        room = budget - used - _token_count(tokenizer, entry_head) - 1  # the closing newline
        if room <= 0:
            break
        body = _head_within(tokenizer, text.rstrip("\n"), room)
        if not body:
            break
        entry = f"{entry_head}{body}\n"
        parts.append(entry)
        used += _token_count(tokenizer, entry)
    if not parts:
        return "", 0
    return header + "".join(parts), used


def _head_within(tokenizer, text: str, budget: int) -> str:
    """The longest run of whole first lines of ``text`` within ``budget`` tokens."""
    if _token_count(tokenizer, text) <= budget:
        return text
    lines = text.split("\n")
    lo, hi = 0, len(lines)
    while lo < hi:  # the largest n with lines[:n] fitting
        mid = (lo + hi + 1) // 2
        if _token_count(tokenizer, "\n".join(lines[:mid])) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return "\n".join(lines[:lo])


@dataclass(frozen=True)
class FimText:
    """A prompt as text (special tokens spelled out), and where its ``psm-mid`` middle starts in the
    document's prefix (None: the prompt has no middle)."""

    text: str
    middle_from: int | None = None


def build_fim_text(
    tokenizer,
    prefix: str,
    suffix: str,
    budget: PromptBudget = PromptBudget(),
    extra_context: Sequence[tuple[str, str]] = (),
    *,
    path: str | None = None,
) -> str:
    """The prompt as text (special tokens spelled out); ``extra_context`` is (path, text) pairs from other
    files, ``path`` the current file's name (shown to the model when there is context)."""
    return fim_text(tokenizer, prefix, suffix, budget, extra_context, path=path).text


def fim_text(tokenizer, prefix: str, suffix: str, budget: PromptBudget = PromptBudget(),
             extra_context: Sequence[tuple[str, str]] = (), *, path: str | None = None,
             middle_from: int | None = None) -> FimText:
    """:func:`build_fim_text`, and where its middle starts. ``middle_from``: a ``psm-mid`` middle starts
    there (an offset in ``prefix`` at a line's code, as a prompt built before returned it) instead of where
    the cursor's paragraph and block put it, as long as the middle stays under the prefix's budget: the
    prompt the cache holds goes on while a new start would evaluate the suffix again (see
    ``Completer.build_prompt``)."""
    cut = len(prefix)
    prefix = stable_prefix(prefix, budget)
    cut -= len(prefix)
    context_text, used_extra = render_context(tokenizer, extra_context, budget.extra)
    if context_text:
        current_entry = f"{FILE_SEP}{path or 'current'}\n"
        context_text += current_entry
        used_extra += _token_count(tokenizer, current_entry)
    suffix_text = trim_suffix(tokenizer, suffix, budget.suffix)
    # The window around the cursor never takes the context's tokens, even when there is little context:
    # its start then depends on the cursor alone, and context turning over does not move it (the cache
    # keeps it), nor does a file with no neighbours get a longer prompt than one with them.
    prefix_budget = budget.total - max(budget.extra, used_extra) - _token_count(tokenizer, suffix_text)
    if budget.layout == "psm-mid":
        head_end = prefix.rfind("\n") + 1
        line_head = prefix[head_end:]
        start = middle_start(prefix, head_end)
        start = _middle_within(tokenizer, prefix, start, head_end, prefix_budget // 3)
        if middle_from is not None and _code_starts_at(prefix, middle_from - cut):
            start = middle_from - cut
        # Only indentation on the cursor's line: it stays in the prefix, as in PSM. After <|fim_middle|> the
        # model would read it as a separate token and add a space of its own (" return" after 8 spaces).
        # An empty line after the paragraph's lines (a new line before its indentation) extends the middle.
        if line_head.strip() or (not line_head and start < head_end):
            middle = prefix[start:]
            middle_tokens = _token_count(tokenizer, middle)
            if middle_tokens < prefix_budget * 3 // 4:  # a huge cursor line: plain PSM
                prefix_text = trim_prefix(tokenizer, prefix[:start], prefix_budget - middle_tokens,
                                          budget.anchor_lines)
                return FimText(f"{context_text}{FIM_PREFIX}{prefix_text}{FIM_SUFFIX}{suffix_text}{FIM_MIDDLE}"
                               f"{middle}", cut + start)
    prefix_text = trim_prefix(tokenizer, prefix, prefix_budget, budget.anchor_lines)
    if budget.layout == "spm":
        return FimText(f"{context_text}{FIM_SUFFIX}{suffix_text}{FIM_PREFIX}{prefix_text}{FIM_MIDDLE}")
    return FimText(f"{context_text}{FIM_PREFIX}{prefix_text}{FIM_SUFFIX}{suffix_text}{FIM_MIDDLE}")


def _code_starts_at(text: str, at: int) -> bool:
    """Whether ``at`` is where the code of one of ``text``'s lines starts (after its indentation)."""
    return 0 <= at <= len(text) and _line_code_start(text, text.rfind("\n", 0, at) + 1) == at


def _middle_within(tokenizer, prefix: str, start: int, head_end: int, limit: int) -> int:
    """Where a middle starting at ``start`` starts once the lines above the cursor's are kept under
    ``limit`` tokens (a short window's paragraph soon outgrows its budget): a line that would take them to
    the limit starts the middle anew. Decided from the lines above the cursor's alone, each line's place
    from those before it: typing on a line only appends, and the prefix's end moves once in as many lines
    as fill the limit, at the Enter that ends them (the suffix is evaluated again then)."""
    if start >= head_end or _token_count(tokenizer, prefix[start:head_end]) < limit:
        return start
    line = prefix.rfind("\n", 0, start) + 1
    while line < head_end:
        following = prefix.find("\n", line) + 1
        if line > start and _token_count(tokenizer, prefix[start:following]) >= limit:
            start = _line_code_start(prefix, line)
        line = following
    return start


def _line_code_start(text: str, line_start: int) -> int:
    """Where the code of the line starting at ``line_start`` starts: after its indentation."""
    end = text.find("\n", line_start)
    line = text[line_start : end if end >= 0 else len(text)]
    return line_start + len(line) - len(line.lstrip(" \t"))


def middle_start(prefix: str, head_end: int) -> int:
    """Where a ``psm-mid`` middle starts in ``prefix`` whose cursor line starts at ``head_end``: after the
    indentation of the first line of the cursor's paragraph (the lines since the last blank one), within
    the block of :data:`MIDDLE_LINES` lines the cursor's line is in (numbered from the prefix's start,
    which :func:`stable_prefix` cuts on a multiple of them). The first line's indentation stays in the
    prefix, so the prompt is the same while that line holds only indentation (PSM) and once it has code."""
    line = prefix.count("\n", 0, head_end)
    start = head_end
    for _ in range(line % MIDDLE_LINES):
        above = prefix.rfind("\n", 0, start - 1) + 1
        if not prefix[above : start - 1].strip():
            break
        start = above
    return _line_code_start(prefix, start)


def build_fim_prompt(tokenizer, prefix: str, suffix: str, budget: PromptBudget = PromptBudget(),
                     extra_context: Sequence[tuple[str, str]] = (), *, path: str | None = None) -> list[int]:
    text = build_fim_text(tokenizer, prefix, suffix, budget, extra_context, path=path)
    return tokenizer.encode(text, add_special_tokens=False)

