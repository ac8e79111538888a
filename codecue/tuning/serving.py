"""What to load: a resolved configuration planned into the exact model files and runtimes that serve.

Loading is one line of values (:meth:`codecue.completion.Completer.load`): the configuration is resolved
once (:func:`~codecue.models.resolve.resolve_config`), planned here (:func:`plan_load`: the runtime plan's
choice where it applies, else the runtimes configured), loaded, then wrapped in a completer. A plan's
files are built here as model sources directly: a layout made here is checked once, never resolved as a
name again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from codecue.backends import cuda_available
from codecue.models.config import ModelChoice
from codecue.models.requantize import AS_IS
from codecue.models.resolve import ModelSource, ResolvedConfig, derived_source
from codecue.tuning.plan import Candidate, Plan, make_plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadSpec:
    """Exactly what to load: the files, the runtime of each, their settings, and whether requests draft."""

    target: ModelSource
    draft: ModelSource | None  # None: no draft model
    backend: str  # the target's runtime (``auto``: codecue.backends.choose_backend decides at load)
    draft_backend: str
    dtype: str
    draft_dtype: str
    device: str
    n_ctx: int
    #: the runtime plan chose a target-only configuration: every request decodes with the target alone
    target_only: bool = False

    @property
    def names(self) -> tuple[str, str | None]:
        """The model files, as the completer reports them (what measured costs are keyed by)."""
        return str(self.target.path), str(self.draft.path) if self.draft is not None else None


def _spec(models: ModelChoice, target: ModelSource, draft: ModelSource | None, backend: str,
          draft_backend: str | None, target_only: bool = False) -> LoadSpec:
    return LoadSpec(target, draft, backend, draft_backend or backend, models.dtype, models.draft_dtype_or_default,
                    models.device, models.n_ctx, target_only)


def configured_load(resolved: ResolvedConfig) -> LoadSpec:
    """The resolved models on the runtimes the configuration names."""
    models = resolved.config.models
    return _spec(models, resolved.target, resolved.draft, models.backend, models.draft_backend)


def candidate_load(resolved: ResolvedConfig, candidate: Candidate) -> LoadSpec:
    """The resolved models as ``candidate`` serves them: its runtimes, its weight layouts (re-quantized
    here when not made yet, seconds, once), and the draft model only where it drafts with one."""
    target_file, draft_file = candidate.files(resolved.target.path,
                                              resolved.draft.path if resolved.draft is not None else None)
    target = resolved.target if candidate.layout == AS_IS else derived_source(Path(target_file))
    draft = None  # an n-gram candidate drafts without a draft model: hybrid requests then draft by n-gram
    if candidate.loads_draft and resolved.draft is not None and draft_file is not None:
        draft = resolved.draft if candidate.draft_layout == AS_IS else derived_source(Path(draft_file))
    return _spec(resolved.config.models, target, draft, candidate.backend, candidate.draft_backend,
                 target_only=not candidate.speculative)


def runtime_plan(resolved: ResolvedConfig) -> Plan | None:
    """The runtime plan for the resolved pair, or None where it does not apply: runtimes chosen by hand, a
    model that is not GGUF, a CUDA machine."""
    models = resolved.config.models
    if models.backend != "auto" or models.draft_backend is not None:
        return None
    draft = resolved.draft
    if resolved.target.kind != "gguf" or (draft is not None and draft.kind != "gguf") or cuda_available():
        return None
    return make_plan(str(resolved.target.path), str(draft.path) if draft is not None else None)


def plan_load(resolved: ResolvedConfig) -> LoadSpec:
    """What serves the resolved configuration: the runtime plan's choice for this machine where the plan
    applies (:func:`runtime_plan`), else the configured runtimes."""
    plan = runtime_plan(resolved)
    if plan is None:
        return configured_load(resolved)
    log.info("runtime plan: %s (%s)", plan.chosen.label, plan.reason)
    return candidate_load(resolved, plan.chosen)
