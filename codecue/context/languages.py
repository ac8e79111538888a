"""The grammar registry: one folder per language under ``grammars/`` (settings.toml + contexts.scm).

A folder names the tree-sitter grammar wheel to import, the file extensions and LSP ``languageId``s that
select it, a few lexical facts (comment and quote syntax, block openers) and the default K and completion
scope per context class. Grammar modules are imported and queries compiled on first use only, so listing
languages or mapping a path to a language costs no grammar loading.

Names: a *language* is the folder name ("typescript"); a *grammar id* selects the parser and is the
language name or one of its dialects ("tsx"). Profiles and K are keyed by language; parsing by grammar id.
"""

from __future__ import annotations

import importlib
import os
import threading
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.errors import CodeCueError

if TYPE_CHECKING:
    import tree_sitter

CONTEXT_CLASSES: tuple[str, ...] = (
    "identifier",  # continuing an identifier or a member access (``obj.na|``, ``obj.|``)
    "call_arguments",
    "import",
    "string",
    "comment",
    "docstring",
    "block_start",  # the first statement of a block, right after ``:`` or ``{``
    "statement_start",
    "expression_tail",
    "type_annotation",
)
SCOPES: tuple[str, ...] = ("line", "statement", "block")

# Capture names a contexts.scm may use besides the context classes (see grammars/README.md).
STRUCTURAL_CAPTURES: tuple[str, ...] = ("block", "code")
CAPTURE_NAMES: frozenset[str] = frozenset(CONTEXT_CLASSES) | frozenset(STRUCTURAL_CAPTURES)


class UnsupportedLanguageError(CodeCueError):
    """No grammar folder handles this language (or its grammar wheel is not installed)."""


class GrammarConfigError(CodeCueError):
    """A grammar folder is malformed (bad settings.toml or a query that does not compile)."""


@dataclass(frozen=True)
class ClassSettings:
    scope: str


@dataclass(frozen=True)
class Syntax:
    """Lexical facts that the tree does not give reliably on half-typed code."""

    block_openers: tuple[str, ...] = ("{",)
    indent_blocks: bool = False
    statement_end: str = "semicolon"  # "newline": a newline at bracket depth 0 may end a statement
    line_comments: tuple[str, ...] = ("//",)
    quotes: tuple[str, ...] = ('"', "'")
    multiline_delimiters: tuple[tuple[str, str], ...] = (("/*", "*/"),)
    line_continuation: str = ""
    member_operators: tuple[str, ...] = (".",)
    import_keywords: tuple[str, ...] = ()
    continuation_keywords: tuple[str, ...] = ()
    # Text after which a type follows even where error recovery lost the tree (``def f() -> |``).
    type_markers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grammar:
    """A parser configuration: one language (folder) in one dialect."""

    grammar_id: str
    language: str
    module: str
    function: str
    folder: Path
    syntax: Syntax
    classes: dict[str, ClassSettings] = field(hash=False, compare=False)

    @cached_property
    def ts_language(self) -> tree_sitter.Language:
        import tree_sitter

        try:
            module = importlib.import_module(self.module)
        except ImportError as exc:
            raise UnsupportedLanguageError(
                f"the tree-sitter grammar for {self.grammar_id} is not installed",
                fix=f"pip install {self.module.replace('_', '-')}",
            ) from exc
        try:
            return tree_sitter.Language(getattr(module, self.function)())
        except (AttributeError, TypeError, ValueError) as exc:
            raise GrammarConfigError(
                f"{self.folder / 'settings.toml'}: {self.module}.{self.function}() is not a usable grammar: {exc}"
            ) from exc

    def _compile(self, path: Path) -> tree_sitter.Query:
        """A query file of this grammar's folder, compiled for it; GrammarConfigError naming the file."""
        import tree_sitter

        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GrammarConfigError(f"cannot read {path}: {exc}") from exc
        try:
            return tree_sitter.Query(self.ts_language, source)
        except (tree_sitter.QueryError, SyntaxError, ValueError) as exc:
            raise GrammarConfigError(f"{path} does not compile for {self.grammar_id}: {exc}") from exc

    @cached_property
    def query(self) -> tree_sitter.Query:
        path = self.folder / "contexts.scm"
        query = self._compile(path)
        unknown = {query.capture_name(i) for i in range(query.capture_count)} - CAPTURE_NAMES
        if unknown:
            raise GrammarConfigError(
                f"{path}: unknown capture names {sorted(unknown)}; use {sorted(CAPTURE_NAMES)}"
            )
        return query

    @cached_property
    def imports_query(self) -> tree_sitter.Query | None:
        """``imports.scm``: what a file of this language imports (captures ``module``, ``name``, ``mod``,
        read by :mod:`codecue.context.imports`); None for a grammar folder without one."""
        path = self.folder / "imports.scm"
        return self._compile(path) if path.is_file() else None

    def new_parser(self) -> tree_sitter.Parser:
        import tree_sitter

        return tree_sitter.Parser(self.ts_language)

    def parser(self) -> tree_sitter.Parser:
        """A parser for this grammar owned by the calling thread (parsers are not thread-safe)."""
        cache: dict[str, tree_sitter.Parser] = _thread_local.__dict__.setdefault("parsers", {})
        parser = cache.get(self.grammar_id)
        if parser is None:
            parser = cache[self.grammar_id] = self.new_parser()
        return parser

    def scope(self, context_class: str) -> str:
        settings = self.classes.get(context_class)
        return settings.scope if settings else "statement"


_thread_local = threading.local()


def grammars_dir() -> Path:
    """Where the grammar folders live: ``CODECUE_GRAMMARS_DIR``, else the repository's ``grammars/``."""
    override = os.environ.get("CODECUE_GRAMMARS_DIR")
    if override:
        return Path(override)
    package_copy = Path(__file__).resolve().parent.parent / "grammars"  # if packaging copies it inside
    repo_copy = Path(__file__).resolve().parents[2] / "grammars"
    return package_copy if package_copy.is_dir() else repo_copy


def _str_tuple(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise GrammarConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(value)


def _parse_syntax(raw: Any, where: str) -> Syntax:
    if not isinstance(raw, dict):
        raise GrammarConfigError(f"{where}: [syntax] must be a table")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in ("indent_blocks",):
            if not isinstance(value, bool):
                raise GrammarConfigError(f"{where}: syntax.{key} must be true or false")
            kwargs[key] = value
        elif key in ("statement_end", "line_continuation"):
            if not isinstance(value, str):
                raise GrammarConfigError(f"{where}: syntax.{key} must be a string")
            kwargs[key] = value
        elif key == "multiline_delimiters":
            pairs = []
            for pair in value if isinstance(value, list) else [None]:
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) and p for p in pair)):
                    raise GrammarConfigError(f"{where}: syntax.multiline_delimiters must be [[open, close], ...]")
                pairs.append((pair[0], pair[1]))
            kwargs[key] = tuple(pairs)
        elif key in Syntax.__dataclass_fields__:
            kwargs[key] = _str_tuple(value, f"{where}: syntax.{key}")
        else:
            raise GrammarConfigError(f"{where}: unknown setting syntax.{key}")
    syntax = Syntax(**kwargs)
    if syntax.statement_end not in ("newline", "semicolon"):
        raise GrammarConfigError(f"{where}: syntax.statement_end must be 'newline' or 'semicolon'")
    return syntax


def _parse_classes(raw: Any, where: str) -> dict[str, ClassSettings]:
    if not isinstance(raw, dict):
        raise GrammarConfigError(f"{where}: [classes] must be a table")
    classes: dict[str, ClassSettings] = {}
    for name, entry in raw.items():
        if name not in CONTEXT_CLASSES:
            raise GrammarConfigError(f"{where}: unknown context class {name!r}; known: {', '.join(CONTEXT_CLASSES)}")
        if not isinstance(entry, dict):
            raise GrammarConfigError(f"{where}: classes.{name} must be a table like {{ scope = \"line\" }}")
        if "k" in entry:
            raise GrammarConfigError(f"{where}: classes.{name}.k: the draft depth K is the K profile's "
                                     "(codecue/tuning/default_profile.toml), not a grammar's")
        scope = entry.get("scope")
        if scope not in SCOPES:
            raise GrammarConfigError(f"{where}: classes.{name}.scope must be one of {', '.join(SCOPES)}")
        classes[name] = ClassSettings(scope=scope)
    return classes


@dataclass(frozen=True)
class _Registry:
    grammars: dict[str, Grammar]  # by grammar id
    by_extension: dict[str, str]
    by_lsp_id: dict[str, str]

    @property
    def languages(self) -> list[str]:
        return sorted({g.language for g in self.grammars.values()})


def _load_folder(folder: Path) -> tuple[list[Grammar], dict[str, str], dict[str, str]]:
    where = str(folder / "settings.toml")
    try:
        raw = tomllib.loads((folder / "settings.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GrammarConfigError(f"{where}: {exc}") from exc
    grammar_table = raw.get("grammar")
    if not isinstance(grammar_table, dict) or not isinstance(grammar_table.get("module"), str):
        raise GrammarConfigError(f"{where}: [grammar] needs module = \"tree_sitter_...\"")
    syntax = _parse_syntax(raw.get("syntax", {}), where)
    classes = _parse_classes(raw.get("classes", {}), where)
    missing = [c for c in CONTEXT_CLASSES if c not in classes]
    if missing:
        raise GrammarConfigError(f"{where}: [classes] lacks {', '.join(missing)}")
    language = folder.name
    variants: list[tuple[str, dict[str, Any]]] = [(language, grammar_table)]
    dialects = grammar_table.get("dialects", {})
    if not isinstance(dialects, dict):
        raise GrammarConfigError(f"{where}: grammar.dialects must be a table")
    variants += [(name, {**grammar_table, **table}) for name, table in dialects.items() if isinstance(table, dict)]
    grammars: list[Grammar] = []
    by_extension: dict[str, str] = {}
    by_lsp_id: dict[str, str] = {}
    for grammar_id, table in variants:
        function = table.get("function", "language")
        if not isinstance(function, str):
            raise GrammarConfigError(f"{where}: grammar function must be a string")
        grammars.append(
            Grammar(
                grammar_id=grammar_id,
                language=language,
                module=grammar_table["module"],
                function=function,
                folder=folder,
                syntax=syntax,
                classes=classes,
            )
        )
        for ext in _str_tuple(table.get("extensions", []), f"{where}: extensions"):
            by_extension[ext.lower()] = grammar_id
        for lsp_id in _str_tuple(table.get("lsp_ids", []), f"{where}: lsp_ids"):
            by_lsp_id[lsp_id] = grammar_id
    return grammars, by_extension, by_lsp_id


_registry_lock = threading.Lock()
_registry: _Registry | None = None


def _get_registry() -> _Registry:
    global _registry
    with _registry_lock:
        if _registry is None:
            root = grammars_dir()
            if not root.is_dir():
                raise GrammarConfigError(
                    f"grammar folder {root} not found", fix="set CODECUE_GRAMMARS_DIR to the grammars/ directory"
                )
            grammars: dict[str, Grammar] = {}
            by_extension: dict[str, str] = {}
            by_lsp_id: dict[str, str] = {}
            for folder in sorted(p for p in root.iterdir() if (p / "settings.toml").is_file()):
                folder_grammars, exts, lsp_ids = _load_folder(folder)
                grammars.update((g.grammar_id, g) for g in folder_grammars)
                by_extension.update(exts)
                by_lsp_id.update(lsp_ids)
            _registry = _Registry(grammars, by_extension, by_lsp_id)
        return _registry


def reload_grammars() -> None:
    """Forget the loaded registry (tests that point CODECUE_GRAMMARS_DIR elsewhere)."""
    global _registry
    with _registry_lock:
        _registry = None


def available_languages() -> list[str]:
    """Languages (grammar folder names) with a settings.toml, sorted."""
    return _get_registry().languages


def language_for_path(path: str | os.PathLike[str]) -> str | None:
    """The grammar id for a file name by its extension (``"tsx"`` for ``x.tsx``), or None."""
    suffix = Path(path).suffix.lower()
    return _get_registry().by_extension.get(suffix) if suffix else None


def language_for_lsp_id(language_id: str) -> str | None:
    """The grammar id for an LSP ``languageId`` (``"typescriptreact"`` -> ``"tsx"``), or None."""
    registry = _get_registry()
    if language_id in registry.grammars:
        return language_id
    return registry.by_lsp_id.get(language_id)


def get_grammar(language: str) -> Grammar:
    """The grammar for a grammar id, language name or LSP languageId; UnsupportedLanguageError otherwise."""
    registry = _get_registry()
    grammar_id = language_for_lsp_id(language)
    if grammar_id is None:
        raise UnsupportedLanguageError(
            f"no grammar for language {language!r}",
            fix=f"supported: {', '.join(sorted(registry.grammars))}",
        )
    return registry.grammars[grammar_id]
