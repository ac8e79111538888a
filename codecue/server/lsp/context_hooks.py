"""What a session asks the context engine: the cursor's context, and who learns from its rounds.

The tree-sitter context (:mod:`codecue.context`: context class, scope, syntax-aware stops) follows each
open document; :func:`codecue.request.prepare` makes a job's stop rule from it. The cursor's language and
class go with each job to the model worker, whose K authority
(:mod:`codecue.tuning.policy`, shared by every session on it) decides the draft depth once the models are
loaded, and learns from the rounds reported here. A failure costs one warning and a plain completion,
never a failed request: the language is then the LSP ``languageId``, the class none, and a completion
stops at EOS, at the token limit, or at a blank line after some text.
"""

from __future__ import annotations

import logging
from typing import Any

from codecue.context import DocumentTrees, get_grammar, language_for_lsp_id
from codecue.engine.rounds import RoundJoiner
from codecue.engine.stops import blank_line_stop as blank_line_stop  # the fallback stop, named here too
from codecue.request import CursorInfo
from codecue.tuning import KPolicy

log = logging.getLogger(__name__)


class ContextHooks:
    """Per-session: the cursor context of the session's documents; rounds reported to the worker's K policy."""

    def __init__(self, k_policy: KPolicy | None = None) -> None:
        self.k_policy = k_policy
        self.trees: DocumentTrees | None = None
        self._tracked: set[str] = set()  # documents the trees hold (those with a grammar)
        self._warned: set[str] = set()
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

    def tree(self, uri: str) -> Any:
        """The document's up-to-date syntax tree (the one its cursor context reads), None where none is kept."""
        return self._call("tree", self.trees.tree, uri) if uri in self._tracked else None

    # -- completion ----------------------------------------------------------------------------------
    def language(self, language_id: str) -> str:
        """The name stats and K are keyed by: the grammar's language when there is one, else languageId."""
        grammar = self.grammar_for(language_id)
        if grammar is None:
            return language_id
        g = self._call("grammar", get_grammar, grammar)
        return g.language if g is not None else grammar

    def cursor(self, uri: str, language_id: str, line: int, character: int) -> CursorInfo:
        info = CursorInfo(language=self.language(language_id))
        if uri in self._tracked:
            ctx = self._call("context", self.trees.context, uri, line, character)
            if ctx is not None:
                info.context = ctx
                info.context_class = ctx.context_class
                info.language = ctx.language or info.language
        return info

    def observer(self, info: CursorInfo) -> Any:
        """An ``on_round(record)`` callback feeding the policy each round's RoundRecord, or None."""
        policy = self.k_policy
        if policy is None or info.context_class is None:
            return None

        def observe(record: Any) -> None:
            self._call("observe_round", policy.observe_round, info.language, info.context_class, record)

        return RoundJoiner(observe)  # the worker closes it when the completion ends
