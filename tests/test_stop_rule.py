"""The stop rule as data: it pickles, and the predicate made from it where the model runs cuts exactly
where the server's closure (a predicate over the cursor context, combined with the suffix-repeat stop)
cut, on every text."""

from __future__ import annotations

import pickle

import pytest

from codecue.context import analyze, get_grammar
from codecue.context import stopping as scope_stops
from codecue.engine.postprocess import combine_stops, suffix_repeat_stop
from codecue.engine.stops import StopRule, SuffixRepeat, blank_line_stop, predicate_for
from codecue_bench.points import CORPUS_DIR

CURSOR = "█"

# The places of tests/test_context_stopping.py, with the output a model wrote there (one of the texts).
PLACES = [
    ("print(value, █)\n", "python", "end='')\n    x = 1\n"),
    ("foo(a, █\n", "javascript", "b, c);\nbar();\n"),
    ("import █\n", "python", "os\nimport sys\n"),
    ("def f(x: █\n", "python", "int) -> None:\n    pass\n"),
    ("def f(x):\n    █\n", "python", "y = x + 1\n    return y\n\ndef g():\n"),
    ("for item in items:█\n", "python", "\n    print(item)\n    total += item\nprint(total)\n"),
    ("if x:█\n", "python", " return 1\nelse:\n"),
    ("function f() {\n  █\n}\n", "javascript", "return 1;\n}\nfunction g() {}\n"),
    ("if (x) {█\n", "javascript", "\n  foo();\n}\nbar();\n"),
    ("int main(void) {\n    █\n}\n", "c", "int x = 1;\n    return x;\n}\n"),
    ("def f():\n    x = 1\n    █\n", "python", "y = compute(a,\n        b)\n    z = 2\n"),
    ("def f():\n    x = 1\n    █\n", "python", "if x:\n        y = 1\n    else:\n        y = 2\n    z = 3\n"),
    ("total = price * █\n", "python", "quantity  # with tax\nprint(total)\n"),
    ("x = 1\n█\n", "python", "\n\nfoo()\nbar()\n"),
    ("function f() {\n  let x = 1;\n  █\n}\n", "javascript", "i++\n  foo();\n"),
    ("function f() {\n  let x = 1;\n  █\n}\n", "javascript", "const y = a +\n    b\n  z()\n"),
    ("func main() {\n\tx := 1\n\t█\n}\n", "go", "if x > 1 {\n\t\treturn\n\t}\n\tfoo()\n"),
    ("s = 1\n█\n", "python", 'x = "a(b"\ny = 2\n'),
    ("class A {\n    void f() {\n        int x = 1;\n        █\n    }\n}\n", "java",
     "int y = foo(a,\n            b);\n        int z;\n"),
    ("class A {\n    void f() {\n        int x = 1;\n        █\n    }\n}\n", "java",
     "if (x) {\n            a();\n        }\n        b();\n"),
    ("fn main() {\n    let x = 1;\n    █\n}\n", "rust", "for i in 0..3 { f(i); }\n    g();\n"),
    ("fn main() {\n    let y = x + █\n}\n", "rust", "1;\n    z();\n"),
    ("fn f() -> i32 {\n    let y = 1;\n    █\n}\n", "rust", "y + 1\n}\n"),
    ('message = "hello █"\n', "python", 'world", 1)\n'),
    ("message = 'hello █\n", "python", "world'\nx = 1\n"),
    ('def area(r):\n    """Return the area of █"""\n', "python", 'the circle."""\n'),
    ('class Shape:\n    """A shape █\n', "python", 'with corners.\n    """\n    def f(self):\n'),
    ("x = 1  # the number of █\n", "python", "apples\ny = 2\n"),
    ("/** Adds █ */\nfunction add(a, b) {}\n", "javascript", "two numbers. */\n"),
    ("/// Adds █\nfn add() {}\n", "rust", "two numbers.\n/// More.\n"),
    # places whose suffix has lines to repeat
    ("def f(x):\n    █\n    return y\n\ndef g():\n    pass\n", "python", "y = x\n    return y\n"),
    ("function f() {\n  █\n  return 2;\n}\n", "javascript", "let a = 1;\n  return 2;\n}\n"),
    ("foo(a, █)\nbar()\n", "python", "b)\nbar()\n"),
]


def split(document: str) -> tuple[str, str, int, int]:
    at = document.index(CURSOR)
    before = document[:at]
    line = before.count("\n")
    character = len(before[before.rfind("\n") + 1 :].encode("utf-16-le")) // 2
    return before, document[at + 1 :], line, character


def closure_over_the_context(ctx):
    """The server's stop before the rule: a closure over the CursorContext itself, its syntax looked up."""
    syntax = get_grammar(ctx.grammar or ctx.language).syntax
    if ctx.context_class in ("string", "comment", "docstring"):
        return scope_stops._literal_predicate(ctx)
    if ctx.scope == "line":
        return scope_stops._cut_at_newline
    if ctx.scope == "block":
        return lambda text: scope_stops._block_end(ctx, text)
    return lambda text: scope_stops._statement_end(ctx, syntax, text)


def texts() -> list[str]:
    """Every prefix of every place's output, and of those outputs after a newline and a blank line."""
    outputs = [output for _, _, output in PLACES]
    grown = outputs + ["\n" + o for o in outputs] + [o + "\n" + p for o, p in zip(outputs, outputs[1:], strict=False)]
    return sorted({text[:end] for text in grown for end in range(1, len(text) + 1)})


TEXTS = texts()


@pytest.mark.parametrize(("document", "language", "output"), PLACES)
def test_the_rule_pickles_and_cuts_where_the_closure_cut(document: str, language: str, output: str) -> None:
    prefix, suffix, line, character = split(document)
    ctx = analyze(prefix + suffix, language, line, character)
    rule = StopRule.at_cursor(scope_stops.ScopeStop.of(ctx), prefix, suffix)
    crossed = pickle.loads(pickle.dumps(rule))
    assert crossed == rule
    new = predicate_for(crossed)
    old = combine_stops(closure_over_the_context(ctx), suffix_repeat_stop(prefix, suffix))
    assert [new(text) for text in TEXTS] == [old(text) for text in TEXTS]
    assert any(old(output[:end]) is not None for end in range(1, len(output) + 1))  # the places do cut


def test_without_syntax_the_rule_stops_at_a_blank_line_and_a_suffix_repeat() -> None:
    prefix, suffix = "notes\n", "\nsecond line here\nthird\n"
    rule = pickle.loads(pickle.dumps(StopRule.at_cursor(None, prefix, suffix)))
    new = predicate_for(rule)
    old = combine_stops(blank_line_stop, suffix_repeat_stop(prefix, suffix))
    assert [new(text) for text in TEXTS] == [old(text) for text in TEXTS]
    assert new("a\n\nb") == 2 and new("first\nsecond line here\n") == len("first\n")
    assert predicate_for(None) is None and predicate_for(StopRule()) is None


def test_the_suffix_repeat_carries_only_the_lines_it_reads() -> None:
    heldout = CORPUS_DIR / "heldout" / "python"
    source = sorted(heldout.glob("*.py"))[0].read_text()
    for offset in range(0, len(source), 97):
        prefix, suffix = source[:offset], source[offset:]
        repeat = SuffixRepeat.around(prefix, suffix)
        assert "\n" not in repeat.line_head and suffix.startswith(repeat.suffix_head)
        assert sum(1 for line in repeat.suffix_head.split("\n")[1:] if line.strip()) <= 2
        old = suffix_repeat_stop(prefix, suffix)
        for text in (suffix[:200], "x\n" + suffix[:120], suffix[40:160]):
            assert [repeat.cut(text[:end]) for end in range(1, len(text) + 1)] == [
                old(text[:end]) for end in range(1, len(text) + 1)]
