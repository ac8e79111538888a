"""Where is the cursor? A :class:`CursorContext` from a tree-sitter tree and the cursor's byte offset.

Completion happens in half-typed code, where trees are full of ERROR nodes. The analysis therefore works
in two phases:

1. *Lexical* (the document's own tree): is the cursor inside a comment, docstring or string? Those nodes
   survive error recovery well; unterminated literals, which tree-sitter cannot represent, are found by
   a small lexer over the cursor line and a search for an unclosed multi-line delimiter.
2. *Syntactic* (a probe tree): an identifier is inserted at the cursor and the document reparsed
   incrementally from its tree. The probe turns ``obj.|`` into a member access, ``x: |`` into a type,
   ``f(a, |`` into an argument; the innermost ``contexts.scm`` capture around the probe names the class.
   Outside captures, the probe's position decides: continuing an identifier, the first token of a
   statement (right after a block opener: ``block_start``), or the rest of an expression.

The query file of each language (``grammars/<language>/contexts.scm``) names node types; this module
only knows capture names, so a new language needs no code here.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from codecue.context.languages import SCOPES, Grammar, Syntax, get_grammar
from codecue.context.positions import LineIndex

if TYPE_CHECKING:
    import tree_sitter

# Letters only: it glues onto an identifier being typed and never starts a number, keyword or operator.
PROBE = b"CodeCueProbe"

_LEXICAL_PRIORITY = {"docstring": 0, "comment": 1, "string": 2, "code": 3}
_SYNTACTIC_PRIORITY = {"import": 0, "type_annotation": 1, "call_arguments": 2, "code": 3, "block": 4}
_IDENTIFIER = re.compile(rb"[A-Za-z_$\x80-\xff][\w$\x80-\xff]*")
_IDENTIFIER_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$") | frozenset(
    range(0x80, 0x100)
)
_NOT_IDENTIFIERS = frozenset({"true", "false", "none", "null", "nil", "undefined", "integer", "float", "number"})
_CLOSER_BYTES = b")]}>\"'`;, \t"  # what editors auto-insert after the cursor
_DEFINITION_KEYWORDS = frozenset({b"def", b"class", b"function", b"fn", b"func"})
# A line ending in one of these is not a complete statement (an argument list or expression continues).
_CONTINUATION_BYTES = frozenset(b",([=+-*/%&|<>!?.^~")
_BRACKETS = {b"(": b")", b"[": b"]", b"{": b"}"}


@dataclass(frozen=True)
class CursorContext:
    """What the syntax says about a cursor position, and how far a completion there should run."""

    language: str  # the grammar folder ("typescript" for .ts and .tsx); profiles key K by it
    context_class: str  # one of codecue.context.languages.CONTEXT_CLASSES
    scope: str  # "line" | "statement" | "block"
    indentation: str  # leading whitespace of the cursor's line
    enclosing_node_type: str | None  # the node that decided the class (e.g. "argument_list", "block")
    rest_of_line_empty: bool
    line_prefix_blank: bool  # only whitespace between the start of the line and the cursor
    grammar: str = ""  # the parser used ("tsx" for .tsx files)
    line: int = 0
    character: int = 0
    byte_offset: int = 0
    # Inside a string, docstring or block comment: the text that closes it, and whether the document
    # already has it after the cursor (then a completion must not write it again).
    closing_delimiter: str | None = None
    delimiter_closed: bool = False
    # At a block start whose block the document does not close: the closer the completion should write.
    missing_closer: str | None = None
    has_error: bool = False  # the tree around the cursor needed error recovery

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyze(text: str, language: str, line: int, character: int) -> CursorContext:
    """The context at an LSP position (0-based line, UTF-16 character) of ``text``, parsed from scratch.

    Raises ValueError for a position outside the text and UnsupportedLanguageError for a language
    without a grammar. Editors should use :class:`codecue.context.DocumentTrees`, which reparses
    incrementally.
    """
    grammar = get_grammar(language)
    data = text.encode("utf-8", errors="replace")
    index = LineIndex(data)
    offset = index.offset(data, line, character)
    parser = grammar.parser()
    tree = parser.parse(data)
    return context_at(grammar, parser, data, index, tree, offset, line, character)


def context_at(
    grammar: Grammar,
    parser: tree_sitter.Parser,
    data: bytes,
    index: LineIndex,
    tree: tree_sitter.Tree,
    offset: int,
    line: int,
    character: int,
) -> CursorContext:
    """The context at byte ``offset`` given the document's current tree (``line``/``character`` echo it)."""
    line_start, line_end = index.line_span(data, line)
    prefix = data[line_start:offset]
    rest = data[offset:line_end]
    line_text = data[line_start:line_end]
    indentation = line_text[: len(line_text) - len(line_text.lstrip(b" \t"))].decode("utf-8", "replace")
    base = {
        "language": grammar.language,
        "grammar": grammar.grammar_id,
        "indentation": indentation,
        "rest_of_line_empty": not rest.strip(),
        "line_prefix_blank": not prefix.strip(),
        "line": line,
        "character": character,
        "byte_offset": offset,
    }
    root = tree.root_node
    captures = _captures_containing(grammar.query, root, offset, offset)
    decided = _lexical_class(grammar, data, root, captures, offset, prefix)
    if decided is None:
        decided = _syntactic_class(grammar, parser, data, index, tree, captures, offset, prefix, rest)
    context_class, node_type, extra = decided
    scope = grammar.scope(context_class)
    if context_class == "docstring" and extra.get("closing_delimiter") is None:
        scope = "line"  # a doc comment made of line comments (///, Go's //) goes line by line
    if rest.strip(_CLOSER_BYTES):
        scope = "line"  # text follows on this line: the completion is filled into it and stays on it
    assert scope in SCOPES
    return CursorContext(context_class=context_class, scope=scope, enclosing_node_type=node_type, **base, **extra)


# --- phase 1: comments, docstrings, strings -------------------------------------------------------------


def _captures_containing(
    query: tree_sitter.Query, root: tree_sitter.Node, start: int, end: int
) -> list[tuple[str, tree_sitter.Node]]:
    """Captures of ``query`` whose node spans ``start..end`` (a loose filter; callers refine it)."""
    import tree_sitter

    cursor = tree_sitter.QueryCursor(query)
    cursor.set_byte_range(max(0, start - 1), end + 1)
    found = []
    for name, nodes in cursor.captures(root).items():
        for node in nodes:
            if node.start_byte <= start and node.end_byte >= end:
                found.append((name, node))
    return found


def _inside_literal(name: str, node: tree_sitter.Node, data: bytes, offset: int) -> bool:
    """Is ``offset`` inside the text of a comment/string node (not before its opening delimiter)?"""
    start, end = node.start_byte, node.end_byte
    if name == "comment" or "comment" in node.type:
        if start < offset < end:
            return True
        # A line comment runs to the end of its line; a closed block comment (or one that holds its
        # newline) does not continue at its end.
        tail = data[max(start, end - 2) : end]
        return offset == end and not tail.endswith((b"*/", b"\n"))
    if node.child_count >= 2:
        opener = node.child(0)
        closer = node.child(node.child_count - 1)
        assert opener is not None and closer is not None
        if offset < opener.end_byte:
            return False
        if not _is_closing_delimiter(opener, closer):  # no closing delimiter: the literal runs on
            return offset <= end
        return offset <= closer.start_byte
    return start < offset < end


def _is_closing_delimiter(opener: tree_sitter.Node, closer: tree_sitter.Node) -> bool:
    """Does a literal node end with a real closing delimiter (not content, not a MISSING token)?"""
    if closer.is_missing or closer.start_byte == closer.end_byte:
        return False
    # Delimiters are anonymous tokens, or named external tokens like Python's string_end.
    return not closer.is_named or closer.type.endswith("_end") or closer.type == opener.type


def _literal_delimiter(name: str, node: tree_sitter.Node, data: bytes) -> tuple[str | None, bool]:
    """The closing delimiter of a literal node and whether the document already has it."""
    text_start = data[node.start_byte : node.start_byte + 3]
    if name == "comment" or "comment" in node.type:
        if not text_start.startswith(b"/*"):
            return None, False  # a line comment: it ends with the line
        closed = node.end_byte - node.start_byte >= 4 and data[node.end_byte - 2 : node.end_byte] == b"*/"
        return "*/", closed
    if node.child_count >= 2:
        opener = node.child(0)
        closer = node.child(node.child_count - 1)
        assert opener is not None and closer is not None
        if _is_closing_delimiter(opener, closer):
            return data[closer.start_byte : closer.end_byte].decode("utf-8", "replace"), True
        quote = data[opener.start_byte : opener.end_byte].decode("utf-8", "replace").lstrip("bfruBFRU")
        return (quote or None), False
    return None, False


def _lexical_class(
    grammar: Grammar,
    data: bytes,
    root: tree_sitter.Node,
    captures: list[tuple[str, tree_sitter.Node]],
    offset: int,
    prefix: bytes,
) -> tuple[str, str | None, dict[str, Any]] | None:
    literals = [
        (name, node)
        for name, node in captures
        if name in _LEXICAL_PRIORITY and _inside_literal(name, node, data, offset)
    ]
    if literals:
        name, node = min(literals, key=lambda c: (c[1].end_byte - c[1].start_byte, _LEXICAL_PRIORITY[c[0]]))
        if name == "code":
            return None
        if name == "string" and any(n == "import" for n, _ in captures):
            return "import", node.type, {}
        delimiter, closed = _literal_delimiter(name, node, data)
        return name, node.type, {"closing_delimiter": delimiter, "delimiter_closed": closed}
    return _unterminated_literal(grammar, data, root, offset, prefix)


def _unterminated_literal(
    grammar: Grammar, data: bytes, root: tree_sitter.Node, offset: int, prefix: bytes
) -> tuple[str, str | None, dict[str, Any]] | None:
    """Strings and comments that are still open at the cursor, which tree-sitter cannot represent."""
    syntax = grammar.syntax
    # A multi-line literal opened on an earlier line (or this one) and not closed before the cursor.
    window = max(0, offset - 8192)
    for opener_text, closer_text in syntax.multiline_delimiters:
        opener, closer = opener_text.encode(), closer_text.encode()
        at = data.rfind(opener, window, offset)
        if at < 0:
            continue
        if opener != closer and data.find(closer, at + len(opener), offset) >= 0:
            continue
        # Skip delimiters that belong to a complete literal (a closing quote, "/*" inside a string, ...).
        probe_at = at + len(opener) - 1
        if any(
            name in _LEXICAL_PRIORITY and name != "code" and not node.has_error
            for name, node in _captures_containing(grammar.query, root, probe_at, probe_at + 1)
        ):
            continue
        if opener == closer and _inside_line_literal(syntax, data[data.rfind(b"\n", 0, at) + 1 : at]) is not None:
            continue
        is_comment = opener_text.startswith("/*")
        docstring = opener_text == "/**" or data[at : at + 3] == b"/**" or _python_docstring_opening(data, at)
        name = "docstring" if docstring else ("comment" if is_comment else "string")
        return name, "ERROR", {"closing_delimiter": closer_text, "delimiter_closed": False, "has_error": True}
    state = _inside_line_literal(syntax, prefix)
    if state is None:
        return None
    name, delimiter = state
    return name, "ERROR", {"closing_delimiter": delimiter, "delimiter_closed": False, "has_error": True}


def _inside_line_literal(syntax: Syntax, prefix: bytes) -> tuple[str, str | None] | None:
    """Scan one line's text up to the cursor: inside an open string or a line comment?"""
    quotes = sorted((q.encode() for q in syntax.quotes), key=len, reverse=True)
    inline = [(o.encode(), c.encode()) for o, c in syntax.multiline_delimiters]
    comments = [c.encode() for c in syntax.line_comments]
    i, n = 0, len(prefix)
    while i < n:
        matched = False
        for marker in comments:
            if prefix.startswith(marker, i):
                return "comment", None
        for opener, closer in inline:
            if prefix.startswith(opener, i):
                end = prefix.find(closer, i + len(opener))
                if end < 0:
                    name = "comment" if opener.startswith(b"/*") else "string"
                    return name, closer.decode()
                i = end + len(closer)
                matched = True
                break
        if matched:
            continue
        for quote in quotes:
            if prefix.startswith(quote, i):
                j = i + len(quote)
                while j < n:
                    if prefix[j] == 0x5C:  # backslash escapes the next byte
                        j += 2
                        continue
                    if prefix.startswith(quote, j):
                        break
                    j += 1
                if j >= n:
                    return "string", quote.decode()
                i = j + len(quote)
                matched = True
                break
        if not matched:
            i += 1
    return None


def _python_docstring_opening(data: bytes, at: int) -> bool:
    """A triple quote that starts the body of a ``def``/``class`` (or the module) opens a docstring."""
    if data[at : at + 3] not in (b'"""', b"'''"):
        return False
    line_start = data.rfind(b"\n", 0, at) + 1
    if data[line_start:at].strip():
        return False
    before = data[:line_start].rstrip()
    if not before:
        return True
    previous_line = before[before.rfind(b"\n") + 1 :].strip()
    return previous_line.endswith(b":") and previous_line.split(b" ", 1)[0] in (b"def", b"class", b"async")


# --- phase 2: the probe tree ------------------------------------------------------------------------------


def _probe_tree(
    parser: tree_sitter.Parser, tree: tree_sitter.Tree, data: bytes, index: LineIndex, offset: int
) -> tree_sitter.Tree:
    row, column = index.point(offset)
    edited = tree.copy()
    edited.edit(
        start_byte=offset,
        old_end_byte=offset,
        new_end_byte=offset + len(PROBE),
        start_point=(row, column),
        old_end_point=(row, column),
        new_end_point=(row, column + len(PROBE)),
    )
    return parser.parse(data[:offset] + PROBE + data[offset:], edited)


def _syntactic_class(
    grammar: Grammar,
    parser: tree_sitter.Parser,
    data: bytes,
    index: LineIndex,
    tree: tree_sitter.Tree,
    document_captures: list[tuple[str, tree_sitter.Node]],
    offset: int,
    prefix: bytes,
    rest: bytes,
) -> tuple[str, str | None, dict[str, Any]]:
    probe_end = offset + len(PROBE)
    probe_tree = _probe_tree(parser, tree, data, index, offset)
    probe_root = probe_tree.root_node
    probe_node = probe_root.named_descendant_for_byte_range(offset, probe_end) or probe_root
    containers = [
        (name, node)
        for name, node in _captures_containing(grammar.query, probe_root, offset, probe_end)
        if name in _SYNTACTIC_PRIORITY and (name != "call_arguments" or node.start_byte < offset)
    ]
    containers.sort(key=lambda c: (c[1].end_byte - c[1].start_byte, _SYNTACTIC_PRIORITY[c[0]]))
    container: tree_sitter.Node | None = None
    in_code_reset = False
    if containers:
        name, container = containers[0]
        if name == "type_annotation" and container.start_byte == offset:
            # A type as the first token of a declaration (``struct S { |``, Go's embedded field) is
            # where a new member starts: the position in the block decides.
            block = next((node for n, node in containers if n == "block"), None)
            if block is not None and _statement_in(probe_node, block.id).start_byte == offset:
                name, container = "block", block
        if name in ("import", "type_annotation", "call_arguments"):
            return name, container.type, {}
        in_code_reset = name == "code"
    container_id = container.id if container is not None else probe_root.id

    # The ERROR node (if any) between the probe and its container: error recovery lost the structure.
    error_node = None
    node: tree_sitter.Node | None = probe_node
    while node is not None and node.id != container_id:
        if node.is_error:
            error_node = node
            break
        node = node.parent
    extra: dict[str, Any] = {"has_error": error_node is not None}
    if error_node is not None:
        recovered = _recover_from_error(grammar, data, error_node, offset)
        if recovered is not None:
            return recovered, error_node.type, extra

    if _continues_identifier(grammar, data, tree.root_node, offset, prefix):
        return "identifier", probe_node.parent.type if probe_node.parent else probe_node.type, extra

    container_type = container.type if container is not None else probe_root.type
    at_statement = not in_code_reset and _at_statement_start(
        probe_node, container_id, offset, error_node, data, tree, prefix, grammar.syntax
    )
    if not at_statement and not in_code_reset and not prefix.strip() and not rest.strip():
        # A blank line directly inside a block of the document is a statement position, even where the
        # probe made the parser read something else (C++ takes ``f() {\n probe }`` for an initializer).
        innermost = tree.root_node.named_descendant_for_byte_range(offset, offset)
        block = next(
            (n for name, n in document_captures if name == "block" and innermost is not None and n.id == innermost.id),
            None,
        )
        if block is not None and block.start_byte < offset < block.end_byte and not block.has_error:
            at_statement, container_type = True, block.type
    if at_statement:
        opener_at = _previous_significant(data, tree.root_node, offset)
        if opener_at is not None and any(
            data.startswith(o.encode(), opener_at - len(o.encode()) + 1) for o in grammar.syntax.block_openers
        ):
            extra["missing_closer"] = _missing_closer(grammar, tree.root_node, data, opener_at)
            return "block_start", container_type, extra
        return "statement_start", container_type, extra
    return "expression_tail", container_type, extra


def _leaves(node: tree_sitter.Node, before: int, limit: int = 4000) -> list[tree_sitter.Node]:
    """The leaf tokens of ``node`` that end at or before ``before``, in order (at most ``limit``)."""
    leaves: list[tree_sitter.Node] = []
    stack = [node]
    while stack and len(leaves) < limit:
        current = stack.pop()
        if current.start_byte >= before:
            continue
        if current.child_count == 0:
            if current.end_byte <= before:
                leaves.append(current)
            continue
        stack.extend(reversed(current.children))
    return leaves


def _recover_from_error(grammar: Grammar, data: bytes, error_node: tree_sitter.Node, offset: int) -> str | None:
    """Classify inside an ERROR node from its tokens: an unclosed import or call argument list."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    before_cursor = data[line_start:offset].rstrip()
    if any(before_cursor.endswith(marker.encode()) for marker in grammar.syntax.type_markers):
        return "type_annotation"
    leaves = _leaves(error_node, offset)
    if not leaves:
        return None
    stack: list[int] = []
    for i, leaf in enumerate(leaves):
        token = data[leaf.start_byte : leaf.end_byte]
        if token in _BRACKETS:
            stack.append(i)
        elif stack and token == _BRACKETS[data[leaves[stack[-1]].start_byte : leaves[stack[-1]].end_byte]]:
            stack.pop()
    first = data[leaves[0].start_byte : leaves[0].end_byte].decode("utf-8", "replace")
    # An import that error recovery swallowed: on the cursor's line, or still inside its brackets.
    if first in grammar.syntax.import_keywords and (leaves[0].start_byte >= line_start or stack):
        return "import"
    if not stack:
        return None
    open_at = stack[-1]
    bracket = data[leaves[open_at].start_byte : leaves[open_at].end_byte]
    if bracket == b"{" and not grammar.syntax.indent_blocks:
        return None  # a block or an object literal: the position decides
    if bracket != b"(" or open_at == 0:
        return "expression_tail"  # inside a list, dict or set literal
    callee = leaves[open_at - 1]
    callee_text = data[callee.start_byte : callee.end_byte]
    is_callee = (callee.is_named and _IDENTIFIER.fullmatch(callee_text) is not None) or callee_text in (b")", b"]")
    definition = open_at >= 2 and data[leaves[open_at - 2].start_byte : leaves[open_at - 2].end_byte] in (
        _DEFINITION_KEYWORDS
    )
    return "call_arguments" if is_callee and not definition else "expression_tail"


def _continues_identifier(grammar: Grammar, data: bytes, root: tree_sitter.Node, offset: int, prefix: bytes) -> bool:
    """Is the cursor right after an identifier (``na|``) or a member operator (``obj.|``)?"""
    if offset > 0 and data[offset - 1] in _IDENTIFIER_CHARS:
        leaf = root.descendant_for_byte_range(offset - 1, offset)
        if leaf is None or not leaf.start_byte < offset <= leaf.end_byte:
            return False
        text = data[leaf.start_byte : leaf.end_byte]
        return leaf.is_named and leaf.type not in _NOT_IDENTIFIERS and _IDENTIFIER.fullmatch(text) is not None
    for operator in grammar.syntax.member_operators:
        op = operator.encode()
        if prefix.endswith(op):
            before = prefix[: -len(op)].rstrip(b" \t")
            if before.endswith(op[:1]) and op in (b".", b":"):  # "..", "..." spread and ranges
                return False
            if before and (before[-1] in _IDENTIFIER_CHARS or before[-1:] in (b")", b"]", b">", b'"', b"'")):
                last_word = re.search(rb"[\w$\x80-\xff]+$", before)
                return not (last_word and last_word.group().isdigit())
    return False


def _at_statement_start(
    probe_node: tree_sitter.Node,
    container_id: int,
    offset: int,
    error_node: tree_sitter.Node | None,
    data: bytes,
    tree: tree_sitter.Tree,
    prefix: bytes,
    syntax: Syntax,
) -> bool:
    """Is the probe the first token of a statement directly inside its block (or the file)?"""
    statement = _statement_in(probe_node, container_id)
    if statement.start_byte == offset and statement.parent is not None:
        return True
    if error_node is None:
        return False
    if prefix.strip():
        # ``if (x) {|`` where the missing braces broke the tree.
        return not syntax.indent_blocks and prefix.rstrip().endswith(b"{")
    # Error recovery merged the probe into something larger: judge by the text before the cursor.
    previous = _previous_significant(data, tree.root_node, offset)
    if previous is None:
        return True
    if any(data.startswith(o.encode(), previous - len(o.encode()) + 1) for o in syntax.block_openers):
        return True
    return data[previous] not in _CONTINUATION_BYTES and data[previous] not in b"{"


def _statement_in(node: tree_sitter.Node, container_id: int) -> tree_sitter.Node:
    """The ancestor of ``node`` (or itself) that is a direct child of the container node."""
    while node.parent is not None and node.parent.id != container_id:
        node = node.parent
    return node


def _previous_significant(data: bytes, root: tree_sitter.Node, offset: int) -> int | None:
    """Index of the last byte before ``offset`` that is neither whitespace nor inside a comment."""
    i = offset - 1
    for _ in range(64):  # at most this many comments are skipped
        while i >= 0 and data[i] in b" \t\r\n":
            i -= 1
        if i < 0:
            return None
        node = root.descendant_for_byte_range(i, i + 1)
        if node is not None and node.is_extra and "comment" in node.type:
            i = node.start_byte - 1
            continue
        return i
    return i


def _missing_closer(grammar: Grammar, root: tree_sitter.Node, data: bytes, opener_at: int) -> str | None:
    """For a ``{`` block start: ``"}"`` when the document does not close the block, else None."""
    if data[opener_at : opener_at + 1] != b"{" or grammar.syntax.indent_blocks:
        return None
    opener = root.descendant_for_byte_range(opener_at, opener_at + 1)
    block = opener.parent if opener is not None else None
    if block is None or block.is_error:
        return "}"
    last = block.child(block.child_count - 1)
    if last is None or last.is_missing or data[last.start_byte : last.end_byte] != b"}":
        return "}"
    return None
