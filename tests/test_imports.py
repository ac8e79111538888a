"""Project context from imports: tree-sitter finds what a file imports, each language's rules resolve it to
files inside the workspace, and their chunks rank with the open files' chunks (definitions first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from codecue.context.chunks import ChunkPool
from codecue.context.imports import ImportedFiles, import_references, imported_files
from codecue.document import DocumentStore
from codecue.engine.fim import PromptBudget
from codecue.server.lsp.prompt import project_context


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def names(root: Path, paths: list[Path]) -> list[str]:
    return [p.relative_to(root.resolve()).as_posix() for p in paths]


@pytest.mark.parametrize(("language", "files", "current", "expected"), [
    ("python", {"pkg/__init__.py": "", "pkg/models.py": "class Bucket: ...\n", "pkg/sub/__init__.py": "",
                "pkg/sub/helpers.py": "def h(): ...\n", "pkg/util.py": "",
                "pkg/app.py": "import os\nfrom .models import Bucket\nfrom .sub import helpers\n"
                              "from . import util\nimport pkg.sub.helpers\n"},
     "pkg/app.py", ["pkg/models.py", "pkg/sub/__init__.py", "pkg/sub/helpers.py", "pkg/util.py"]),
    ("typescript", {"web/lib/util.ts": "export const a = 1;\n", "web/lib/index.ts": "export {};\n",
                    "web/main.ts": 'import { a } from "./lib/util.js";\nimport * as l from "./lib";\n'
                                   'import React from "react";\nconst c = require("./lib/util");\n'},
     "web/main.ts", ["web/lib/util.ts", "web/lib/index.ts"]),
    ("go", {"go.mod": "module example.com/proj\n", "models/bucket.go": "package models\n",
            "models/bucket_test.go": "package models\n", "helper.go": "package main\n",
            "main.go": 'package main\nimport (\n\t"fmt"\n\t"example.com/proj/models"\n)\n'},
     "main.go", ["helper.go", "models/bucket.go"]),
    ("rust", {"Cargo.toml": "[package]\n", "src/net/mod.rs": "pub mod conn;\n", "src/net/conn.rs": "pub struct Conn;\n",
              "src/main.rs": "mod net;\nuse crate::net::conn::Conn;\nuse std::io;\n"},
     "src/main.rs", ["src/net/mod.rs", "src/net/conn.rs"]),
    ("c", {"include/bucket.h": "struct bucket;\n", "src/bucket.c": '#include "bucket.h"\n#include <stdio.h>\n'},
     "src/bucket.c", ["include/bucket.h"]),
    ("java", {"src/main/java/com/acme/Bucket.java": "class Bucket {}\n",
              "src/main/java/com/acme/App.java": "import com.acme.Bucket;\nimport java.util.List;\n"},
     "src/main/java/com/acme/App.java", ["src/main/java/com/acme/Bucket.java"]),
])
def test_each_language_resolves_its_imports_to_the_workspaces_files(tmp_path, language, files, current, expected):
    write(tmp_path, files)
    path = tmp_path / current
    assert names(tmp_path, imported_files(path.read_text(), language, path, [tmp_path])) == expected


def test_nothing_outside_the_workspace_is_named_and_no_workspace_means_nothing(tmp_path):
    write(tmp_path, {"outside.py": "SECRET = 1\n", "ws/pkg/__init__.py": "", "ws/pkg/near.py": "x = 1\n",
                     "ws/pkg/app.py": "from ..outside import SECRET\nfrom ... import outside\nfrom . import near\n"})
    app = tmp_path / "ws" / "pkg" / "app.py"
    text = app.read_text()
    assert ("module", "..outside") in import_references(text, "python")
    assert names(tmp_path, imported_files(text, "python", app, [tmp_path / "ws"])) == ["ws/pkg/near.py"]
    assert imported_files(text, "python", app, []) == []
    # a file outside the roots has no imports read for it at all
    assert imported_files(text, "python", app, [tmp_path / "elsewhere"]) == []


def test_a_chunk_defining_a_name_used_around_the_cursor_outranks_a_more_similar_one():
    pool = ChunkPool(chunk_lines=4)
    pool.update("file:///similar.py", "similar.py",
                "total = price * count\nprice = total / count\ncount = total / price\n")
    pool.update("file:///defines.py", "defines.py", "def apply_discount(value):\n    return value * 0.9\n")
    query = "total = price * count\nresult = apply_discount(total)\n"
    chosen = pool.select(query, None, max_chars=60)  # room for one of the two (52 and 66 characters)
    assert [c.path for c in chosen] == ["defines.py"]
    assert [c.path for c in pool.select(query, None, max_chars=10_000)] == ["similar.py", "defines.py"]


def test_the_server_puts_an_imported_files_chunks_in_the_prompt_without_the_file_open(tmp_path):
    write(tmp_path, {"shop/__init__.py": "",
                     "shop/pricing.py": "def apply_discount(value, rate):\n    return value * (1 - rate)\n",
                     "shop/cart.py": "from .pricing import apply_discount\n\n\ndef checkout(total, rate):\n"
                                     "    discounted = apply_discount(total, rate)\n    return \n"})
    cart = tmp_path / "shop" / "cart.py"
    documents = DocumentStore()
    documents.open(cart.as_uri(), "python", 1, cart.read_text())
    text = cart.read_text()
    prefix, suffix = text[: text.rindex("return ") + 7], text[text.rindex("return ") + 7:]
    budget = PromptBudget(extra=128)
    imports = ImportedFiles()
    chosen = project_context(ChunkPool(), documents, cart.as_uri(), "python", prefix, suffix, budget,
                             imports, [tmp_path])
    assert [path for path, _ in chosen] == ["shop/pricing.py"]
    assert "def apply_discount" in chosen[0][1]
    # no workspace folder: nothing is read from disk
    assert project_context(ChunkPool(), documents, cart.as_uri(), "python", prefix, suffix, budget,
                           ImportedFiles(), []) == []
    # a changed file is read again (its size or time changed)
    (tmp_path / "shop" / "pricing.py").write_text("def apply_discount(value, rate, floor):\n    return value\n")
    again = project_context(ChunkPool(), documents, cart.as_uri(), "python", prefix, suffix, budget,
                            imports, [tmp_path])
    assert "floor" in again[0][1]


def test_imports_resolve_again_only_when_they_change_and_a_held_tree_is_read_instead_of_parsing(tmp_path, monkeypatch):
    from codecue.context import imports as imports_module
    from codecue.context.languages import get_grammar

    write(tmp_path, {"shop/__init__.py": "", "shop/pricing.py": "RATE = 1\n",
                     "shop/cart.py": "from .pricing import RATE\n\n\ndef total(x):\n    return x\n"})
    cart = tmp_path / "shop" / "cart.py"
    text = cart.read_text()
    resolved = []
    real = imports_module.resolve_imports
    monkeypatch.setattr(imports_module, "resolve_imports", lambda *a: resolved.append(a[0]) or real(*a))
    files = ImportedFiles()
    assert [p.name for p, _ in files.files(cart.as_uri(), text, "python", [tmp_path])] == ["pricing.py"]
    files.files(cart.as_uri(), text + "    # typing in the body\n", "python", [tmp_path])
    assert len(resolved) == 1  # the imports did not change: nothing resolved (or stat'ed) again
    files.files(cart.as_uri(), "import os\n" + text, "python", [tmp_path])
    assert len(resolved) == 2
    # The session's tree of the document is what is read: here one that holds the import the text lacks.
    tree = get_grammar("python").parser().parse(text.encode())
    assert import_references("", "python", tree) == import_references(text, "python")
    held = ImportedFiles(tree_of=lambda uri: tree)
    assert [p.name for p, _ in held.files(cart.as_uri(), "", "python", [tmp_path])] == ["pricing.py"]
