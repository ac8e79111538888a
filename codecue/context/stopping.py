"""Scope-aware stopping: the syntax decides where a completion ends.

``make_stop_predicate(ctx)`` returns a function of the text generated so far that answers the index at
which the completion should be cut (``text[:cut]`` is shown), or None to keep generating:

- ``line`` scope: the end of the current line (call arguments, imports, strings, comments).
- ``statement`` scope: the statement is complete: a newline at bracket depth 0 (languages with
  ``statement_end = "newline"``), or a ``;`` at depth 0 / a closed ``}`` block (``"semicolon"``). A Python
  compound statement (``for ...:``) runs on through its indented body.
- ``block`` scope: the block body is complete: a later line's indentation drops below the body's.
- strings, docstrings and block comments also end at their closing delimiter: before it when the
  document already has it after the cursor, after it otherwise.

Predicates are pure functions of the text, so they are safe to call after every generated token.

:class:`ScopeStop` is the same stop as plain data (what the predicate reads from the cursor context and the
grammar), so that it crosses to the process that holds the models and becomes the predicate there
(:class:`codecue.engine.stops.StopRule` carries it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from codecue.context.analysis import CursorContext
from codecue.context.languages import Syntax, get_grammar

StopPredicate = Callable[[str], "int | None"]

_OPEN = "([{"
_CLOSE = ")]}"
_CONTINUATION_CHARS = ",([{=+-*/%&|<>!?.^~:"


@dataclass(frozen=True)
class ScopeStop:
    """What the stop at a cursor needs of its :class:`CursorContext` and grammar: plain, picklable data
    (no tree, no parser), turned into the predicate by :meth:`predicate` wherever the model runs."""

    context_class: str
    scope: str  # "line" | "statement" | "block"
    indentation: str
    line_prefix_blank: bool
    syntax: Syntax
    closing_delimiter: str | None = None
    delimiter_closed: bool = False
    missing_closer: str | None = None

    @classmethod
    def of(cls, ctx: CursorContext) -> ScopeStop:
        """The stop at ``ctx``; UnsupportedLanguageError when its grammar is unknown."""
        return cls(
            context_class=ctx.context_class,
            scope=ctx.scope,
            indentation=ctx.indentation,
            line_prefix_blank=ctx.line_prefix_blank,
            syntax=get_grammar(ctx.grammar or ctx.language).syntax,
            closing_delimiter=ctx.closing_delimiter,
            delimiter_closed=ctx.delimiter_closed,
            missing_closer=ctx.missing_closer,
        )

    def predicate(self) -> StopPredicate:
        """The stop predicate (see the module docstring)."""
        if self.context_class in ("string", "comment", "docstring"):
            return _literal_predicate(self)
        if self.scope == "line":
            return _cut_at_newline
        if self.scope == "block":
            return lambda text: _block_end(self, text)
        return lambda text: _statement_end(self, self.syntax, text)


def make_stop_predicate(ctx: CursorContext) -> StopPredicate:
    """The stop predicate for a completion at ``ctx`` (see the module docstring)."""
    return ScopeStop.of(ctx).predicate()


def _cut_at_newline(text: str) -> int | None:
    newline = text.find("\n")
    return newline if newline >= 0 else None


def _trimmed(text: str, end: int) -> int:
    """``end`` moved back over trailing whitespace, so a cut never leaves blank lines behind."""
    return len(text[:end].rstrip())


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _literal_predicate(ctx: ScopeStop) -> StopPredicate:
    delimiter = ctx.closing_delimiter
    multi_line = ctx.scope == "block" and delimiter is not None and delimiter not in ('"', "'")

    def stop(text: str) -> int | None:
        cut: int | None = None
        if delimiter:
            at = _find_unescaped(text, delimiter)
            if at >= 0:
                cut = _trimmed(text, at) if ctx.delimiter_closed else at + len(delimiter)
        if not multi_line:
            newline = text.find("\n")
            if newline >= 0 and (cut is None or newline < cut):
                cut = newline
        elif cut is None:
            # A docstring without its closing delimiter in sight still ends where the code dedents.
            cut = _dedent_cut(text, len(ctx.indentation))
        return cut

    return stop


def _find_unescaped(text: str, delimiter: str) -> int:
    start = 0
    while True:
        at = text.find(delimiter, start)
        if at < 0:
            return -1
        backslashes = len(text[:at]) - len(text[:at].rstrip("\\"))
        if backslashes % 2 == 0:
            return at
        start = at + 1


def _dedent_cut(text: str, min_indent: int) -> int | None:
    position = text.find("\n")
    while position >= 0:
        line_start = position + 1
        line_end = text.find("\n", line_start)
        line = text[line_start : line_end if line_end >= 0 else len(text)]
        if line.strip() and len(_indent_of(line)) < min_indent:
            return _trimmed(text, line_start)
        position = line_end
    return None


def _block_end(ctx: ScopeStop, text: str) -> int | None:
    """Cut when a line's indentation drops below the block body's (the body is complete)."""
    lines = text.split("\n")
    header_indent: str | None = None if ctx.line_prefix_blank else ctx.indentation
    body_indent: str | None = None
    if ctx.line_prefix_blank and lines[0].strip():
        body_indent = ctx.indentation + _indent_of(lines[0])
    position = len(lines[0]) + 1
    for line in lines[1:]:
        line_start = position
        position += len(line) + 1
        stripped = line.strip()
        if not stripped:
            continue
        indent = _indent_of(line)
        if body_indent is None:
            if header_indent is not None and len(indent) <= len(header_indent):
                return _closing_cut(ctx, text, line_start, line)
            body_indent = indent
            continue
        if len(indent) < len(body_indent):
            return _closing_cut(ctx, text, line_start, line)
    return None


def _closing_cut(ctx: ScopeStop, text: str, line_start: int, line: str) -> int:
    """Cut before a dedented line, or just after it when it writes the closer the document lacks."""
    closer = ctx.missing_closer
    if closer and line.lstrip().startswith(closer):
        return line_start + len(_indent_of(line)) + len(closer)
    return _trimmed(text, line_start)


def _at_line_end(line: str, syntax: Syntax, last_significant: str, first_line_indent: str) -> tuple[bool, str | None]:
    """At the end of a line of the statement, outside brackets: whether the statement ends there, and the
    indentation of the compound statement whose body this line opens (a Python ``...:``), else None."""
    stripped = line.rstrip()
    if syntax.line_continuation and stripped.endswith(syntax.line_continuation):
        return False, None
    if syntax.indent_blocks and stripped.endswith(":"):
        return False, first_line_indent
    if syntax.statement_end == "newline":
        increment = stripped.endswith(("++", "--"))  # i++ ends a statement
        return increment or not (last_significant and last_significant in _CONTINUATION_CHARS), None
    return last_significant == "}", None


def _statement_end(ctx: ScopeStop, syntax: Syntax, text: str) -> int | None:
    """Cut when the statement that the completion writes is complete."""
    quotes = sorted(syntax.quotes, key=len, reverse=True)
    multi_line = {opener: closer for opener, closer in syntax.multiline_delimiters}
    openers = sorted(set(quotes) | set(multi_line), key=len, reverse=True)
    comments = syntax.line_comments
    first_line_indent = ctx.indentation + _indent_of(text.split("\n", 1)[0]) if ctx.line_prefix_blank else ctx.indentation
    compound_indent: str | None = None  # set while inside the body of a Python compound statement
    depth = 0
    content = False  # the statement has non-blank text
    last_significant = ""
    line_start = 0
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "\n":
            if compound_indent is None and content and depth <= 0:
                ends, compound_indent = _at_line_end(text[line_start:i], syntax, last_significant,
                                                     first_line_indent)
                if ends:
                    return i
            line_start = i + 1
            i += 1
            continue
        if char in " \t\r":
            i += 1
            continue
        if line_start == i or not text[line_start:i].strip():
            # The first character of a line: a dedent back to the statement's level ends a compound
            # statement (except ``else:`` and friends); a closer that leaves the statement ends it too.
            if compound_indent is not None and len(text[line_start:i]) <= len(compound_indent):
                word_end = i
                while word_end < n and (text[word_end].isalnum() or text[word_end] == "_"):
                    word_end += 1
                word = text[i:word_end]
                keywords = syntax.continuation_keywords
                if word_end == n and any(kw.startswith(word) for kw in keywords):
                    return None  # "el" may become "else": wait for the whole word
                if word not in keywords:
                    return _trimmed(text, line_start)
            if char in _CLOSE and depth <= 0 and line_start > 0:
                return _trimmed(text, line_start)
        if any(text.startswith(marker, i) for marker in comments):
            newline = text.find("\n", i)
            if newline < 0:
                return None
            i = newline
            continue
        opener = next((o for o in openers if text.startswith(o, i)), None)
        if opener is not None:
            closer = multi_line.get(opener, opener)
            end = _find_unescaped(text[i + len(opener) :], closer)
            if end < 0:
                return None  # still inside a string or comment
            literal_end = i + len(opener) + end + len(closer)
            if opener not in multi_line and "\n" in text[i:literal_end]:
                literal_end = i + len(opener)  # an unclosed one-line string: do not swallow lines
            content = content or not opener.startswith("/*")
            if not opener.startswith("/*"):
                last_significant = closer[-1]
            i = literal_end
            continue
        content = True
        if char in _OPEN:
            depth += 1
        elif char in _CLOSE:
            depth -= 1
        elif char == ";" and depth <= 0 and not syntax.indent_blocks and compound_indent is None:
            return i + 1
        last_significant = char
        i += 1
    return None
