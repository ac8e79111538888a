"""The server's ``initializationOptions``: a defaulted dataclass, validated once at ``initialize``.

Every option is optional (camelCase on the wire; declared with its range and default in
:mod:`codecue.options`, with the flags and ``config.toml`` entries it shares a check with)::

    {"maxTokens": 64, "temperature": 0.0, "languages": {"python": true, "markdown": false},
     "debounceMs": 0, "requestTimeoutMs": 300000, "model": {"target": "…", "draft": "…"},
     "draftMode": "hybrid", "chunkReuse": 64}

A bad value never fails ``initialize``: it is reported (the caller sends one ``window/showMessage``) with
the message its flag and ``config.toml`` get, and its default is used. Unknown keys are reported too, so a
typo does not silently do nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from codecue.options import INIT, OptionError, check, good_languages, show

#: the keys of initializationOptions' ``model`` object
_MODEL_ROLES = ("target", "draft")


@dataclass(frozen=True)
class ModelOptions:
    """Registry names or paths; None means the server's (or daemon's) default."""

    target: str | None = None
    draft: str | None = None


@dataclass(frozen=True)
class ServerOptions:
    max_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy: the target's own greedy choice from the cache it holds
    languages: Mapping[str, bool] = field(default_factory=dict)  # languageId -> enabled; absent = enabled
    debounce_ms: int = 0  # wait this long before generating; a newer request in the window replaces it
    # The watchdog: a request not answered within this long gets RequestFailed. Generous by default: a
    # first completion loads the models, and a long prompt's prefill on a slow CPU takes tens of seconds.
    request_timeout_ms: int = 300_000
    work_ahead: bool = True  # warm caches on open / cursor moves, prefetch after an accepted suggestion
    model: ModelOptions = field(default_factory=ModelOptions)
    token: str | None = None  # only for --tcp: the connection's shared secret (see docs/server.md)
    # The session's decoding settings (DecodingSettings fields by name) over the server's: they apply to
    # this editor's requests only, as a relay's hello does for the daemon's.
    decoding: Mapping[str, Any] = field(default_factory=dict)

    def language_enabled(self, *names: str | None) -> bool:
        """Disabled when any of the given names (LSP languageId, CodeCue language) is set to false."""
        return all(self.languages.get(name, True) for name in names if name)


def parse_options(raw: Any) -> tuple[ServerOptions, list[str]]:
    """Validate ``initializationOptions``; returns the options and one line per problem found.

    Each problem is the option's own message (the one its flag and config.toml entry get) and what is used
    instead.
    """
    if raw is None:
        return ServerOptions(), []
    if not isinstance(raw, Mapping):
        return ServerOptions(), [f"initializationOptions must be an object, got {type(raw).__name__}; using defaults"]
    values: dict[str, Any] = {}
    decoding: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        if key == "model":
            values["model"] = _model(value, problems)
        elif key == "languages":
            values["languages"] = _languages(value, problems)
        elif key not in INIT:
            known = sorted({k.partition(".")[0] for k in INIT} - {"token"})
            problems.append(f"unknown option {key!r} ignored (known: {', '.join(known)})")
        else:
            option = INIT[key]
            try:
                checked = check(option, value)
            except OptionError as exc:
                fallback = "the server's" if option.hello else option.default_text
                problems.append(f"{exc}; using {fallback}")
                continue
            (decoding if option.hello else values)[option.name] = checked
    return ServerOptions(**values, decoding=decoding), problems


def _languages(value: Any, problems: list[str]) -> dict[str, bool]:
    """The ``languages`` object; a bad entry is reported and the good ones are kept."""
    try:
        return check(INIT["languages"], value)
    except OptionError as exc:
        if not isinstance(value, Mapping):
            problems.append(f"{exc}; all languages on")
            return {}
        problems.append(f"{exc}; ignoring those")
        return good_languages(value)


def _model(value: Any, problems: list[str]) -> ModelOptions:
    """The ``model`` object: ``target`` and ``draft``, each checked as ``--target`` and ``--draft`` are."""
    if not isinstance(value, Mapping):
        problems.append(f'model: {show(value)} is not an object like {{"target": "…", "draft": "…"}}; '
                        "using the server's models")
        return ModelOptions()
    model: dict[str, str | None] = {}
    for role in _MODEL_ROLES:
        try:
            model[role] = check(INIT[f"model.{role}"], value.get(role))
        except OptionError as exc:
            problems.append(f"{exc}; using the default {role}")
    extra = [k for k in value if k not in _MODEL_ROLES]
    if extra:
        problems.append(f"unknown model option(s) {', '.join(map(repr, extra))} ignored")
    return ModelOptions(**model)
