"""What a completion must not do, whatever the model wrote: repeat the code after the cursor, or end
in the middle of a line.

Both are pure functions of text, used as a stop predicate while the model generates (so a repetition
also stops the generation early) and once more on the final text.
"""

from __future__ import annotations

from collections.abc import Callable

# A repeated line this short ("}", "end", ")") is too common to be a repetition by itself: it must match
# together with the line after it.
MIN_LINE_CHARS = 4


def _next_lines(suffix: str, count: int = 2) -> list[str]:
    """The first ``count`` non-blank lines after the cursor's line, right-stripped."""
    out = []
    for line in suffix.split("\n")[1:]:
        if line.strip():
            out.append(line.rstrip())
            if len(out) == count:
                break
    return out


def _balance(text: str) -> int:
    """Open minus closed brackets (strings are not told apart: a heuristic, as the cut it guards is)."""
    return sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def _rest_of_line_cut(first_line: str, line_head: str, rest_of_line: str) -> int | None:
    """Where ``first_line`` ends by writing the rest of the cursor's line again (``)`` after
    ``foo(a, b)``), when cutting it there brings the line's brackets closer to balance."""
    rest = rest_of_line.strip()
    head = first_line.rstrip()
    if not rest or not head.endswith(rest):
        return None
    cut = len(head) - len(rest)
    if cut <= 0 or not head[:cut].strip():
        return None
    whole = abs(_balance(line_head + head + rest_of_line))
    trimmed = abs(_balance(line_head + head[:cut] + rest_of_line))
    return cut if trimmed < whole or (trimmed == whole and head[:cut].rstrip().endswith(rest)) else None


def suffix_repeat_cut(text: str, prefix: str, suffix: str, *, final: bool = False) -> int | None:
    """Where ``text`` (the completion, inserted between ``prefix`` and ``suffix``) starts to repeat the
    code after the cursor, or None.

    Two repetitions are caught:

    - a completed line equal (indentation included) to the first non-blank line after the cursor's
      line: the completion is cut before it. A short line such as ``}`` counts only when the next
      completed line also repeats the next suffix line.
    - the rest of the cursor's line (``)`` or ``):`` after the cursor) written again at the end of the
      completion's first line, once that line is complete (``final``: the text will not grow).
    """
    rest_of_line = suffix.split("\n", 1)[0]
    line_head = prefix[prefix.rfind("\n") + 1:]
    lines = text.split("\n")
    if len(lines) > 1 or final:
        cut = _rest_of_line_cut(lines[0], line_head, rest_of_line)
        if cut is not None:
            return cut
    following = _next_lines(suffix)
    if not following:
        return None
    offset = 0
    for i, line in enumerate(lines[:-1] if not final else lines):  # only completed lines
        full = (line_head + line) if i == 0 else line
        if full.strip() and full.rstrip() == following[0]:
            if len(following[0].strip()) >= MIN_LINE_CHARS:
                return offset
            later = lines[i + 1] if i + 1 < len(lines) - (0 if final else 1) else None
            if later is not None and len(following) > 1 and later.rstrip() == following[1]:
                return offset
        offset += len(line) + 1
    return None


def suffix_repeat_stop(prefix: str, suffix: str) -> Callable[[str], int | None]:
    """A stop predicate for the engine: the cut where the text starts repeating the suffix."""
    return lambda text: suffix_repeat_cut(text, prefix, suffix)


def combine_stops(*predicates: Callable[[str], int | None] | None) -> Callable[[str], int | None]:
    """The earliest cut of several stop predicates (None ones are skipped)."""
    active = [p for p in predicates if p is not None]

    def stop(text: str) -> int | None:
        cuts = [c for c in (p(text) for p in active) if c is not None]
        return min(cuts) if cuts else None

    return stop


def whole_lines(text: str) -> str:
    """``text`` without a last line the generation left half-written (it ran out of tokens): the
    completed lines. A completion whose first non-blank line is not complete is kept (it is all there
    is, and it was shown while it grew)."""
    first = len(text) - len(text.lstrip())
    if text.find("\n", first) < 0:
        return text
    return text[: text.rfind("\n") + 1]


def streamable(text: str, prefix: str = "", suffix: str = "") -> str:
    """The part of a growing completion to show now, such that the text finally shown
    (:func:`tidy_completion`) starts with it whatever comes next: the first non-blank line as it grows,
    then whole lines only (the token limit may leave a last line half-written, which is then dropped),
    held back where it would repeat the code after the cursor, and without the newline that ends the
    last line (the final text drops it where the document brings its own)."""
    kept = whole_lines(text)
    cut = suffix_repeat_cut(kept, prefix, suffix, final=True)
    if cut is not None:
        kept = kept[:cut]
    return kept.rstrip("\n") if kept.strip() else kept


def tidy_completion(text: str, prefix: str, suffix: str, stop_reason: str) -> str:
    """The completion as shown: without a repetition of the suffix, and without a half line."""
    cut = suffix_repeat_cut(text, prefix, suffix, final=True)
    if cut is not None:
        text = text[:cut]
    elif stop_reason == "max_tokens":
        text = whole_lines(text)
    if suffix.startswith("\n") or not suffix:
        text = text.rstrip("\n") if text.strip() else text  # the suffix brings the line's own newline
    return text
