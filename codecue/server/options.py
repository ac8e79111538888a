"""The server's ``initializationOptions``: a defaulted dataclass, validated once at ``initialize``.

Every option is optional (camelCase on the wire)::

    {"maxTokens": 64, "temperature": 0.0, "languages": {"python": true, "markdown": false},
     "debounceMs": 0, "requestTimeoutMs": 300000, "model": {"target": "…", "draft": "…"}}

A bad value never fails ``initialize``: it is reported (the caller sends one ``window/showMessage``)
and its default is used. Unknown keys are reported too, so a typo does not silently do nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_TOKENS_LIMIT = 1024
MAX_DEBOUNCE_MS = 5000
MAX_TEMPERATURE = 2.0
MIN_REQUEST_TIMEOUT_MS = 100
MAX_REQUEST_TIMEOUT_MS = 3_600_000


@dataclass(frozen=True)
class ModelOptions:
    """Registry names or paths; None means the server's (or daemon's) default."""

    target: str | None = None
    draft: str | None = None


@dataclass(frozen=True)
class ServerOptions:
    max_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy (speculation is then exactly lossless)
    languages: Mapping[str, bool] = field(default_factory=dict)  # languageId -> enabled; absent = enabled
    debounce_ms: int = 0  # wait this long before generating; a newer request in the window replaces it
    # The watchdog: a request not answered within this long gets RequestFailed. Generous by default: a
    # first completion loads the models, and a long prompt's prefill on a slow CPU takes tens of seconds.
    request_timeout_ms: int = 300_000
    work_ahead: bool = True  # warm caches on open / cursor moves, prefetch after an accepted suggestion
    model: ModelOptions = field(default_factory=ModelOptions)
    token: str | None = None  # only for --tcp: the connection's shared secret (see docs/server.md)

    def language_enabled(self, *names: str | None) -> bool:
        """Disabled when any of the given names (LSP languageId, CodeCue language) is set to false."""
        return all(self.languages.get(name, True) for name in names if name)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_options(raw: Any) -> tuple[ServerOptions, list[str]]:
    """Validate ``initializationOptions``; returns the options and one line per problem found.

    Each problem names the option, what was wrong and the default that is used instead.
    """
    defaults = ServerOptions()
    problems: list[str] = []
    if raw is None:
        return defaults, problems
    if not isinstance(raw, Mapping):
        return defaults, [f"initializationOptions must be an object, got {type(raw).__name__}; using defaults"]

    values: dict[str, Any] = {}
    known = {"maxTokens", "temperature", "languages", "debounceMs", "requestTimeoutMs", "workAhead", "model", "token"}
    for key in raw:
        if key not in known:
            problems.append(f"unknown option {key!r} ignored (known: {', '.join(sorted(known - {'token'}))})")

    if "maxTokens" in raw:
        v = raw["maxTokens"]
        if _is_int(v) and 1 <= v <= MAX_TOKENS_LIMIT:
            values["max_tokens"] = v
        else:
            problems.append(f"maxTokens must be an integer from 1 to {MAX_TOKENS_LIMIT}, got {v!r}; "
                            f"using {defaults.max_tokens}")

    if "temperature" in raw:
        v = raw["temperature"]
        if (_is_int(v) or isinstance(v, float)) and math.isfinite(v) and 0 <= v <= MAX_TEMPERATURE:
            values["temperature"] = float(v)
        else:
            problems.append(f"temperature must be a number from 0 to {MAX_TEMPERATURE}, got {v!r}; "
                            f"using {defaults.temperature}")

    if "debounceMs" in raw:
        v = raw["debounceMs"]
        if _is_int(v) and 0 <= v <= MAX_DEBOUNCE_MS:
            values["debounce_ms"] = v
        else:
            problems.append(f"debounceMs must be an integer from 0 to {MAX_DEBOUNCE_MS}, got {v!r}; "
                            f"using {defaults.debounce_ms}")

    if "requestTimeoutMs" in raw:
        v = raw["requestTimeoutMs"]
        if _is_int(v) and MIN_REQUEST_TIMEOUT_MS <= v <= MAX_REQUEST_TIMEOUT_MS:
            values["request_timeout_ms"] = v
        else:
            problems.append(f"requestTimeoutMs must be an integer from {MIN_REQUEST_TIMEOUT_MS} to "
                            f"{MAX_REQUEST_TIMEOUT_MS}, got {v!r}; using {defaults.request_timeout_ms}")
    if "workAhead" in raw:
        v = raw["workAhead"]
        if isinstance(v, bool):
            values["work_ahead"] = v
        else:
            problems.append(f"workAhead must be true or false, got {v!r}; using {defaults.work_ahead}")

    if "languages" in raw:
        v = raw["languages"]
        if isinstance(v, Mapping):
            good = {k: b for k, b in v.items() if isinstance(k, str) and isinstance(b, bool)}
            bad = [k for k in v if k not in good]
            if bad:
                problems.append(f"languages must map language ids to true/false; ignoring {', '.join(map(repr, bad))}")
            values["languages"] = good
        else:
            problems.append(f"languages must be an object like {{\"python\": true}}, got {v!r}; all languages on")

    if "model" in raw:
        v = raw["model"]
        if isinstance(v, Mapping):
            model: dict[str, str | None] = {}
            for role in ("target", "draft"):
                ref = v.get(role)
                if ref is None:
                    continue
                if isinstance(ref, str) and ref.strip():
                    model[role] = ref.strip()
                else:
                    problems.append(f"model.{role} must be a model name or path, got {ref!r}; using the default")
            extra = [k for k in v if k not in ("target", "draft")]
            if extra:
                problems.append(f"unknown model option(s) {', '.join(map(repr, extra))} ignored")
            values["model"] = ModelOptions(**model)
        else:
            problems.append(f"model must be an object like {{\"target\": \"…\", \"draft\": \"…\"}}, got {v!r}; "
                            "using the default models")

    if "token" in raw:
        v = raw["token"]
        if isinstance(v, str):
            values["token"] = v
        else:
            problems.append("token must be a string")

    return ServerOptions(**values), problems
