"""The project files a file imports, found by tree-sitter and resolved within the workspace.

Each grammar folder's ``imports.scm`` captures what a file refers to (``module``: a module path or
specifier; ``name``: a module imported from a relative package, Python's ``from . import util``; ``mod``:
Rust's ``mod util;``). This module turns those references into files, by each language's own rules, and
keeps only regular files inside the workspace roots the editor opened: nothing outside them is ever
named, let alone read. Module references that are not the project's (``import os``, ``"fmt"``,
``<stdio.h>``, ``use std::io``) resolve to nothing because no such file exists under the roots.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from codecue.context.languages import get_grammar
from codecue.document import file_path
from codecue.errors import CodeCueError

if TYPE_CHECKING:
    import tree_sitter

MAX_FILES = 16  # imported files kept per file: the context budget holds a few chunks anyway
MAX_FILE_BYTES = 256 * 1024  # a bigger "source" file is generated or vendored: not what the cursor needs
JS_EXTENSIONS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs")


def import_references(text: str, language: str, tree: tree_sitter.Tree | None = None) -> list[tuple[str, str]]:
    """(capture, text) for every import in ``text``, in file order; [] for a language without imports.scm.
    ``tree``: ``text``'s up-to-date tree where the caller holds one (else it is parsed here)."""
    import tree_sitter

    try:
        grammar = get_grammar(language)
        query = grammar.imports_query
    except CodeCueError:
        return []
    if query is None:
        return []
    root = (tree or grammar.parser().parse(text.encode("utf-8"))).root_node
    found = []
    for name, nodes in tree_sitter.QueryCursor(query).captures(root).items():
        if not name.startswith("_"):
            found += [(node.start_byte, name, node.text.decode("utf-8", errors="replace")) for node in nodes]
    return [(name, value) for _, name, value in sorted(found)]


def imported_files(text: str, language: str, path: Path, roots: Sequence[Path]) -> list[Path]:
    """The files inside ``roots`` that ``text`` (the file at ``path``) imports, first imported first, at
    most :data:`MAX_FILES`; ``path`` itself is never among them."""
    return resolve_imports(import_references(text, language), language, path, roots)


def resolve_imports(refs: Sequence[tuple[str, str]], language: str, path: Path, roots: Sequence[Path]) -> list[Path]:
    """:func:`imported_files` from the file's :func:`import_references`."""
    roots = [r.resolve() for r in roots]
    path = path.resolve()
    if not roots or not any(path.is_relative_to(r) for r in roots):
        return []  # a file outside the workspace: its imports are not the workspace's to read
    resolver = RESOLVERS.get(get_language_name(language))
    if resolver is None:
        return []
    chosen: list[Path] = []
    for candidate in resolver(refs, path, roots):
        try:
            candidate = candidate.resolve()
            ok = (candidate != path and candidate not in chosen and candidate.is_file()
                  and any(candidate.is_relative_to(r) for r in roots) and candidate.stat().st_size <= MAX_FILE_BYTES)
        except OSError:
            ok = False
        if ok:
            chosen.append(candidate)
            if len(chosen) == MAX_FILES:
                break
    return chosen


def get_language_name(language: str) -> str:
    """The grammar folder's language for a grammar id or LSP id (``tsx`` -> ``typescript``), else ''."""
    try:
        return get_grammar(language).language
    except CodeCueError:
        return ""


def _python(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    relative_base: Path | None = None  # the package of the last ``from .pkg import``, for the names after it
    for kind, ref in refs:
        if kind == "name":  # from .pkg import name: name may be a module of pkg
            if relative_base is not None:
                yield relative_base / f"{ref}.py"
                yield relative_base / ref / "__init__.py"
            continue
        dots = len(ref) - len(ref.lstrip("."))
        parts = [p for p in ref[dots:].split(".") if p]
        if dots:
            base = path.parent
            for _ in range(dots - 1):
                base = base.parent
            relative_base, bases = base.joinpath(*parts), [base]
        else:
            relative_base, bases = None, [*roots, *(r / "src" for r in roots), path.parent]
        if not parts:
            continue  # ``from . import util``: the names are the modules
        for base in bases:
            target = base.joinpath(*parts)
            yield target.with_name(target.name + ".py")
            yield target / "__init__.py"


def _javascript(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    for _, ref in refs:
        if not ref.startswith("."):
            continue  # a package (node_modules), not the project's own file
        target = path.parent / ref
        yield target
        stem = target.with_suffix("") if target.suffix in (".js", ".jsx", ".mjs", ".cjs") else target
        for ext in JS_EXTENSIONS:  # TypeScript imports "./x.js" for the file x.ts
            yield stem.with_name(stem.name + ext)
        for ext in JS_EXTENSIONS:
            yield target / f"index{ext}"


def _go(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    yield from _go_package(path.parent, exclude=path)  # the file's own package sees its other files
    modules = []
    for root in roots:
        for go_mod in [root / "go.mod", *sorted(root.glob("*/go.mod"))]:
            try:
                match = re.search(r"^module\s+(\S+)", go_mod.read_text(encoding="utf-8"), re.M)
            except (OSError, UnicodeDecodeError):
                continue
            if match:
                modules.append((match.group(1), go_mod.parent))
    for _, ref in refs:
        ref = ref.strip('"`')
        for module, directory in modules:
            if ref == module or ref.startswith(module + "/"):
                yield from _go_package(directory / ref[len(module):].lstrip("/"))


def _go_package(directory: Path, exclude: Path | None = None) -> Iterable[Path]:
    try:
        files = sorted(directory.glob("*.go"))
    except OSError:
        return
    yield from (f for f in files if not f.name.endswith("_test.go") and f != exclude)


def _rust(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    # Where this file's child modules live: beside it for main.rs, lib.rs and mod.rs, else in a folder named
    # after it; the crate's root is the src/ folder of the nearest Cargo.toml (else this file's folder).
    module_dir = path.parent if path.stem in ("main", "lib", "mod") else path.parent / path.stem
    crate = next((d / "src" for d in path.parents if (d / "Cargo.toml").is_file()), path.parent)
    for kind, ref in refs:
        if kind == "mod":
            yield module_dir / f"{ref}.rs"
            yield module_dir / ref / "mod.rs"
            continue
        parts = [p.strip() for p in ref.split("{")[0].split("::") if p.strip()]
        if not parts:
            continue
        if parts[0] == "crate":
            base, parts = crate, parts[1:]
        elif parts[0] == "super":
            base, parts = path.parent if module_dir != path.parent else path.parent.parent, parts[1:]
        elif parts[0] == "self":
            base, parts = module_dir, parts[1:]
        else:
            base = crate  # `use util::x` in the crate root names a module of the crate
        for i in range(1, len(parts) + 1):
            yield base.joinpath(*parts[: i - 1], f"{parts[i - 1]}.rs")
            yield base.joinpath(*parts[:i], "mod.rs")


def _c(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    for _, ref in refs:
        name = ref.strip('"')
        for base in (path.parent, *roots, *(r / "include" for r in roots)):
            yield base / name


def _java(refs: Sequence[tuple[str, str]], path: Path, roots: Sequence[Path]) -> Iterable[Path]:
    source_roots = [r for root in roots for r in (root, root / "src", root / "src" / "main" / "java")]
    for _, ref in refs:
        parts = ref.split(".")
        for base in source_roots:
            yield base.joinpath(*parts[:-1], parts[-1] + ".java")
            package = base.joinpath(*parts)
            if package.is_dir():
                yield from sorted(package.glob("*.java"))


RESOLVERS = {"python": _python, "javascript": _javascript, "typescript": _javascript, "go": _go,
             "rust": _rust, "c": _c, "cpp": _c, "java": _java}


DEFINITION = re.compile(
    r"\b(?:def|class|function|func|fn|struct|enum|trait|interface|type|const|let|var|mod|impl)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_]\w*)")


def defined_names(text: str) -> frozenset[str]:
    """Names ``text`` defines, by the definition keywords of the supported languages (``def f``, ``class
    C``, ``func (r *T) M``, ``fn f``, ``interface I``, ...): a cheap signal, good enough to rank chunks."""
    return frozenset(DEFINITION.findall(text))


class ImportedFiles:
    """The files each document imports, with their text: resolved again only when the document's imports
    changed (typing elsewhere in it does not), read again only when a file's size or modification time
    changed. One session's. ``tree_of(uri)``: the document's up-to-date tree where the session holds one
    (the cursor context keeps it), so that a request does not parse the whole document again."""

    MAX_DOCUMENTS = 64
    MAX_FILES = 256

    def __init__(self, tree_of: Callable[[str], tree_sitter.Tree | None] = lambda uri: None) -> None:
        self.tree_of = tree_of
        self._imports: dict[str, tuple[tuple[object, ...], list[Path]]] = {}
        self._texts: dict[Path, tuple[int, int, str]] = {}

    def files(self, uri: str, text: str, language: str, roots: Sequence[Path]) -> list[tuple[Path, str]]:
        """(path, text) of the files inside ``roots`` that the document ``uri`` (``text``) imports."""
        name = file_path(uri)
        if name is None:
            return []
        path = Path(name)
        refs = import_references(text, language, self.tree_of(uri))
        key = (language, tuple(refs), tuple(roots))
        cached = self._imports.get(uri)
        if cached is None or cached[0] != key:
            paths = resolve_imports(refs, language, path, roots)
            if len(self._imports) >= self.MAX_DOCUMENTS:
                self._imports.clear()
            cached = self._imports[uri] = (key, paths)
        found = []
        for path in cached[1]:
            body = self._read(path)
            if body is not None:
                found.append((path, body))
        return found

    def _read(self, path: Path) -> str | None:
        try:
            stat = path.stat()
            cached = self._texts.get(path)
            if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
                return cached[2]
            body = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        if len(self._texts) >= self.MAX_FILES:
            self._texts.clear()
        self._texts[path] = (stat.st_mtime_ns, stat.st_size, body)
        return body
