"""Errors that reach the user as one clear line (no traceback)."""

from __future__ import annotations


class CodeCueError(Exception):
    """An error with a message meant for the user: what went wrong and how to fix it."""

    def __init__(self, message: str, fix: str | None = None) -> None:
        self.message = message
        self.fix = fix
        super().__init__(f"{message} ({fix})" if fix else message)


class ModelError(CodeCueError):
    """A model file is missing, truncated, corrupt, or does not fit its partner."""


class BackendUnavailable(CodeCueError):
    """A backend's runtime (CUDA, exllamav2, llama-cpp-python) is not installed or not usable here."""
