"""Where a completion stops, as data: a :class:`StopRule` is built where the cursor context is known (the
language server, ``codecue complete``) and turned into the engine's stop predicate where the model runs
(:func:`predicate_for`), the server's own process or the model process: a rule pickles, a closure over
the server's state does not, and calling a predicate across the process pipe every round costs a round
trip each time.

A rule combines up to three cuts, the earliest wins:

- the syntax's stop at the cursor (:class:`codecue.context.stopping.ScopeStop`: the statement, block,
  line or literal is complete), or, where no syntax is known, the first blank line after some text;
- the point where the text starts repeating the code after the cursor
  (:func:`codecue.engine.postprocess.suffix_repeat_cut`);
- for the line after a line's end (the suggestion held for Enter), the end of that line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from codecue.engine.postprocess import suffix_repeat_cut

StopPredicate = Callable[[str], "int | None"]


class ScopeRule(Protocol):
    """A syntax-aware stop as picklable data (:class:`codecue.context.stopping.ScopeStop`; the engine
    never imports tree-sitter, so it knows it by this protocol)."""

    def predicate(self) -> StopPredicate: ...


def blank_line_stop(text: str) -> int | None:
    """Stop at the first blank line after some text: an inline suggestion is one block, not a file."""
    stripped = text.lstrip("\n")
    cut = stripped.find("\n\n")
    if cut < 0:
        return None
    return len(text) - len(stripped) + cut + 1


def next_line_stop(text: str) -> int | None:
    """Stop at the end of the first line that holds some text: a completion at a new line's start (the line
    prepared for Enter) is that line."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        if text[start:end].strip():
            return end
        start = end + 1
    return None


@dataclass(frozen=True)
class SuffixRepeat:
    """What :func:`suffix_repeat_cut` reads of the document around the cursor: the cursor's line up to
    the cursor, and the suffix up to its second non-blank line after the cursor's line (not the whole
    document, which would cross the pipe with every request)."""

    line_head: str
    suffix_head: str

    @classmethod
    def around(cls, prefix: str, suffix: str) -> SuffixRepeat:
        end = suffix.find("\n")
        found = 0
        while end >= 0 and found < 2:
            line_end = suffix.find("\n", end + 1)
            if suffix[end + 1 : line_end if line_end >= 0 else len(suffix)].strip():
                found += 1
            end = line_end
        return cls(prefix[prefix.rfind("\n") + 1 :], suffix if end < 0 else suffix[:end])

    def cut(self, text: str) -> int | None:
        return suffix_repeat_cut(text, self.line_head, self.suffix_head)


@dataclass(frozen=True)
class StopRule:
    """Where a completion stops (see the module docstring): frozen and picklable."""

    scope: ScopeRule | None = None
    blank_line: bool = False  # stop at the first blank line after some text
    suffix_repeat: SuffixRepeat | None = None
    next_line: bool = False  # stop at the end of the first line with text (:func:`next_line_stop`)

    @classmethod
    def at_cursor(cls, scope: ScopeRule | None, prefix: str | None = None, suffix: str = "", *,
                  next_line: bool = False) -> StopRule:
        """The syntax's stop, else the first blank line; with ``prefix``, also where the text starts
        repeating ``suffix`` (what the language server and ``codecue complete`` stop at). ``next_line``:
        the end of the first line with text instead of the syntax's stop or a blank line."""
        repeat = SuffixRepeat.around(prefix, suffix) if prefix is not None else None
        if next_line:
            return cls(suffix_repeat=repeat, next_line=True)
        return cls(scope=scope, blank_line=scope is None, suffix_repeat=repeat)


def predicate_for(rule: StopRule | None, extra: StopPredicate | None = None) -> StopPredicate | None:
    """The engine's stop predicate for ``rule``, cutting also where ``extra`` (a caller's own predicate)
    cuts: the earliest cut wins. None when there is nothing to stop at. Called once per generation, where
    the model runs."""
    cuts: list[StopPredicate] = []
    if rule is not None:
        if rule.scope is not None:
            cuts.append(rule.scope.predicate())
        if rule.blank_line:
            cuts.append(blank_line_stop)
        if rule.suffix_repeat is not None:
            cuts.append(rule.suffix_repeat.cut)
        if rule.next_line:
            cuts.append(next_line_stop)
    if extra is not None:
        cuts.append(extra)
    if len(cuts) <= 1:
        return cuts[0] if cuts else None

    def earliest(text: str) -> int | None:
        found = [c for c in (cut(text) for cut in cuts) if c is not None]
        return min(found) if found else None

    return earliest
