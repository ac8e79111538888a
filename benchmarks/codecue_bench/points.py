"""Completion points for the benchmark: the built-in corpus or the user's own JSONL file.

A built-in point cuts a *hole* of a few lines out of a real file at the cursor (prefix = before, suffix =
after the hole), so the model has real code to write there, as when a developer writes new lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codecue.document import split_at
from codecue.errors import CodeCueError

CORPUS_DIR = Path(__file__).parent / "corpus"
LANGUAGES = ["python", "javascript", "typescript", "go", "rust", "java", "c", "cpp"]  # the built-in corpus's

EXTENSIONS = {
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript", ".tsx": "typescript",
    ".go": "go", ".rs": "rust", ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp",
    ".hpp": "cpp",
}


@dataclass(frozen=True)
class Point:
    path: str
    language: str
    line: int
    character: int
    prefix: str
    suffix: str
    hole: str  # the removed text ("" for user points): what a perfect completion would write

    @property
    def name(self) -> str:
        return f"{Path(self.path).name}:{self.line}:{self.character}"


def language_of(path: Path) -> str:
    return EXTENSIONS.get(path.suffix.lower(), "other")


def corpus_files(split: str = "heldout", languages: list[str] | None = None) -> list[Path]:
    root = CORPUS_DIR / split
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in EXTENSIONS)
    if languages:
        files = [p for p in files if language_of(p) in languages]
    return files


def hole_points(path: Path, per_file: int, hole_lines: int = 3, skip_fraction: float = 0.25) -> list[Point]:
    """``per_file`` points spread over the file, each removing ``hole_lines`` lines at a line's indent."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    first = max(1, int(len(lines) * skip_fraction))
    candidates = []
    for i in range(first, len(lines) - hole_lines):
        stripped = lines[i].strip()
        if len(stripped) < 8 or stripped.startswith(("#", "//", "/*", "*", '"""')):
            continue
        candidates.append(i)
    if not candidates:
        return []
    step = max(1, len(candidates) // per_file)
    chosen = candidates[step // 2 :: step][:per_file]
    points = []
    for i in chosen:
        indent = len(lines[i]) - len(lines[i].lstrip())
        head = "\n".join(lines[:i]) + "\n" + lines[i][:indent]
        hole = "\n".join([lines[i][indent:], *lines[i + 1 : i + hole_lines]]) + "\n"
        tail = "\n".join(lines[i + hole_lines :])
        points.append(Point(str(path), language_of(path), i, indent, head, tail, hole))
    return points


def builtin_points(languages: list[str] | None, per_file: int, split: str = "heldout") -> list[Point]:
    files = corpus_files(split, languages)
    if not files:
        raise CodeCueError(f"no corpus files for languages {languages}", "see `codecue bench speed --help` for the list")
    return [p for f in files for p in hole_points(f, per_file)]


def load_points_file(path: Path) -> list[Point]:
    """One JSON object per line with ``path``, ``line``, ``character`` (0-based, UTF-16 as in LSP)."""
    points = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CodeCueError(f"cannot read points file {path}: {exc}") from None
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            file = (path.parent / obj["path"]) if not Path(obj["path"]).is_absolute() else Path(obj["path"])
            text = file.read_text(encoding="utf-8")
            prefix, suffix = split_at(text, int(obj["line"]), int(obj["character"]))
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise CodeCueError(f"{path}:{n}: bad point: {exc}",
                               'each line needs {"path": ..., "line": L, "character": C}') from None
        points.append(Point(str(file), obj.get("language") or language_of(file), int(obj["line"]),
                            int(obj["character"]), prefix, suffix, ""))
    if not points:
        raise CodeCueError(f"{path} holds no points")
    return points
