"""Optional parts the server uses when they are installed: tree-sitter cursor context and the K policy.

``codecue.context`` (cursor context class, scope, syntax-aware stops) and ``codecue.tuning`` (K per
language and context class, learned from acceptance) are developed separately. The server imports them
guarded and calls them through this adapter, so that it works without them, and a failure in them
costs one warning and a plain completion, never a failed request.

Without them: the language is the LSP ``languageId``, K is the completer's configured K, and a
completion stops at EOS, at the token limit, or at a blank line after some text (a cheap stand-in for a
syntax-aware stop).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

try:  # pragma: no cover - depends on what is installed
    from codecue.context import DocumentTrees, get_grammar, language_for_lsp_id  # type: ignore[attr-defined]
    from codecue.context.stopping import make_stop_predicate  # type: ignore[import-not-found]
except Exception as _exc:  # noqa: BLE001 - ImportError, or a half-built package
    DocumentTrees = None  # type: ignore[assignment,misc]
    get_grammar = None  # type: ignore[assignment]
    language_for_lsp_id = None  # type: ignore[assignment]
    make_stop_predicate = None  # type: ignore[assignment]
    log.debug("cursor context unavailable: %s", _exc)

try:  # pragma: no cover - depends on what is installed
    from codecue.tuning import KPolicy  # type: ignore[attr-defined]
except Exception as _exc:  # noqa: BLE001
    KPolicy = None  # type: ignore[assignment,misc]
    log.debug("K policy unavailable: %s", _exc)


def blank_line_stop(text: str) -> int | None:
    """Stop at the first blank line after some text: an inline suggestion is one block, not a file."""
    stripped = text.lstrip("\n")
    cut = stripped.find("\n\n")
    if cut < 0:
        return None
    return len(text) - len(stripped) + cut + 1


@dataclass
class CursorInfo:
    language: str  # CodeCue's language name when known, else the LSP languageId
    context_class: str | None = None
    context: Any = None


class ContextHooks:
    """Per-session adapter over the optional context engine (documents) and the shared K policy."""

    _policy_lock = threading.Lock()
    _policy: Any = None
    _policy_failed = False
    _runtime: str | None = None

    def __init__(self) -> None:
        self.trees: Any = None
        self._tracked: set[str] = set()  # documents the trees hold (those with a grammar)
        self._warned: set[str] = set()
        if DocumentTrees is not None:
            try:
                self.trees = DocumentTrees()
            except Exception as exc:  # noqa: BLE001
                self._warn("trees", f"cursor context disabled: {exc}")

    @property
    def available(self) -> bool:
        return self.trees is not None

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)

    def _call(self, key: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - the context engine must never fail a request
            self._warn(key, f"cursor context: {key} failed ({exc}); completing without it")
            return None

    # -- documents -----------------------------------------------------------------------------------
    def grammar_for(self, language_id: str) -> str | None:
        if language_for_lsp_id is None:
            return None
        grammar = self._call("language", language_for_lsp_id, language_id)
        return grammar if isinstance(grammar, str) and grammar else None

    def opened(self, uri: str, language_id: str, text: str) -> None:
        self._tracked.discard(uri)
        if self.trees is None or self.grammar_for(language_id) is None:
            return  # a language without a grammar (plain text, markdown): complete without context
        try:
            self.trees.open(uri, text, language_id)
            self._tracked.add(uri)
        except Exception as exc:  # noqa: BLE001
            self._warn(f"open:{language_id}", f"cursor context unavailable for {language_id}: {exc}")

    def changed(self, uri: str, change: Any, text_after: str) -> None:
        """One LSP content change (as lsprotocol structures it) was applied; ``text_after`` is the result."""
        if uri not in self._tracked:
            return
        rng = getattr(change, "range", None)
        try:
            if rng is None:
                self.trees.replace(uri, text_after)
            else:
                self.trees.apply_change(uri, rng.start.line, rng.start.character, rng.end.line,
                                        rng.end.character, change.text)
        except ValueError:
            # A range LSP lets us clamp but the tree index refuses: resync it with the whole text.
            self._call("replace", self.trees.replace, uri, text_after)
        except Exception as exc:  # noqa: BLE001
            self._warn("apply_change", f"cursor context: a change failed ({exc}); resyncing")
            self._call("replace", self.trees.replace, uri, text_after)

    def closed(self, uri: str) -> None:
        if uri in self._tracked:
            self._tracked.discard(uri)
            self._call("close", self.trees.close, uri)

    # -- completion ----------------------------------------------------------------------------------
    def language(self, language_id: str) -> str:
        """The name stats and K are keyed by: the grammar's language when there is one, else languageId."""
        grammar = self.grammar_for(language_id)
        if grammar is None:
            return language_id
        if get_grammar is not None:
            g = self._call("grammar", get_grammar, grammar)
            name = getattr(g, "language", None) or getattr(g, "name", None)
            if isinstance(name, str) and name:
                return name
        return grammar

    def cursor(self, uri: str, language_id: str, line: int, character: int) -> CursorInfo:
        info = CursorInfo(language=self.language(language_id))
        if uri in self._tracked:
            ctx = self._call("context", self.trees.context, uri, line, character)
            if ctx is not None:
                info.context = ctx
                info.context_class = getattr(ctx, "context_class", None)
                info.language = getattr(ctx, "language", None) or info.language
        return info

    def stop_predicate(self, info: CursorInfo) -> Any:
        if info.context is not None and make_stop_predicate is not None:
            predicate = self._call("stopping", make_stop_predicate, info.context)
            if predicate is not None:
                return predicate
        return blank_line_stop

    @classmethod
    def set_runtime(cls, runtime: str) -> None:
        """The models now run on ``runtime`` (e.g. "llamacpp"): the policy uses that runtime's costs."""
        cls._runtime = runtime
        policy = cls.policy()
        if policy is not None and hasattr(policy, "set_runtime"):
            try:
                policy.set_runtime(runtime)
            except Exception as exc:  # noqa: BLE001
                log.warning("K policy: could not switch to runtime %s: %s", runtime, exc)

    @classmethod
    def use_costs(cls, runtime: str, costs: Any) -> None:
        """Costs measured on this machine for ``runtime``: the policy chooses K with them from now on."""
        policy = cls.policy()
        if policy is not None:
            policy.use_measured_costs(runtime, costs)

    @classmethod
    def save_learned(cls) -> bool:
        """Keep what the policy learned (per-class acceptance, K) in the user's profile, so the next
        server starts from it. Atomic; a failure is logged, never raised. True when a profile was written."""
        policy = cls._policy
        if policy is None or not getattr(policy, "unsaved_rounds", 0):
            return False
        try:
            policy.save()
        except Exception as exc:  # noqa: BLE001 - losing the learned profile must not take the server down
            log.warning("could not save the learned K profile: %s", exc)
            return False
        return True

    @classmethod
    def policy(cls) -> Any:
        """The K policy shared by all sessions of this process (it learns across them)."""
        if KPolicy is None or cls._policy_failed:
            return None
        with cls._policy_lock:
            if cls._policy is None:
                try:
                    cls._policy = KPolicy.load(runtime=cls._runtime) if hasattr(KPolicy, "load") else KPolicy()
                except Exception as exc:  # noqa: BLE001
                    cls._policy_failed = True
                    log.warning("K policy disabled: %s", exc)
                    return None
            return cls._policy

    def k_for(self, info: CursorInfo) -> int | None:
        policy = self.policy()
        if policy is None or info.context_class is None:
            return None
        k = self._call("k_for", policy.k_for, info.language, info.context_class)
        return int(k) if isinstance(k, int) and k >= 0 else None

    def observer(self, info: CursorInfo) -> Any:
        """An ``on_round(record)`` callback feeding the policy each round's RoundRecord, or None."""
        policy = self.policy()
        if policy is None or info.context_class is None:
            return None

        from codecue.engine.rounds import RoundJoiner

        def observe(record: Any) -> None:
            self._call("observe_round", policy.observe_round, info.language, info.context_class, record)

        return RoundJoiner(observe)  # the worker closes it when the completion ends
