"""The import layers (pyproject's ``[tool.importlinter]``): the package keeps them, and a breach is caught."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed (the dev extra)")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with ``root``'s contract, on the ``codecue`` package under ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_package_keeps_its_layers() -> None:
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 kept, 0 broken" in run.stdout


#: (module written, what it imports, the importer and imported the broken contract names)
UPWARD_IMPORTS = [
    ("engine/shortcut.py", "from codecue.server import worker", "codecue.engine", "codecue.server"),
    ("tuning/shortcut.py", "from codecue.loading import load", "codecue.tuning", "codecue.loading"),
    ("server/worker/shortcut.py", "from codecue.server.lsp import session", "codecue.server.worker",
     "codecue.server.lsp"),
    ("server/lsp/shortcut.py", "from codecue.server.daemon import client", "codecue.server.lsp",
     "codecue.server.daemon"),
]


@pytest.mark.parametrize(("path", "statement", "lower", "higher"), UPWARD_IMPORTS)
def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(tmp_path: Path, path: str, statement: str,
                                                                  lower: str, higher: str) -> None:
    shutil.copytree(REPO / "codecue", tmp_path / "codecue",
                    ignore=shutil.ignore_patterns("__pycache__", "corpus", "grammars"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    assert lint_imports(tmp_path).returncode == 0  # the copy is as good as the original

    (tmp_path / "codecue" / path).write_text(f'"""A module that reaches up a layer."""\n\n{statement}\n')
    run = lint_imports(tmp_path)
    assert run.returncode != 0
    assert f"{lower} is not allowed to import {higher}" in run.stdout, run.stdout
    assert f"{lower}.shortcut -> {higher}" in run.stdout, run.stdout


def test_a_top_level_module_outside_every_layer_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "codecue", tmp_path / "codecue",
                    ignore=shutil.ignore_patterns("__pycache__", "corpus", "grammars"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    (tmp_path / "codecue" / "helpers.py").write_text('"""A module no layer names."""\n')
    run = lint_imports(tmp_path)
    assert run.returncode != 0
    assert "codecue.helpers" in run.stdout + run.stderr


#: the longest a function in the package may be: a reader holds one in view
MAX_FUNCTION_LINES = 80


def test_no_function_in_the_package_is_over_80_lines() -> None:
    long = []
    for path in sorted((REPO / "codecue").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
