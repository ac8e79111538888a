"""Scope-aware stop predicates: where a completion generated at a cursor should end."""

from __future__ import annotations

import pytest

from codecue.context import analyze, make_stop_predicate

CURSOR = "█"


def context_at_marker(document: str, language: str):
    at = document.index(CURSOR)
    before = document[:at]
    line = before.count("\n")
    character = len(before[before.rfind("\n") + 1 :].encode("utf-16-le")) // 2
    return analyze(document.replace(CURSOR, ""), language, line, character)


def generate(document: str, language: str, model_output: str) -> str:
    """Feed ``model_output`` one character at a time, as the engine does token by token, and return
    what the completion shows once the predicate cuts (or all of it if it never does)."""
    context = context_at_marker(document, language)
    stop = make_stop_predicate(context)
    for end in range(1, len(model_output) + 1):
        cut = stop(model_output[:end])
        if cut is not None:
            assert 0 <= cut <= end
            return model_output[:cut]
    return model_output


@pytest.mark.parametrize(
    ("document", "language", "output", "expected"),
    [
        # line scope: call arguments end with the line
        ("print(value, █)\n", "python", "end='')\n    x = 1\n", "end='')"),
        ("foo(a, █\n", "javascript", "b, c);\nbar();\n", "b, c);"),
        ("import █\n", "python", "os\nimport sys\n", "os"),
        ("def f(x: █\n", "python", "int) -> None:\n    pass\n", "int) -> None:"),
        # block scope, Python: the body ends where the indentation drops back
        ("def f(x):\n    █\n", "python", "y = x + 1\n    return y\n\ndef g():\n", "y = x + 1\n    return y"),
        ("for item in items:█\n", "python", "\n    print(item)\n    total += item\nprint(total)\n",
         "\n    print(item)\n    total += item"),
        ("if x:█\n", "python", " return 1\nelse:\n", " return 1"),
        # block scope, braces: the dedented closer is left to the document, or written when missing
        ("function f() {\n  █\n}\n", "javascript", "return 1;\n}\nfunction g() {}\n", "return 1;"),
        ("if (x) {█\n", "javascript", "\n  foo();\n}\nbar();\n", "\n  foo();\n}"),
        ("int main(void) {\n    █\n}\n", "c", "int x = 1;\n    return x;\n}\n", "int x = 1;\n    return x;"),
        # statement scope, newline languages
        ("def f():\n    x = 1\n    █\n", "python", "y = compute(a,\n        b)\n    z = 2\n",
         "y = compute(a,\n        b)"),
        ("def f():\n    x = 1\n    █\n", "python", "if x:\n        y = 1\n    else:\n        y = 2\n    z = 3\n",
         "if x:\n        y = 1\n    else:\n        y = 2"),
        ("total = price * █\n", "python", "quantity  # with tax\nprint(total)\n", "quantity  # with tax"),
        ("x = 1\n█\n", "python", "\n\nfoo()\nbar()\n", "\n\nfoo()"),
        ("function f() {\n  let x = 1;\n  █\n}\n", "javascript", "i++\n  foo();\n", "i++"),
        ("function f() {\n  let x = 1;\n  █\n}\n", "javascript", "const y = a +\n    b\n  z()\n",
         "const y = a +\n    b"),
        ("func main() {\n\tx := 1\n\t█\n}\n", "go", "if x > 1 {\n\t\treturn\n\t}\n\tfoo()\n",
         "if x > 1 {\n\t\treturn\n\t}"),
        ("s = 1\n█\n", "python", 'x = "a(b"\ny = 2\n', 'x = "a(b"'),
        # statement scope, semicolon languages
        ("class A {\n    void f() {\n        int x = 1;\n        █\n    }\n}\n", "java",
         "int y = foo(a,\n            b);\n        int z;\n", "int y = foo(a,\n            b);"),
        ("class A {\n    void f() {\n        int x = 1;\n        █\n    }\n}\n", "java",
         "if (x) {\n            a();\n        }\n        b();\n", "if (x) {\n            a();\n        }"),
        ("fn main() {\n    let x = 1;\n    █\n}\n", "rust", "for i in 0..3 { f(i); }\n    g();\n",
         "for i in 0..3 { f(i); }"),
        ("fn main() {\n    let y = x + █\n}\n", "rust", "1;\n    z();\n", "1;"),
        ("fn f() -> i32 {\n    let y = 1;\n    █\n}\n", "rust", "y + 1\n}\n", "y + 1"),
        # strings, docstrings, comments
        ('message = "hello █"\n', "python", 'world", 1)\n', "world"),
        ("message = 'hello █\n", "python", "world'\nx = 1\n", "world'"),
        ('def area(r):\n    """Return the area of █"""\n', "python", 'the circle."""\n', "the circle."),
        ('class Shape:\n    """A shape █\n', "python", 'with corners.\n    """\n    def f(self):\n',
         'with corners.\n    """'),
        ("x = 1  # the number of █\n", "python", "apples\ny = 2\n", "apples"),
        ("/** Adds █ */\nfunction add(a, b) {}\n", "javascript", "two numbers. */\n", "two numbers."),
        ("/// Adds █\nfn add() {}\n", "rust", "two numbers.\n/// More.\n", "two numbers."),
    ],
)
def test_completion_ends_where_the_syntax_says(document: str, language: str, output: str, expected: str) -> None:
    assert generate(document, language, output) == expected


def test_predicate_keeps_going_while_the_unit_is_open() -> None:
    context = context_at_marker("def f():\n    x = 1\n    █\n", "python")
    stop = make_stop_predicate(context)
    assert stop("y = compute(a,") is None
    assert stop("y = compute(a,\n        b") is None
    assert stop("y = '''doc\nstill in the string") is None
    assert stop("y = compute(a,\n        b)\n") == len("y = compute(a,\n        b)")


def test_line_scope_is_strict() -> None:
    context = context_at_marker("foo(a, █)\n", "python")
    assert context.scope == "line"
    stop = make_stop_predicate(context)
    assert stop("b") is None
    assert stop("\nb") == 0  # a newline first means an empty completion, never a second line
