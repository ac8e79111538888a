"""The remote completer: CodeCue's prompt, stops and streaming in front of a shared inference server.

It stands where :class:`~codecue.completion.Completer` stands (the language server's worker, ``codecue
complete`` and ``codecue bench`` drive either), so everything above the completer works unchanged:
streaming partial text, syntax-aware stops, type-through, cancellation, stats. It is not a KV
:class:`~codecue.backends.base.Backend`: a server gives text, not logits, so CodeCue's speculative loop
cannot run on it. Speculation is the server's business (vLLM, SGLang and llama-server run it
themselves); none of them takes a per-request draft depth, so CodeCue's K policy does not apply here.

The FIM prompt is rendered here with the same builder as local runs (the server's ``suffix`` field is not
honoured everywhere). Text arrives as events and goes through the same :class:`TextStream` as local
tokens, so what is streamed never takes anything back. ``cancelled()`` is polled once per token, as the
local engine polls once per round, and a cancelled or cut-off completion closes its stream at once.

With ``fallback = "local"``, a remote failure is answered by the local models (loaded on the first
failure) for ``retry_after`` seconds, and the result carries a notice that the server shows once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from codecue.backends.remote import RemoteClient, RemoteError, RemoteSettings
from codecue.engine.fim import (
    FILE_SEP,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    PromptBudget,
    build_fim_text,
    prompt_budget,
)
from codecue.engine.results import GenerationResult, GenerationStats
from codecue.engine.stops import StopRule, predicate_for
from codecue.engine.streaming import TextStream
from codecue.errors import CodeCueError
from codecue.models.config import DecodingSettings

log = logging.getLogger(__name__)

# The server stops at its model's end-of-text token; a FIM marker in the output means the model went on
# into another file or hole, and a server that prints special tokens as text is stopped by these.
FIM_STOPS = ("<|endoftext|>", FILE_SEP, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, "<|fim_pad|>", "<|repo_name|>")

LocalFactory = Callable[[], Any]  # -> a local Completer


def request_body(settings: RemoteSettings, prompt: str, *, max_tokens: int, temperature: float, top_p: float = 1.0,
                 seed: int | None = None, stop: Sequence[str] = (), stream: bool = True) -> dict[str, Any]:
    """The ``/v1/completions`` request: the FIM prompt as it is, greedy at temperature 0."""
    body: dict[str, Any] = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                            "stop": list(dict.fromkeys([*FIM_STOPS, *stop])), "stream": stream}
    if temperature > 0 and top_p < 1.0:
        body["top_p"] = top_p
    if seed is not None:
        body["seed"] = seed
    if settings.model:
        body["model"] = settings.model
    return body


class RemoteCompleter:
    """Completions from a remote server, with an optional local fallback. One completion at a time (the
    worker's thread), like the local completer."""

    runtime = "remote"
    target = None  # no local caches: the worker's unload closes nothing here but the client
    draft = None

    def __init__(self, settings: RemoteSettings, tokenizer: Any, budget: PromptBudget | None = None,
                 local_factory: LocalFactory | None = None, client: RemoteClient | None = None) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        # No drafting here: the server speculates on its own. The budget fits the prompt the server gets.
        self.decoding = DecodingSettings(draft_mode="none", k=0, budget=budget or PromptBudget())
        self.client = client or RemoteClient(settings)
        self.local_factory = local_factory if settings.fallback == "local" else None
        self._local: Any = None
        self._local_until = 0.0  # monotonic time until which requests go to the local models
        self.last_prompt: str | None = None

    @classmethod
    def load(cls, url: str | None = None, *, tokenizer_model: str | None = None,
             budget: PromptBudget | None = None, local_factory: LocalFactory | None = None) -> RemoteCompleter:
        """Settings from ``[remote]`` (``url`` overrides), and the tokenizer of ``[remote] tokenizer``, else
        of ``tokenizer_model`` (the local target), to fit the prompt into its token budget."""
        from codecue.models.resolve import resolve_model
        from codecue.models.tokenizer import load_tokenizer

        settings = RemoteSettings.load(url)
        try:
            source = resolve_model(settings.tokenizer or tokenizer_model, "target")
        except CodeCueError as exc:
            raise RemoteError(f"the remote backend needs the model's tokenizer to fit the prompt: {exc}",
                              "set [remote] tokenizer to a GGUF file or HF directory of the server's model "
                              "family, or pull the default target (`codecue models pull`)") from None
        return cls(settings, load_tokenizer(source), budget, local_factory)

    # -- prompts -------------------------------------------------------------------------------------
    def build_prompt_text(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (),
                          path: str | None = None, budget: PromptBudget | None = None) -> str:
        """The FIM prompt as text, within ``budget`` (None: the completer's)."""
        return build_fim_text(self.tokenizer, prefix, suffix, budget or self.budget, extra_context, path=path)

    # -- completion ----------------------------------------------------------------------------------
    def complete(self, prefix: str, suffix: str = "", *, extra_context: Sequence[tuple[str, str]] = (),
                 **kwargs: Any) -> GenerationResult:
        """As :meth:`Completer.complete`; K arguments, and the decoding settings other than the prompt
        budget, are used only by a local fallback."""
        if self.local_factory is not None and time.monotonic() < self._local_until:
            return self._local_completer().complete(prefix, suffix, extra_context=extra_context, **kwargs)
        decoding = kwargs.get("decoding")
        prompt = self.build_prompt_text(prefix, suffix, extra_context, path=kwargs.get("path"),
                                        budget=prompt_budget(decoding) if decoding is not None else None)
        on_text = kwargs.get("on_text")
        shown = {"text": ""}

        def remember(text: str) -> None:
            shown["text"] = text
            if on_text is not None:
                on_text(text)

        try:
            return self.generate_text(prompt, **{**kwargs, "on_text": remember})
        except RemoteError as exc:
            if self.local_factory is None:
                raise
            log.warning("%s; using the local models for %g s", exc, self.settings.retry_after)
            self._local_until = time.monotonic() + self.settings.retry_after
            local = self._local_completer()
            # The editor may already show remote text: only pass on local text that extends it.
            already = shown["text"]
            local_kwargs = {**kwargs, "on_text": (lambda text: on_text(text) if text.startswith(already) else None)
                            if on_text is not None else None}
            result = local.complete(prefix, suffix, extra_context=extra_context, **local_kwargs)
            result.notice = (f"{exc}; answering with the local model (the remote is tried again in "
                             f"{self.settings.retry_after:g} s)")
            return result

    def _local_completer(self) -> Any:
        if self._local is None:
            assert self.local_factory is not None
            self._local = self.local_factory()
        return self._local

    def generate_text(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_strings: Sequence[str] = (),
        stop_predicate: Callable[[str], int | None] | None = None,
        stop_rule: StopRule | None = None,
        on_text: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        **_local_only: Any,  # k, draft_mode, on_round, decoding: the server speculates on its own
    ) -> GenerationResult:
        """Stream one completion of ``prompt`` (text) from the server."""
        stop_predicate = predicate_for(stop_rule, stop_predicate)
        self.last_prompt = prompt
        body = request_body(self.settings, prompt, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                            seed=seed, stop=stop_strings)
        stats = GenerationStats(prompt_tokens=len(self.tokenizer.encode(prompt, add_special_tokens=False)),
                                runtime=self.runtime)
        chunks: list[str] = []
        stream = TextStream("".join, stop_strings)
        stop_reason = "max_tokens"
        t_start = time.perf_counter()
        t_first: float | None = None
        response = self.client.stream_completion(body)
        try:
            events = response.events()
            while True:
                if cancelled is not None and cancelled():
                    stop_reason = "cancelled"
                    break
                event = next(events, None)
                if event is None:
                    break
                stats.rounds += 1
                if event.text:
                    chunks.append(event.text)
                    t_first = t_first or time.perf_counter()
                cut = stream.update(chunks)
                if cut is None and stop_predicate is not None:
                    cut = stop_predicate(stream.text)
                ended = event.finish_reason is not None or len(chunks) >= max_tokens
                if cut is not None:
                    stream.cut(cut)
                    stop_reason = "stop"
                elif event.finish_reason is not None:
                    stop_reason = "max_tokens" if event.finish_reason == "length" else "eos"
                stream.emit(on_text, final=cut is not None or ended)
                if cut is not None or len(chunks) >= max_tokens:
                    break
        finally:
            response.close()  # a no-op when the server finished: the connection is kept for the next one
        t_end = time.perf_counter()
        text = stream.finish(on_text)
        stats.record_times(t_start, t_first, t_end, len(chunks))
        stats.prefilled_tokens = stats.prompt_tokens  # the server's prefix cache is not visible from here
        # Token ids of the text in the local tokenizer: the server sends text, not ids.
        tokens = self.tokenizer.encode(text, add_special_tokens=False) if text else []
        return GenerationResult(tokens=tokens, text=text, stop_reason=stop_reason, stats=stats)

    @property
    def budget(self) -> PromptBudget:
        return prompt_budget(self.decoding)

    @property
    def names(self) -> tuple[str, str | None]:
        return (self.settings.url, None)

    def warm_context(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (), *,
                     path: str | None = None, cancelled: Any = None, decoding: Any = None,
                     within_ms: float | None = None, fresh: bool = False, with_draft: bool = True,
                     interrupted: Any = None) -> int:
        """Nothing to warm here: the server keeps its own prefix cache."""
        return 0

    def measure_costs(self, should_stop: Any = None) -> None:
        """Nothing to measure here: the server's costs are its own business (no K policy applies)."""
        return None

    def reset_caches(self) -> None:
        if self._local is not None:
            self._local.reset_caches()

    def close(self) -> None:
        self.client.close()
        if self._local is not None:
            self._local.close()
