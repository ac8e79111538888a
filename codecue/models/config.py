"""Which models to run and how: the one configuration every command, the completer and the server take.

Kept free of heavy imports: the command line builds its flags from these choices (``codecue --help`` stays
instant), and the server keys its loaded models by a :class:`ModelConfig` without loading torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from codecue.errors import CodeCueError

if TYPE_CHECKING:
    from codecue.engine.fim import PromptBudget

DRAFT_MODES = ("hybrid", "model", "ngram", "none")
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
DRAFT_VOCABS = ("code", "full")


@dataclass
class ModelConfig:
    """The model pair, the runtimes they run on, and how drafting works."""

    target: str | None = None  # registry name or path; None = configured default
    draft: str | None = None
    backend: str = "auto"  # auto | torch | llamacpp | exllamav2
    draft_backend: str | None = None  # None = same as backend
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16 | int8 (torch backend)
    draft_dtype: str | None = None
    device: str = "auto"
    draft_mode: str = "hybrid"  # hybrid | model | ngram | none
    k: int | None = None  # a fixed draft depth; None: the K authority decides per request (codecue.tuning.policy)
    min_confidence: float = 0.4  # draft early stop
    draft_vocab: str = "code"  # code: the draft's head scores only ASCII code tokens (when the backend can)
    n_ctx: int = 4096
    budget: PromptBudget | None = None  # the FIM prompt's token budget; None: the engine's default
    first_text_ms: int = -1  # the budget's first_text_ms when >= 0 (0: always the full prompt); -1: the budget's
    remote: str | None = None  # a shared inference server's URL; the models above are then its fallback

    def validate(self) -> None:
        if self.draft_mode not in DRAFT_MODES:
            raise CodeCueError(f"unknown draft mode {self.draft_mode!r}", f"choose one of {', '.join(DRAFT_MODES)}")
        if self.k is not None and not 0 <= self.k <= 32:
            raise CodeCueError(f"k={self.k} is out of range", "choose 0 (no speculation) to 32")
        if self.draft_vocab not in DRAFT_VOCABS:
            raise CodeCueError(f"unknown draft vocabulary {self.draft_vocab!r}", "choose code or full")
        if not 0.0 <= self.min_confidence < 1.0:
            raise CodeCueError("min_confidence must be in [0, 1)")

    def with_models(self, target: str | None, draft: str | None) -> ModelConfig:
        return replace(self, target=target or self.target, draft=draft or self.draft)

    def to_json(self) -> dict[str, Any]:
        """What status shows (the remote URL never with user:password)."""
        return {"target": self.target, "draft": self.draft, "backend": self.backend,
                "draftBackend": self.draft_backend, "draftMode": self.draft_mode, "dtype": self.dtype,
                "remote": _display_url(self.remote)}

    def with_wire_values(self, values: Any) -> ModelConfig:
        """This configuration with the fields a client sent (camelCase keys, as :data:`WIRE_FIELDS`);
        values of the wrong type are ignored, an empty ``remote`` means none."""
        if not isinstance(values, dict):
            return self
        changes: dict[str, Any] = {}
        for key, name in WIRE_FIELDS.items():
            value = values.get(key)
            if name == "remote" and key in values and (value is None or isinstance(value, str)):
                changes[name] = value or None
            elif _FIELD_TYPES[name] is float and isinstance(value, int | float) and not isinstance(value, bool):
                changes[name] = float(value)
            elif _FIELD_TYPES[name] is int and isinstance(value, int) and not isinstance(value, bool):
                changes[name] = value
            elif _FIELD_TYPES[name] is str and isinstance(value, str) and value:
                changes[name] = value
        if changes.get("backend") == "remote":
            changes["backend"] = "auto"
        return replace(self, **changes)


#: The fields a client (the relay's hello) may set, by their camelCase name on the wire.
WIRE_FIELDS = {"target": "target", "draft": "draft", "backend": "backend", "draftBackend": "draft_backend",
               "dtype": "dtype", "device": "device", "draftMode": "draft_mode", "k": "k",
               "minConfidence": "min_confidence", "draftVocab": "draft_vocab", "remote": "remote",
               "firstTextMs": "first_text_ms"}
_FIELD_TYPES = {f.name: {"int": int, "int | None": int, "float": float}.get(str(f.type), str)
                for f in fields(ModelConfig)}


def _display_url(url: str | None) -> str | None:
    if url is None:
        return None
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))
