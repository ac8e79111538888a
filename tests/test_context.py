"""Cursor context analysis: fixture cases per language, positions, languages, incremental trees."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from codecue.context import (
    CONTEXT_CLASSES,
    DocumentTrees,
    LineIndex,
    UnsupportedLanguageError,
    analyze,
    available_languages,
    get_grammar,
    language_for_lsp_id,
    language_for_path,
    utf16_to_byte_offset,
)

FIXTURES = Path(__file__).parent / "fixtures" / "context"
CURSOR = "█"
ALL_LANGUAGES = ["c", "cpp", "go", "java", "javascript", "python", "rust", "typescript"]


@dataclass
class Case:
    grammar: str
    index: int
    context_class: str
    scope: str
    fields: dict[str, str]
    text: str  # without the cursor marker
    line: int
    character: int  # UTF-16

    @property
    def id(self) -> str:
        return f"{self.grammar}-{self.index}-{self.context_class}"


def _position(text_before: str) -> tuple[int, int]:
    line = text_before.count("\n")
    column_text = text_before[text_before.rfind("\n") + 1 :]
    return line, len(column_text.encode("utf-16-le")) // 2


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(FIXTURES.glob("*.cases")):
        grammar = path.stem
        blocks = path.read_text(encoding="utf-8").split("### ")[1:]
        for index, block in enumerate(blocks):
            header, _, body = block.partition("\n")
            context_class, scope, *pairs = header.split()
            fields = dict(pair.split("=", 1) for pair in pairs)
            lines = [line for line in body.split("\n") if not line.startswith("#:")]
            document = "\n".join(lines).rstrip("\n") + "\n"
            assert document.count(CURSOR) == 1, f"{path.name} case {index}: need exactly one cursor marker"
            at = document.index(CURSOR)
            line, character = _position(document[:at])
            text = document.replace(CURSOR, "")
            cases.append(Case(grammar, index, context_class, scope, fields, text, line, character))
    return cases


CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fixture_case(case: Case) -> None:
    context = analyze(case.text, case.grammar, case.line, case.character)
    assert (context.context_class, context.scope) == (case.context_class, case.scope), context
    assert context.language == get_grammar(case.grammar).language
    for name, expected in case.fields.items():
        expected = expected.replace("\\n", "\n").replace("\\s", " ")
        actual = getattr(context, name)
        if isinstance(actual, bool):
            assert actual == (expected == "True"), (name, context)
        else:
            assert str(actual) == expected, (name, context)


@pytest.mark.parametrize("grammar", [*ALL_LANGUAGES, "tsx"])
def test_fixtures_cover_every_class(grammar: str) -> None:
    covered = {c.context_class for c in CASES if c.grammar == grammar}
    expected = set(CONTEXT_CLASSES)
    if grammar == "javascript":
        expected.discard("type_annotation")  # JavaScript has no type syntax
    assert expected - covered == set()


def test_every_grammar_folder_has_fixtures_and_compiles() -> None:
    assert available_languages() == ALL_LANGUAGES
    fixture_grammars = {p.stem for p in FIXTURES.glob("*.cases")}
    for language in ALL_LANGUAGES:
        grammar = get_grammar(language)
        assert grammar.query.pattern_count > 0
        assert language in fixture_grammars
        for context_class in CONTEXT_CLASSES:
            assert grammar.scope(context_class) in ("line", "statement", "block")
    assert get_grammar("tsx").query.pattern_count > 0


def test_context_fields_and_to_dict() -> None:
    text = "def f(x):\n    return g(x, )\n"
    context = analyze(text, "python", 1, len("    return g(x, "))
    as_dict = context.to_dict()
    assert as_dict["context_class"] == "call_arguments"
    assert as_dict["indentation"] == "    "
    assert as_dict["rest_of_line_empty"] is False  # the auto-closed ")" follows
    assert as_dict["scope"] == "line"
    assert as_dict["line_prefix_blank"] is False
    assert as_dict["enclosing_node_type"] == "argument_list"
    assert as_dict["byte_offset"] == text.index(", )") + 2


def test_text_after_the_cursor_narrows_the_scope_to_the_line() -> None:
    text = "def f():\n    x = compute()\n"
    context = analyze(text, "python", 1, len("    x = "))
    assert context.context_class == "expression_tail"
    assert context.rest_of_line_empty is False
    assert context.scope == "line"
    statement = analyze("def f():\n    x = \n", "python", 1, len("    x = "))
    assert statement.scope == "statement"


# --- languages ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "grammar"),
    [
        ("a/b/c.py", "python"),
        ("x.PYI", "python"),
        ("x.js", "javascript"),
        ("x.jsx", "javascript"),
        ("x.ts", "typescript"),
        ("x.tsx", "tsx"),
        ("x.go", "go"),
        ("x.rs", "rust"),
        ("X.java", "java"),
        ("x.c", "c"),
        ("x.h", "c"),
        ("x.cpp", "cpp"),
        ("x.hpp", "cpp"),
        ("README.md", None),
        ("Makefile", None),
    ],
)
def test_language_for_path(path: str, grammar: str | None) -> None:
    assert language_for_path(path) == grammar


def test_language_for_lsp_id() -> None:
    assert language_for_lsp_id("typescriptreact") == "tsx"
    assert language_for_lsp_id("javascriptreact") == "javascript"
    assert language_for_lsp_id("python") == "python"
    assert language_for_lsp_id("cpp") == "cpp"
    assert language_for_lsp_id("cobol") is None
    assert get_grammar("typescriptreact").language == "typescript"


def test_unknown_language_is_a_clear_error() -> None:
    with pytest.raises(UnsupportedLanguageError, match="cobol"):
        analyze("x", "cobol", 0, 0)


def test_broken_grammar_folder_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from codecue.context.languages import GrammarConfigError, reload_grammars

    folder = tmp_path / "python"
    folder.mkdir()
    source = (FIXTURES.parents[2] / "grammars" / "python" / "settings.toml").read_text()
    (folder / "settings.toml").write_text(source)
    (folder / "contexts.scm").write_text("(no_such_node) @comment\n")
    monkeypatch.setenv("CODECUE_GRAMMARS_DIR", str(tmp_path))
    reload_grammars()
    try:
        with pytest.raises(GrammarConfigError, match="contexts.scm"):
            analyze("x = 1\n", "python", 0, 0)
        (folder / "contexts.scm").write_text("(comment) @not_a_class\n")
        reload_grammars()
        with pytest.raises(GrammarConfigError, match="not_a_class"):
            analyze("x = 1\n", "python", 0, 0)
        (folder / "settings.toml").write_text(source.replace('scope = "line"', 'scope = "page"', 1))
        reload_grammars()
        with pytest.raises(GrammarConfigError, match="scope"):
            analyze("x = 1\n", "python", 0, 0)
    finally:
        monkeypatch.delenv("CODECUE_GRAMMARS_DIR")
        reload_grammars()


# --- positions ----------------------------------------------------------------------------------------


def test_utf16_positions_to_bytes() -> None:
    text = "a = 'é😀x'\nb\r\nc"
    # "é" is 1 UTF-16 unit and 2 bytes; "😀" is 2 units and 4 bytes.
    assert utf16_to_byte_offset(text, 0, 6) == len("a = 'é".encode())
    assert utf16_to_byte_offset(text, 0, 8) == len("a = 'é😀".encode())
    assert utf16_to_byte_offset(text, 0, 10) == len("a = 'é😀x'".encode())  # end of line
    assert utf16_to_byte_offset(text, 1, 1) == len("a = 'é😀x'\nb".encode())  # before "\r\n"
    assert utf16_to_byte_offset(text, 2, 1) == len(text.encode())
    with pytest.raises(ValueError, match="surrogate pair"):
        utf16_to_byte_offset(text, 0, 7)
    with pytest.raises(ValueError, match="past the end of line 1"):
        utf16_to_byte_offset(text, 1, 2)  # the "\r" is part of the line break
    with pytest.raises(ValueError, match="past the end of the document"):
        utf16_to_byte_offset(text, 3, 0)
    with pytest.raises(ValueError, match="past the end of line 0"):
        utf16_to_byte_offset(text, 0, 11)
    with pytest.raises(ValueError, match="negative"):
        utf16_to_byte_offset(text, -1, 0)


def test_line_index_offsets_and_points_are_in_utf8_bytes() -> None:
    text = "ab😀c\r\n\nxyz"
    data = text.encode()
    index = LineIndex(data)
    assert index.line_count == 3
    for line, character, prefix in [(0, 0, ""), (0, 2, "ab"), (0, 4, "ab😀"), (0, 5, "ab😀c"), (1, 0, "ab😀c\r\n"),
                                    (2, 3, text)]:
        offset = index.offset(data, line, character)
        assert offset == len(prefix.encode())
        assert index.point(offset) == (line, len(prefix.encode()) - index.starts[line])
    with pytest.raises(ValueError, match="past the end of line 0"):
        index.offset(data, 0, 6)  # the "\r" belongs to the line break


def test_line_index_apply_edit_matches_a_fresh_index() -> None:
    rng = random.Random(7)
    text = "one\ntwo\n\nthree\nfour"
    index = LineIndex(text.encode())
    for _ in range(300):
        data = text.encode()
        start = rng.randrange(len(data) + 1)
        end = rng.randrange(start, min(len(data), start + 6) + 1)
        insert = rng.choice(["", "x", "\n", "a\nb", "\n\n", "yy"])
        new = data[:start] + insert.encode() + data[end:]
        index.apply_edit(new, start, end, start + len(insert))
        text = new.decode()
        assert index.starts == LineIndex(new).starts
        assert index.size == len(new)


def test_analyze_rejects_positions_outside_the_text() -> None:
    with pytest.raises(ValueError, match="past the end"):
        analyze("x = 1\n", "python", 5, 0)
    with pytest.raises(ValueError, match="surrogate"):
        analyze("s = '😀'\n", "python", 0, 6)


# --- incremental trees --------------------------------------------------------------------------------


def _node_list(tree) -> list[tuple[str, int, int, bool]]:
    out = []
    cursor = tree.walk()
    visited_children = False
    while True:
        if not visited_children:
            node = cursor.node
            out.append((node.type, node.start_byte, node.end_byte, node.is_missing))
            if cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            visited_children = False
            continue
        if not cursor.goto_parent():
            break
        visited_children = True
    return out


def _random_edit(rng: random.Random, text: str) -> tuple[int, int, int, int, str, str]:
    """A random LSP edit of ``text``: (start line, start char, end line, end char, new text, result)."""
    lines = text.split("\n")
    pieces = ["x", "(", ")", "{", "}", "\n", ":", "é", "😀", " ", '"', "foo(", "\n    ", ";", ""]

    def random_position() -> tuple[int, int, int]:
        line = rng.randrange(len(lines))
        column = rng.randrange(len(lines[line]) + 1)
        offset = sum(len(x) + 1 for x in lines[:line]) + column
        return line, column, offset

    a, b = random_position(), random_position()
    if b[2] < a[2]:
        a, b = b, a
    if rng.random() < 0.6:
        b = a  # mostly insertions, as when typing
    new_text = rng.choice(pieces)
    result = text[: a[2]] + new_text + text[b[2] :]

    def utf16(line: int, column: int) -> int:
        return len(lines[line][:column].encode("utf-16-le")) // 2

    return a[0], utf16(a[0], a[1]), b[0], utf16(b[0], b[1]), new_text, result


@pytest.mark.parametrize("grammar", ["python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp"])
def test_incremental_edits_give_the_fresh_parse(grammar: str) -> None:
    rng = random.Random(grammar)
    text = "\n".join(c.text for c in CASES if c.grammar == grammar)
    trees = DocumentTrees()
    trees.open("file:///doc", text, grammar)
    parser = get_grammar(grammar).new_parser()
    for step in range(60):
        start_line, start_char, end_line, end_char, new_text, text = _random_edit(rng, text)
        trees.apply_change("file:///doc", start_line, start_char, end_line, end_char, new_text)
        assert trees.text("file:///doc") == text
        if step % 3 == 0 or step == 59:
            fresh = parser.parse(text.encode())
            incremental = trees.tree("file:///doc")
            assert _node_list(incremental) == _node_list(fresh), f"step {step}"
            line = rng.randrange(text.count("\n") + 1)
            line_text = text.split("\n")[line]
            character = len(line_text[: rng.randrange(len(line_text) + 1)].encode("utf-16-le")) // 2
            assert trees.context("file:///doc", line, character) == analyze(text, grammar, line, character)


def test_document_trees_lifecycle_and_errors() -> None:
    trees = DocumentTrees()
    trees.open("u", "def f():\n    pass\n", "python")
    assert "u" in trees and trees.language("u") == "python"
    trees.apply_change("u", 1, 4, 1, 8, "return g(")
    assert trees.text("u") == "def f():\n    return g(\n"
    assert trees.context("u", 1, len("    return g(")).context_class == "call_arguments"
    with pytest.raises(ValueError, match="past the end"):
        trees.apply_change("u", 9, 0, 9, 0, "x")
    with pytest.raises(ValueError, match="before it starts"):
        trees.apply_change("u", 1, 5, 1, 2, "x")
    assert trees.text("u") == "def f():\n    return g(\n"  # failed changes leave the document alone
    trees.replace("u", "import os\n")
    assert trees.context("u", 0, 9).context_class == "import"
    trees.close("u")
    assert "u" not in trees
    with pytest.raises(KeyError):
        trees.context("u", 0, 0)
    with pytest.raises(UnsupportedLanguageError):
        trees.open("v", "x", "brainfuck")


def test_several_edits_before_one_reparse() -> None:
    trees = DocumentTrees()
    trees.open("u", "x = 1\n", "python")
    for i, char in enumerate("import os"):
        trees.apply_change("u", 1, i, 1, i, char)
    text = "x = 1\nimport os"
    assert trees.text("u") == text
    fresh = get_grammar("python").new_parser().parse(text.encode())
    assert _node_list(trees.tree("u")) == _node_list(fresh)
    assert trees.context("u", 1, 9).context_class == "import"
