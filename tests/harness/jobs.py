"""Worker jobs for tests that drive the model worker directly (no editor, no tree-sitter)."""

from __future__ import annotations

from typing import Any

from codecue.engine.stops import StopRule
from codecue.models.config import CompletionConfig
from codecue.request import JobKind, PreparedJob, RequestOptions
from codecue.server.worker.model_worker import GenerationJob


def make_job(config: CompletionConfig, prefix: str, suffix: str = "", *, kind: JobKind = JobKind.COMPLETE,
             max_tokens: int = 64, temperature: float = 0.0, stop_rule: StopRule | None = None,
             language: str = "", context_class: str | None = None, path: str | None = None,
             **worker_fields: Any) -> GenerationJob:
    """A job as :func:`codecue.request.prepare` would make it, with the stop rule given; the other keywords
    are the worker's (background, callbacks, follow-ups)."""
    prepared = PreparedJob(kind, prefix, suffix, (), path, RequestOptions(max_tokens=max_tokens, temperature=temperature),
                           language, context_class, stop_rule)
    return GenerationJob(config, prepared, **worker_fields)
