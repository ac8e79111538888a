"""The first step of loading: a configuration with its models found and checked, once per load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codecue.models.config import CompletionConfig
from codecue.models.resolve import ModelSource, resolve_gguf_file, resolve_model


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration with its models found and checked: the first step of loading, done once per load."""

    config: CompletionConfig
    target: ModelSource
    draft: ModelSource | None  # None: no draft model is wanted (ngram or no drafting)


def resolve_config(config: CompletionConfig, *, with_draft: bool | None = None) -> ResolvedConfig:
    """Find and check the configured target, and the draft where one is wanted: by the decoding settings
    (hybrid and model drafting load one), unless ``with_draft`` says otherwise."""
    wanted = config.decoding.uses_draft_model if with_draft is None else with_draft
    target = resolve_model(config.models.target, "target")
    draft = resolve_model(config.models.draft, "draft") if wanted else None
    return ResolvedConfig(config, target, draft)


def derived_source(path: Path) -> ModelSource:
    """A GGUF file made here from a resolved model (a weight layout re-quantized here), checked as any
    GGUF file the user names is; its source was resolved already."""
    return resolve_gguf_file(path)
