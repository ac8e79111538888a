"""What to load: a resolved configuration planned into the exact model files and runtimes that serve.

Loading is one line of values (:meth:`codecue.completion.Completer.load`): the configuration is resolved
once (:func:`~codecue.loading.resolve.resolve_config`), planned here (:func:`plan_load`: the runtime plan's
choice where it applies, else the runtimes configured), loaded, then wrapped in a completer. A plan's
files are built here as model sources directly: a layout made here is checked once, never resolved as a
name again.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.backends import BACKENDS, cuda_available
from codecue.errors import BackendUnavailable, CodeCueError, ModelError
from codecue.loading.plan import Candidate, Plan, make_plan
from codecue.loading.resolve import ResolvedConfig, derived_source, resolve_config
from codecue.models.config import CompletionConfig, ModelChoice
from codecue.models.requantize import AS_IS
from codecue.models.resolve import ModelSource
from codecue.models.tokenizer import load_tokenizer

if TYPE_CHECKING:
    from codecue.backends.base import Backend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadSpec:
    """Exactly what to load: the files, the runtime of each, their settings, and whether requests draft."""

    target: ModelSource
    draft: ModelSource | None  # None: no draft model
    backend: str  # the target's runtime (``auto``: :func:`choose_backend` decides at load)
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
    """What serves the resolved configuration (:func:`planned_load`)."""
    return planned_load(resolved)[0]


def planned_load(resolved: ResolvedConfig) -> tuple[LoadSpec, Plan | None]:
    """What serves the resolved configuration: the runtime plan's choice for this machine where the plan
    applies (:func:`runtime_plan`), else the configured runtimes; with the plan (None where it does not)."""
    plan = runtime_plan(resolved)
    if plan is None:
        return configured_load(resolved), None
    log.info("runtime plan: %s (%s)", plan.chosen.label, plan.reason)
    return candidate_load(resolved, plan.chosen), plan


def _llamacpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def choose_backend(source: ModelSource, backend: str = "auto") -> str:
    """The backend ``auto`` means for this model on this machine."""
    if backend not in BACKENDS:
        raise CodeCueError(f"unknown backend {backend!r}", f"choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    if source.kind == "exl2":
        return "exllamav2"
    if source.kind == "gguf" and not cuda_available() and _llamacpp_installed():
        return "llamacpp"
    return "torch"


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        log.warning("%s", message)


def checked_llamacpp_layout(path: Path) -> bool:
    """Whether llama.cpp may repack ``path``'s weights here: the first layout whose child-process check
    passed (cached per machine, build and model). Raises BackendUnavailable when none did."""
    from codecue.backends.native_check import safe_llamacpp_layout

    layout, refused = safe_llamacpp_layout(path)
    if layout is None:
        raise BackendUnavailable(f"llama.cpp failed its check on {path.name}: " + "; ".join(refused),
                                 "see `codecue doctor`; the torch backend serves instead")
    if refused:
        _say_once(f"llama.cpp on {path.name}: {refused[0]} in a child-process check; "
                  f"serving with {layout} weights instead")
    return layout == "repack"


def create_backend(
    source: ModelSource,
    backend: str = "auto",
    *,
    dtype: str = "auto",
    device: str = "auto",
    n_ctx: int = 4096,
) -> Backend:
    """Load ``source`` on the chosen runtime. ``auto`` prefers llama.cpp for GGUF on a CPU-only machine
    and falls back to torch, with one warning, when llama.cpp is missing or fails to load."""
    chosen = choose_backend(source, backend)
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    if chosen == "llamacpp":
        if source.kind != "gguf":
            raise CodeCueError(f"the llama.cpp backend loads GGUF files; {source.path} is {source.kind}",
                               "use --backend torch for HF directories")
        try:
            from codecue.backends.llamacpp import LlamaCppBackend, _load_lib

            _load_lib()
            from codecue.backends.native_check import faster_attention

            repack = checked_llamacpp_layout(source.path)
            return LlamaCppBackend.load(source.path, n_ctx=n_ctx, repack=repack,
                                        flash_attn=lambda shape: faster_attention(source.path, repack, shape))
        except BackendUnavailable as exc:
            if backend == "llamacpp":
                raise
            _say_once(f"llama.cpp unavailable ({exc}); falling back to the torch backend")
            chosen = "torch"
        except ImportError as exc:
            if backend == "llamacpp":
                raise BackendUnavailable(f"llama.cpp backend not available: {exc}",
                                         "pip install 'codecue[llamacpp]'") from exc
            chosen = "torch"
    if chosen == "exllamav2":
        from codecue.backends.exllamav2 import ExLlamaV2Backend

        return ExLlamaV2Backend.load(source.path, max_seq_len=n_ctx)
    from codecue.backends.torch_backend import TorchBackend

    if source.kind == "gguf":
        return TorchBackend.from_pretrained(source.path.parent, gguf_file=source.path.name, dtype=dtype, device=device)
    if source.kind == "exl2":
        raise CodeCueError(f"{source.path} is an EXL2 model, which only the exllamav2 backend loads",
                           "use --backend exllamav2 on a CUDA machine")
    return TorchBackend.from_pretrained(source.path, dtype=dtype, device=device)


def check_same_tokenizer(target: Any, draft: Any) -> None:
    """Draft and target must share a tokenizer, or the draft's token ids mean other words. Checked
    before loading anything (cheap for GGUF: the token list's hash from the header)."""
    if target.kind != "gguf" or draft.kind != "gguf":
        return  # HF/EXL2 pairs are checked by vocabulary size once loaded
    from codecue.models.gguf_reader import read_gguf_vocab

    t, d = read_gguf_vocab(target.path), read_gguf_vocab(draft.path)
    if t.vocab_size != d.vocab_size or (t.tokens_sha256 and d.tokens_sha256 and t.tokens_sha256 != d.tokens_sha256):
        raise ModelError(
            f"draft {draft.path} does not share the tokenizer of target {target.path} "
            f"({d.vocab_size} vs {t.vocab_size} tokens{', different token lists' if t.vocab_size == d.vocab_size else ''})",
            "pick a draft from the same model family, or run with --draft-mode ngram",
        )


@dataclass(frozen=True)
class LoadedModels:
    """What :func:`load_backends` loaded for ``spec``: the tokenizer, the target, the draft (None without one)."""

    spec: LoadSpec
    tokenizer: Any
    target: Backend
    draft: Backend | None

    @property
    def names(self) -> tuple[str, str | None]:
        """The model files of what was loaded (the spec's draft only where one was loaded)."""
        target, draft = self.spec.names
        return target, draft if self.draft is not None else None


def plan_config(config: CompletionConfig) -> LoadSpec:
    """What serves ``config`` here: its models resolved once and planned (:func:`planned_load`)."""
    config.decoding.validate()
    return planned_load(resolve_config(config))[0]


def what_serves(config: CompletionConfig) -> dict[str, str | None]:
    """What the model worker loads for ``config`` (:func:`plan_config`), as ``codecue explain`` and
    ``codecue doctor`` show it: the plan's choice, the runtime label and the model files."""
    config.decoding.validate()
    spec, plan = planned_load(resolve_config(config))
    target, draft = spec.names
    return {"plan": plan.chosen.label if plan is not None else "the configured runtimes (no runtime plan)",
            "runtime": spec_runtime(spec), "target": target, "draft": draft}


def spec_runtime(spec: LoadSpec) -> str:
    """The runtime label of what ``spec`` loads, as its completer reports it (what costs and K are keyed
    by): the target's runtime, and ``+`` the draft's where that differs."""
    target = choose_backend(spec.target, spec.backend)
    draft = choose_backend(spec.draft, spec.draft_backend) if spec.draft is not None else target
    return target if draft == target else f"{target}+{draft}"


def load_models(config: CompletionConfig) -> LoadedModels:
    """Load what ``config`` asks for, each step once: resolve the models, plan what serves them here, load
    that (:meth:`codecue.completion.Completer.from_loaded` wraps it)."""
    return load_backends(plan_config(config))


def runtimes(spec: LoadSpec) -> set[str]:
    """The runtimes that load ``spec``'s models (``auto`` decided)."""
    chosen = {choose_backend(spec.target, spec.backend)}
    if spec.draft is not None:
        chosen.add(choose_backend(spec.draft, spec.draft_backend))
    return chosen


def load_backends(spec: LoadSpec) -> LoadedModels:
    """The tokenizer, the target and the draft that ``spec`` names, loaded."""
    if spec.draft is not None:
        check_same_tokenizer(spec.target, spec.draft)
    used = runtimes(spec)
    # With llama.cpp alone, the tokenizer (importing transformers: mostly Python) loads on a thread while
    # llama.cpp reads the weights (native code that lets go of the GIL): about a second off a cold start.
    # Other runtimes import transformers themselves, which two threads must not do at once.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-tokenizer") as pool:
        if used == {"llamacpp"}:
            tokenizer = pool.submit(load_tokenizer, spec.target)
        else:
            tokenizer = Future()
            tokenizer.set_result(load_tokenizer(spec.target))
        if used == {"exllamav2"} and spec.draft is not None:
            # Both on the GPU: plan VRAM for both models and caches first; a draft that does not fit is
            # dropped (target-only, said once) rather than failing the load.
            from codecue.backends.exllamav2 import load_pair

            target, draft, _vram = load_pair(spec.target.path, spec.draft.path, spec.n_ctx)
            return LoadedModels(spec, tokenizer.result(), target, draft)
        target = create_backend(spec.target, spec.backend, dtype=spec.dtype, device=spec.device, n_ctx=spec.n_ctx)
        draft = None
        if spec.draft is not None:
            draft = create_backend(spec.draft, spec.draft_backend, dtype=spec.draft_dtype, device=spec.device,
                                   n_ctx=spec.n_ctx)
        return LoadedModels(spec, tokenizer.result(), target, draft)
