"""Which models to run and how to decode with them: the configuration every command, the completer and the
server take. Frozen: a configuration is built once (from flags, a client's hello, the user's config) and
then only read.

- :class:`ModelChoice`: the model pair and the runtimes they load on. Changing it means loading models.
- :class:`DecodingSettings`: how requests decode with the loaded models (drafting, K, the prompt). The
  server's worker applies them per request; only two of them decide what is loaded (see
  :meth:`CompletionConfig.load_key`).
- :class:`CompletionConfig`: the two together, as a command or an editor session asks for them, and as
  the daemon's relay sends them (:data:`WIRE_FIELDS`).

Their options (names, ranges, defaults, the one message a bad value gets) are declared in
:mod:`codecue.options`.

Kept free of heavy imports: the command line builds its flags from these choices, and the server keys its
loaded models by a configuration without loading torch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from codecue.options import (
    CONFIG_FIELDS,
    DRAFT_MODES,
    DRAFT_VOCABS,
    DTYPES,
    HELLO,
    MAX_CHUNK_REUSE,
    MODEL_DRAFT_MODES,
    check,
    read_wire_values,
)

if TYPE_CHECKING:
    from codecue.engine.fim import PromptBudget

__all__ = ["DRAFT_MODES", "DRAFT_VOCABS", "DTYPES", "MAX_CHUNK_REUSE", "MODEL_DRAFT_MODES", "WIRE_FIELDS",
           "CompletionConfig", "DecodingSettings", "LoadKey", "ModelChoice"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelChoice:
    """The model pair and the runtimes they run on: what is loaded."""

    target: str | None = None  # registry name or path; None = configured default
    draft: str | None = None
    backend: str = "auto"  # auto | torch | llamacpp | exllamav2 (codecue.backends.BACKENDS)
    draft_backend: str | None = None  # None = same as backend
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 | int8 (torch backend)
    draft_dtype: str | None = None  # None: see draft_dtype_or_default
    device: str = "auto"
    n_ctx: int = 4096
    remote: str | None = None  # a shared inference server's URL; the models above are then its fallback

    @property
    def draft_dtype_or_default(self) -> str:
        """The draft's dtype: as given, else the target's, except that an int8 target leaves the draft at auto."""
        return self.draft_dtype or ("auto" if self.dtype == "int8" else self.dtype)


@dataclass(frozen=True)
class DecodingSettings:
    """How a request decodes with the loaded models.

    All of them apply per request, except what a draft model needs at load: whether one is loaded at all
    (``draft_mode`` hybrid or model) and ``draft_vocab``, which restricts the draft's output head when it
    loads (a backend slices its head's weights once; switching per request would re-slice them). A change
    of either loads the models again; see :meth:`CompletionConfig.load_key`.
    """

    draft_mode: str = "hybrid"  # hybrid | model | ngram | none
    k: int | None = None  # a fixed draft depth; None: the K authority decides per request (codecue.tuning.policy)
    min_confidence: float = 0.4  # draft early stop
    draft_vocab: str = "code"  # code: the draft's head scores only ASCII code tokens (when the backend can)
    budget: PromptBudget | None = None  # the FIM prompt's token budget; None: the engine's default
    first_text_ms: int = -1  # the budget's first_text_ms when >= 0 (0: always the full prompt); -1: the budget's
    # Chunk reuse: keep cached runs of at least this many tokens that reappear further on in a new prompt
    # (after an edit, a jump, a slid window) by shifting their positions, where the backend can (llama.cpp);
    # 0: reuse the common prefix only. See CachedSequence and docs/how-it-works.md, "Chunk reuse".
    chunk_reuse: int = 64

    @property
    def uses_draft_model(self) -> bool:
        return self.draft_mode in MODEL_DRAFT_MODES

    def validate(self) -> None:
        """Raises an OptionError naming the setting out of range (the message its flag, config.toml and an
        editor get for it). Not done at construction: a client's settings are reported where they are
        used, as a request's error, not as a refused connection."""
        for f in fields(self):
            option, value = CONFIG_FIELDS.get(f.name), getattr(self, f.name)
            if option is not None and value != f.default:  # a default may be a sentinel: first_text_ms -1
                check(option, value)


#: what loading depends on (see :meth:`CompletionConfig.load_key`)
LoadKey = tuple[ModelChoice, bool, str | None]


@dataclass(frozen=True)
class CompletionConfig:
    """The models to load and how to decode with them."""

    models: ModelChoice = field(default_factory=ModelChoice)
    decoding: DecodingSettings = field(default_factory=DecodingSettings)

    def load_key(self) -> LoadKey:
        """What the loaded models depend on, so what the server keys them by: the model choice, whether a
        draft model is loaded, and (with one) the draft vocabulary its head is restricted to at load. Other
        decoding settings change nothing that is loaded."""
        drafts = self.decoding.uses_draft_model
        return self.models, drafts, self.decoding.draft_vocab if drafts else None

    def with_models(self, target: str | None, draft: str | None) -> CompletionConfig:
        """This configuration with the target and draft given (None keeps the configured one)."""
        return replace(self, models=replace(self.models, target=target or self.models.target,
                                            draft=draft or self.models.draft))

    def to_json(self) -> dict[str, Any]:
        """What status shows (the remote URL never with user:password)."""
        models, decoding = self.models, self.decoding
        return {"target": models.target, "draft": models.draft, "backend": models.backend,
                "draftBackend": models.draft_backend, "draftMode": decoding.draft_mode, "dtype": models.dtype,
                "remote": _display_url(models.remote)}

    def with_values(self, changes: Mapping[str, Any]) -> CompletionConfig:
        """This configuration with checked option values by Python name (fields of either half)."""
        return CompletionConfig(
            replace(self.models, **{k: v for k, v in changes.items() if k in _MODEL_FIELDS}),
            replace(self.decoding, **{k: v for k, v in changes.items() if k not in _MODEL_FIELDS}))

    def with_wire_values(self, values: Any) -> CompletionConfig:
        """This configuration with the fields a client sent (camelCase keys, as :data:`WIRE_FIELDS`). A bad
        value is logged and left out (the daemon also shows it to the session's editor: see
        :func:`~codecue.options.read_wire_values`); an empty ``remote`` means none."""
        changes, problems = read_wire_values(values)
        for problem in problems:
            log.warning("hello: %s", problem)
        return self.with_values(changes)


#: The fields a client (the relay's hello) may set, by their camelCase name on the wire.
WIRE_FIELDS = {key: option.name for key, option in HELLO.items()}
_MODEL_FIELDS = {f.name for f in fields(ModelChoice)}


def _display_url(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
