"""A completion request as a value, and the one place that makes a job of it.

Whoever asks for a completion (the language server, ``codecue complete``, the benchmark lab) builds a
frozen :class:`CompletionRequest` (the document as the request saw it, the cursor, the options) and
calls :func:`prepare` with what it knows of the cursor (:class:`CursorInfo`, from tree-sitter) and the
project context it chose: the :class:`PreparedJob` it gets carries the text around the cursor, the stop
rule, the limits and the job's :class:`JobKind`. A completer turns it into prompt tokens
(``Completer.prompt_for``, within the prompt budget of the decoding settings) and :func:`complete_job`
runs it, so every caller decodes the same prompt with the same stop.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from codecue.document import file_path, split_at
from codecue.engine.postprocess import tidy_completion
from codecue.engine.stops import StopRule

if TYPE_CHECKING:
    from codecue.engine.results import GenerationResult
    from codecue.engine.rounds import RoundRecord
    from codecue.models.config import DecodingSettings


class JobKind(enum.Enum):
    """What a job asks of the model worker, once the models it needs are loaded."""

    COMPLETE = "complete"  # generate a completion at the cursor: the result is a GenerationResult
    #: at a line's end, generate the line after it as if Enter were pressed (at the start of a new line,
    #: held for Enter and the indentation the editor inserts): the result is a GenerationResult
    NEXT_LINE = "next-line"
    WARM = "warm"  # only evaluate the prompt into the caches: the result is None
    LOAD = "load"  # only load the models (an editor just connected): the result is None

    @property
    def generates(self) -> bool:
        return self in (JobKind.COMPLETE, JobKind.NEXT_LINE)


@dataclass
class CursorInfo:
    """What the context engine says of the cursor: the language stats and K are keyed by (CodeCue's name
    when it has a grammar, else the LSP languageId), the context class, and the tree-sitter context."""

    language: str
    context_class: str | None = None
    context: Any = None


@dataclass(frozen=True)
class RequestOptions:
    """How a request decodes beyond the model's settings: limits, sampling, and whether the syntax stops it."""

    max_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    scope_stop: bool = True  # stop where the statement or block at the cursor is complete (else at EOS/limit)


@dataclass(frozen=True)
class CompletionRequest:
    """A request: the document split at the cursor, as it was when the request arrived."""

    uri: str
    version: int
    line: int
    character: int
    prefix: str
    suffix: str
    language_id: str
    options: RequestOptions = field(default_factory=RequestOptions)
    request_id: int | str | None = None  # the LSP request's id (partial results name it)

    @classmethod
    def at(cls, uri: str, text: str, line: int, character: int, language_id: str,
           options: RequestOptions | None = None, version: int = 0) -> CompletionRequest:
        """The request at an LSP position of ``text`` (PositionError when it is not in the text)."""
        prefix, suffix = split_at(text, line, character)
        return cls(uri, version, line, character, prefix, suffix, language_id, options or RequestOptions())

    @property
    def path(self) -> str:
        """The document's name in the prompt (the model sees it after ``<|file_sep|>``)."""
        path = file_path(self.uri)
        return path if path is not None else self.uri

    @property
    def at_line_end(self) -> bool:
        """Whether nothing but blanks follows the cursor on its line (where Enter starts a new line)."""
        return not self.suffix.split("\n", 1)[0].strip() and bool(self.prefix.rsplit("\n", 1)[-1].strip())

    @property
    def line_entered(self) -> CompletionRequest | None:
        """At a new line that holds only the indentation Enter inserted, after a line with code: the request
        at that line's end (whose :attr:`next_line` this place is, but for the indentation); else None."""
        before, newline, head = self.prefix.rpartition("\n")
        if not newline or head.strip() or self.suffix.split("\n", 1)[0].strip():
            return None
        line = before.rsplit("\n", 1)[-1]
        entered = replace(self, line=self.line - 1, character=len(line.encode("utf-16-le")) // 2, prefix=before)
        return entered if entered.at_line_end else None

    @property
    def next_line(self) -> CompletionRequest:
        """The place after Enter at the end of this line, before the editor's indentation: where a next
        line is prepared (the model writes the indentation)."""
        return replace(self, prefix=self.prefix + "\n")


@dataclass(frozen=True)
class PreparedJob:
    """A request made ready for the model worker: what the completer needs, and nothing of the editor."""

    kind: JobKind
    prefix: str  # the document before the cursor (the prompt builder cuts it to the budget)
    suffix: str
    extra_context: tuple[tuple[str, str], ...]  # (path, text) chunks of other files
    path: str | None
    options: RequestOptions
    language: str
    context_class: str | None
    stop_rule: StopRule | None  # data: the predicate is made where the model runs


def prepare(request: CompletionRequest, cursor: CursorInfo, *, kind: JobKind = JobKind.COMPLETE,
            extra_context: Sequence[tuple[str, str]] = ()) -> PreparedJob:
    """The job for ``request``: its stop rule from the cursor's syntax (a completion stops where the
    statement or block is complete, else at a blank line, and where it starts repeating the code after
    the cursor). A next line is prepared at the start of a new line after the cursor's (the newline
    inserted, no indentation: the model writes it) and stops at that line's end."""
    if kind is JobKind.NEXT_LINE:
        request = request.next_line
    return PreparedJob(kind, request.prefix, request.suffix, tuple(extra_context), request.path, request.options,
                       cursor.language, cursor.context_class, stop_rule(kind, request, cursor))


def stop_rule(kind: JobKind, request: CompletionRequest, cursor: CursorInfo) -> StopRule | None:
    if not kind.generates:
        return None
    if kind is JobKind.NEXT_LINE:
        return StopRule.at_cursor(None, request.prefix, request.suffix, next_line=True)
    if not request.options.scope_stop:
        return None
    return StopRule.at_cursor(scope_stop(cursor), request.prefix, request.suffix)


def scope_stop(cursor: CursorInfo) -> Any:
    """The syntax's stop at the cursor (:class:`~codecue.context.stopping.ScopeStop`), or None without a
    context or where it cannot be made (the rule then stops at a blank line)."""
    if cursor.context is None:
        return None
    from codecue.context.stopping import ScopeStop

    try:
        return ScopeStop.of(cursor.context)
    except Exception:  # noqa: BLE001 - a context failure must not stop a completion
        return None


def cursor_in(text: str, path: str, line: int, character: int, language: str | None = None) -> CursorInfo:
    """The cursor as the server's context engine sees it, for a document it does not follow (``codecue
    complete``, the benchmark lab): tree-sitter's analysis of ``text`` by its path's language (or
    ``language``), else just that language (any failure: a context problem must not stop a completion)."""
    from pathlib import Path

    try:
        from codecue.context import analyze, language_for_path

        grammar = language_for_path(Path(path)) or language
        if grammar is None:
            return CursorInfo(language or "unknown")
        context = analyze(text, grammar, line, character)
        return CursorInfo(context.language or grammar, context.context_class, context)
    except Exception:  # noqa: BLE001
        return CursorInfo(language or "unknown")


class Completes(Protocol):
    """What every completer offers the worker (in-process, in a model process, on a remote server)."""

    names: tuple[str, str | None]

    def complete(self, prefix: str, suffix: str = "", **kwargs: Any) -> GenerationResult: ...

    def warm_context(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (),
                     **kwargs: Any) -> int: ...

    def reset_caches(self) -> None: ...

    def close(self) -> None: ...


def complete_job(completer: Completes, job: PreparedJob, *, decoding: DecodingSettings | None = None,
                 k: int | None = None, k_max: int | None = None,
                 on_text: Callable[[str], None] | None = None, cancelled: Callable[[], bool] | None = None,
                 on_round: Callable[[RoundRecord], None] | None = None) -> GenerationResult:
    """Run ``job`` on ``completer`` with the draft depth ``k`` (growing up to ``k_max``): the result's text
    is what an editor shows (:func:`~codecue.engine.postprocess.tidy_completion`), its tokens as decoded."""
    options = job.options
    result = completer.complete(job.prefix, job.suffix, extra_context=job.extra_context, path=job.path,
                                decoding=decoding, max_tokens=options.max_tokens, k=k, k_max=k_max,
                                temperature=options.temperature, top_p=options.top_p, seed=options.seed,
                                stop_rule=job.stop_rule, on_text=on_text, cancelled=cancelled, on_round=on_round)
    shown = tidy_completion(result.text, job.prefix, job.suffix, result.stop_reason)
    return replace(result, text=shown) if shown != result.text else result


def warm_job(completer: Completes, job: PreparedJob, *, decoding: DecodingSettings | None = None,
             cancelled: Callable[[], bool] | None = None, interrupted: Callable[[], bool] | None = None,
             within_ms: float | None = None, fresh: bool = False, with_draft: bool = True) -> int:
    """Evaluate ``job``'s prompt into the caches (``Completer.warm_context``; ``with_draft`` False: the
    target's only): the tokens evaluated."""
    return completer.warm_context(job.prefix, job.suffix, job.extra_context, path=job.path, cancelled=cancelled,
                                  interrupted=interrupted, decoding=decoding, within_ms=within_ms, fresh=fresh,
                                  with_draft=with_draft)
