"""The completer: tokenizer + target + optional draft, the FIM prompt, and the speculative loop.

This is what the CLI, the benchmark and the language server all drive. It keeps both models' KV caches
between requests, so the next request reuses the longest common token prefix, and where the backend can
shift positions, the cached chunks that reappear after it (``DecodingSettings.chunk_reuse``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from codecue.backends import CachedSequence
from codecue.backends.base import Backend, GPUOutOfMemory, Interrupted
from codecue.engine.code_vocab import code_token_ids
from codecue.engine.fim import (
    FIM_MIDDLE,
    FIM_SUFFIX,
    PromptBudget,
    choose_prompt,
    fim_text,
    prompt_budget,
)
from codecue.engine.proposers import (
    DraftModelProposer,
    HybridProposer,
    NgramProposer,
    Proposer,
)
from codecue.engine.results import GenerationResult
from codecue.engine.rounds import RoundRecord
from codecue.engine.sampling import Sampling
from codecue.engine.speculative import GenerationParams, generate
from codecue.engine.stops import StopRule, predicate_for
from codecue.errors import CodeCueError, ModelError
from codecue.loading.load import LoadedModels, LoadSpec, load_backends, load_models
from codecue.models.config import DRAFT_MODES, MODEL_DRAFT_MODES, CompletionConfig, DecodingSettings
from codecue.request import PreparedJob
from codecue.tuning.machine_costs import MachineCosts
from codecue.tuning.policy import KPolicy

log = logging.getLogger(__name__)

# Prompt tokens the draft model may read beyond the target's before a generation: about as long as a
# couple of target steps on a CPU (docs/experiments.md, drafting), which the first text can afford.
DRAFT_CATCH_UP = 64

# The windows last sent, of this many sizes, stay candidates for a place's prompt: the cache holds the
# last one, and the one before covers a warm-up that sent another in between.
HELD_WINDOWS = 2

# The middles last sent, of this many starts per document, stay candidates for a prompt's middle: the cache
# holds the last one, and the one before covers a warm-up's full prompt sent in between.
HELD_MIDDLES = 3
MIDDLES_DOCUMENTS = 8  # the documents whose middles are held (a prompt's cache is one document's)

# Tokens per evaluation of a warm-up and of a refresh (Completer.warm): a keystroke waits for the one under
# way. Fewer would cost more per token, and calls of under kv_cache.MIN_CALL tokens compute by other
# kernels: a refreshed cache would not be a fresh evaluation's to the last bit.
WARM_STEP = 16
# ... on a backend whose calls stop part-way (can_interrupt), where a keystroke waits for none: calls of
# this many tokens run the batch kernels at their full speed (16-token calls are slower per token on
# some CPUs' kernels: llama.cpp's AVX2 ones), and a stopped call loses no more than its own work.
INTERRUPTIBLE_STEP = 64


def special_token_ids(tokenizer) -> list[int]:
    """Tokens that end a completion: EOS and every special token (a completion never contains them)."""
    ids = set(tokenizer.all_special_ids)
    for name in ("<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
                 "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"):
        tid = tokenizer.convert_tokens_to_ids(name)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid is not None:
            ids.add(tid)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return sorted(i for i in ids if i is not None)


def cursor_marks(tokenizer) -> frozenset[int]:
    """The FIM tokens a prompt puts at the cursor (``<|fim_suffix|>``, ``<|fim_middle|>``), which the cache
    does not shift a run across right after a change (:data:`~codecue.backends.kv_cache.MARK_CONTEXT`)."""
    ids = (tokenizer.convert_tokens_to_ids(name) for name in (FIM_SUFFIX, FIM_MIDDLE))
    return frozenset(tid for tid in ids if isinstance(tid, int) and tid != tokenizer.unk_token_id)


class Completer:
    """Holds the models and their caches; one completion at a time (``lock``)."""

    def __init__(self, tokenizer, target: Backend, draft: Backend | None, decoding: DecodingSettings | None = None,
                 names: tuple[str, str | None] = ("target", "draft"), *, target_only: bool = False) -> None:
        """``decoding``: what a request decodes with unless it brings its own settings; ``target_only``: every
        request decodes with the target alone (the runtime plan chose a target-only configuration)."""
        self.target_only = target_only
        self.decoding = self._within_load(decoding or DecodingSettings())
        self.tokenizer = tokenizer
        if draft is not None and draft.vocab_size != target.vocab_size:
            raise ModelError(
                f"draft {names[1]} has a vocabulary of {draft.vocab_size} tokens but target {names[0]} has "
                f"{target.vocab_size}",
                "use a draft from the same model family (same tokenizer), or run with --draft-mode ngram",
            )
        if len(tokenizer) > target.vocab_size:
            raise ModelError(f"tokenizer has {len(tokenizer)} tokens, more than target {names[0]}'s "
                             f"{target.vocab_size}", "the tokenizer does not belong to this model")
        marks = cursor_marks(tokenizer)
        self.target = CachedSequence(target, min_chunk=self.decoding.chunk_reuse, marks=marks)
        self.draft = (CachedSequence(draft, min_chunk=self.decoding.chunk_reuse, marks=marks)
                      if draft is not None else None)
        self.eos_ids = special_token_ids(tokenizer)
        self.draft_vocab_map = None
        # A load-time setting: the draft's head is restricted once, here (DecodingSettings).
        if draft is not None and self.decoding.draft_vocab == "code" and draft.can_restrict_vocab:
            self.draft_vocab_map = code_token_ids(tokenizer, self.eos_ids)
            draft.restrict_vocab(self.draft_vocab_map)
        self.lock = threading.Lock()
        self.names = names
        self.prefill_ms_per_token: float | None = None  # seen on this machine's prompts (build_prompt)
        self._windows: list[int] = []  # the sizes of the windows sent last (build_prompt)
        self._middles: dict[str | None, list[int]] = {}  # per document, the middles' starts sent last

    def _within_load(self, decoding: DecodingSettings) -> DecodingSettings:
        """``decoding``, checked, within what was loaded: no drafting where the plan chose target-only."""
        decoding.validate()
        if self.target_only and decoding.draft_mode != "none":
            return replace(decoding, draft_mode="none", k=0)
        return decoding

    def _settings(self, decoding: DecodingSettings | None) -> DecodingSettings:
        """A request's settings: its own (within what was loaded), else the completer's. Their chunk reuse
        applies to both caches from here on (a setting of how the caches sync, not of what is cached)."""
        settings = self.decoding if decoding is None else self._within_load(decoding)
        for seq in (self.target, self.draft):
            if seq is not None:
                seq.min_chunk = settings.chunk_reuse
        return settings

    @property
    def runtime(self) -> str:
        """Where the models run: the target's backend name, ``+`` the draft's when it differs
        (``torch+llamacpp`` = target on torch, draft on llama.cpp). Profiles keep costs per runtime."""
        name = self.target.backend.name
        if self.draft is not None and self.draft.backend.name != name:
            name = f"{name}+{self.draft.backend.name}"
        return name

    @classmethod
    def load(cls, config: CompletionConfig | None = None) -> Completer:
        """Load what ``config`` asks for (:func:`~codecue.loading.load.load_models`) and build the completer."""
        config = config or CompletionConfig()
        return cls.from_loaded(load_models(config), config.decoding)

    @classmethod
    def from_spec(cls, spec: LoadSpec, decoding: DecodingSettings) -> Completer:
        """Load exactly ``spec`` and decode with ``decoding`` by default."""
        return cls.from_loaded(load_backends(spec), decoding)

    @classmethod
    def from_loaded(cls, loaded: LoadedModels, decoding: DecodingSettings) -> Completer:
        """The completer of models loaded already, decoding with ``decoding`` by default."""
        return cls(loaded.tokenizer, loaded.target, loaded.draft, decoding, names=loaded.names,
                   target_only=loaded.spec.target_only)

    # -- prompts -------------------------------------------------------------------------------------
    def build_prompt(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (), *,
                     path: str | None = None, full: bool = False, budget: PromptBudget | None = None,
                     unmeasured_limit: int | None = None) -> list[int]:
        """The FIM prompt for this cursor within ``budget`` (None: the completer's): unless ``full``, within
        :meth:`fresh_token_limit` new tokens where the cache does not hold this place
        (:func:`~codecue.engine.fim.choose_prompt`); before a prefill speed was seen, within
        ``unmeasured_limit`` (None: the full prompt)."""
        budget = budget or self.budget
        limit = None if full else self.fresh_token_limit(budget)
        if limit is None and not full and budget.first_text_ms:
            limit = unmeasured_limit
        soon = None if limit is None else self.tokens_within(budget.first_text_ms)
        held_middles = self._middles.get(path, [])
        middles: dict[int, tuple[list[int], int | None]] = {}  # id of each prompt built: it, its middle's start

        def encode(text: str) -> list[int]:
            return self.tokenizer.encode(text, add_special_tokens=False)

        def build(within: PromptBudget) -> list[int]:
            fim = fim_text(self.tokenizer, prefix, suffix, within, extra_context, path=path)
            prompt, start = encode(fim.text), fim.middle_from
            # Where the middle would start anew (a block of lines, or the window's share, is full), the
            # suffix is evaluated again: the middle the cache holds goes on instead while that would take
            # longer than the first text may, and starts anew where it is cheap (a rest evaluates the full
            # prompt, with the new start, fresh).
            new = self.target.uncached(prompt)
            for held in held_middles if soon is not None and new > soon else ():
                if held == start:
                    continue
                other = fim_text(self.tokenizer, prefix, suffix, within, extra_context, path=path, middle_from=held)
                if other.middle_from == held:
                    candidate = encode(other.text)
                    if (cost := self.target.uncached(candidate)) < new:
                        prompt, start, new = candidate, held, cost
            middles[id(prompt)] = prompt, start
            return prompt

        prompt, window = choose_prompt(build, budget, self.target.uncached, limit, held=self._windows, soon=soon)
        if window is not None:  # most recently sent first
            self._windows = [window, *(size for size in self._windows if size != window)][:HELD_WINDOWS]
        if (start := middles[id(prompt)][1]) is not None:  # this document's most recent last
            held = [start, *(at for at in self._middles.pop(path, []) if at != start)][:HELD_MIDDLES]
            self._middles = {**dict(list(self._middles.items())[1 - MIDDLES_DOCUMENTS:]), path: held}
        return prompt

    def prompt_for(self, job: PreparedJob, decoding: DecodingSettings | None = None, *, full: bool = False) -> list[int]:
        """The prompt tokens a prepared job is decoded from under ``decoding`` (None: the completer's
        settings): what :func:`~codecue.request.complete_job` sends here (``full``: the full prompt, not
        the window a place the cache does not hold gets first)."""
        budget = prompt_budget(self._settings(decoding))
        return self.build_prompt(job.prefix, job.suffix, job.extra_context, path=job.path, full=full, budget=budget)

    def uncached(self, prompt: Sequence[int]) -> int:
        """How many tokens of ``prompt`` the target would evaluate (its KV cache holds the rest: the common
        prefix, and the chunks it would shift)."""
        return self.target.uncached(prompt)

    def fresh_token_limit(self, budget: PromptBudget | None = None) -> int | None:
        """Prompt tokens this machine evaluates within the ``first_text_ms`` of ``budget`` (None: the
        completer's), from the prefill speed seen on its own prompts; None before one was seen, or without
        a limit."""
        budget = budget or self.budget
        within = self.tokens_within(budget.first_text_ms) if budget.first_text_ms else None
        return None if within is None else max(budget.window_floor, within)

    def tokens_within(self, ms: float) -> int | None:
        """Prompt tokens this machine evaluates within ``ms``, from the prefill speed seen on its own prompts
        (None before one was seen)."""
        if self.prefill_ms_per_token is None:
            return None
        return int(ms / self.prefill_ms_per_token)

    def waits_for_window(self, budget: PromptBudget | None = None) -> bool:
        """Whether a place the cache does not hold gets a longer prompt than this machine evaluates within
        ``first_text_ms``: the window floor holds the first text back for a suggestion worth showing."""
        budget = budget or self.budget
        if not budget.first_text_ms or self.prefill_ms_per_token is None:
            return False
        return int(budget.first_text_ms / self.prefill_ms_per_token) < budget.window_floor

    def _note_prefill(self, tokens: int, ms: float, at_least: int = 64) -> None:
        """Follow the prefill speed (a moving average: machines drift) from a prefill of ``tokens`` that
        took ``ms``; fewer than ``at_least`` tokens time the fixed costs around it, not the prefill."""
        if tokens < at_least or ms <= 0:
            return
        sample = ms / tokens
        old = self.prefill_ms_per_token
        self.prefill_ms_per_token = sample if old is None else 0.5 * old + 0.5 * sample

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    # -- proposers -----------------------------------------------------------------------------------
    def make_proposer(self, mode: str, sampling: Sampling, extra_tokens: Sequence[Sequence[int]] = (),
                      min_confidence: float | None = None, short_depth: int | None = None) -> Proposer | None:
        """The proposer for ``mode``; a draft model stops drafting below ``min_confidence`` (None: the
        completer's setting). Lookup alone drafts by match length (:meth:`NgramProposer.by_match_length`,
        ``short_depth`` for the shorter matches); beside a draft model, short matches draft too."""
        if mode not in DRAFT_MODES:
            raise CodeCueError(f"unknown draft mode {mode!r}", f"choose one of {', '.join(DRAFT_MODES)}")
        if mode == "none":
            return None
        if mode == "ngram" or (mode == "hybrid" and self.draft is None):
            # hybrid without a draft model (none loaded, or dropped for lack of memory) is lookup alone
            return NgramProposer.by_match_length(short_depth if short_depth is not None else 0, extra_tokens)
        ngram = NgramProposer(extra=extra_tokens)
        if self.draft is None:
            raise CodeCueError("no draft model is loaded", "load one with --draft, or use --draft-mode ngram")
        if min_confidence is None:
            min_confidence = self.decoding.min_confidence
        model = DraftModelProposer(self.draft, sampling, min_confidence, self.draft_vocab_map)
        return model if mode == "model" else HybridProposer(ngram, model)

    # -- generation ----------------------------------------------------------------------------------
    def draft_lags(self, prompt: Sequence[int]) -> bool:
        """Whether the draft model would read more than :data:`DRAFT_CATCH_UP` tokens of ``prompt`` beyond
        what the target reads: its cache missed a warm-up that the target's got (one cancelled between
        the two). Reading them would hold back the first text, so that generation drafts by n-gram only;
        the next warm-up catches the draft up."""
        if self.draft is None:
            return False
        return self.draft.uncached(prompt) > self.uncached(prompt) + DRAFT_CATCH_UP

    def generate_ids(
        self,
        prompt: Sequence[int],
        *,
        max_tokens: int = 64,
        k: int | None = None,
        draft_mode: str | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_strings: Sequence[str] = (),
        stop_predicate: Callable[[str], int | None] | None = None,
        stop_rule: StopRule | None = None,
        on_text: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        extra_tokens: Sequence[Sequence[int]] = (),
        k_max: int | None = None,
        decoding: DecodingSettings | None = None,
    ) -> GenerationResult:
        """``k``: the first round's draft depth (None: the settings' fixed K, else 0; the depth of a request
        is the K authority's to decide, :meth:`k_authority`); it grows within the generation while drafts
        are accepted, up to ``k_max`` (None: ``k``, a fixed depth). ``decoding``: this request's settings
        (None: the completer's); ``k`` and ``draft_mode`` given here take precedence over them.
        ``stop_rule`` (what the server and ``codecue complete`` pass, in this process or the model process)
        becomes the stop predicate here; a ``stop_predicate`` given too cuts where it cuts first."""
        stop_predicate = predicate_for(stop_rule, stop_predicate)
        settings = self._settings(decoding)
        k = (settings.k or 0) if k is None else k
        k_max = k if k_max is None else k_max
        mode = draft_mode or settings.draft_mode
        if mode in MODEL_DRAFT_MODES and k > 0 and self.draft_lags(prompt):
            mode = "ngram"
        short_depth = None
        if mode == "ngram" or (mode == "hybrid" and self.draft is None):
            # Lookup alone drafts by match length (make_proposer): ``k`` for the shorter matches, and up to
            # the ceiling for long ones, so the loop runs at the ceiling.
            short_depth, k = k, max(k, k_max)
        if k == 0:
            mode = "none"
        if temperature > 0 and seed is None:
            import torch

            seed = torch.seed()  # one seed for the verification and the draft streams
        sampling = Sampling(temperature, top_p, seed)
        params = GenerationParams(max_new_tokens=max_tokens, k=k, sampling=sampling, stop_strings=tuple(stop_strings),
                                  k_max=k_max)
        with self.lock:
            proposer = self.make_proposer(mode, sampling, extra_tokens, settings.min_confidence, short_depth)
            run = lambda proposer: generate(  # noqa: E731
                self.target, proposer, prompt, params, decode=self.decode, eos_ids=self.eos_ids, on_text=on_text,
                stop_predicate=stop_predicate, cancelled=cancelled, on_round=on_round)
            try:
                result = run(proposer)
                result.stats.runtime = self.runtime
                # TTFT is the prefill and one decode step; the later steps' mean stands for that step.
                self._note_prefill(result.stats.prefilled_tokens, result.stats.ttft_ms - result.stats.tpot_ms)
                return result
            except GPUOutOfMemory as exc:
                # Out of memory in the draft: drop the draft for good and answer without it.
                if self.draft is None or exc.backend is None or exc.backend is not self.draft.backend:
                    raise
                log.warning("the draft model ran out of GPU memory; continuing without it (%s)", exc)
                self.draft.backend.close()
                self.draft = None
                result = run(self.make_proposer("ngram" if mode != "none" else "none", sampling, extra_tokens,
                                                short_depth=params.k))
                result.stats.runtime = self.runtime
                return result

    def complete(self, prefix: str, suffix: str = "", *, extra_context: Sequence[tuple[str, str]] = (),
                 path: str | None = None, decoding: DecodingSettings | None = None,
                 **kwargs: Any) -> GenerationResult:
        """Complete at the cursor between ``prefix`` and ``suffix`` with ``decoding`` (None: the
        completer's settings); ``kwargs`` as :meth:`generate_ids`."""
        settings = self._settings(decoding)  # before the prompt: what is uncached depends on the chunk reuse
        budget = prompt_budget(settings)
        prompt = self.build_prompt(prefix, suffix, extra_context, path=path, budget=budget)
        # The floor raised the window where the time budget alone would have allowed less than the floor
        # and the prompt sent is still shorter than the full one (a place the cache does not hold).
        waited = (self.waits_for_window(budget)
                  and prompt != self.build_prompt(prefix, suffix, extra_context, path=path, budget=budget, full=True))
        result = self.generate_ids(prompt, decoding=settings, **kwargs)
        result.stats.waited_for_window = waited
        return result

    @property
    def budget(self) -> PromptBudget:
        """The prompt budget of the completer's own decoding settings."""
        return prompt_budget(self.decoding)

    def close(self) -> None:
        """Free both models now (a backend that holds native memory frees it in ``close``)."""
        for seq in (self.target, self.draft):
            if seq is None:
                continue
            try:
                seq.backend.close()
            except Exception:  # noqa: BLE001 - unloading must not fail
                log.exception("closing a backend failed")

    def measure_costs(self, should_stop: Callable[[], bool] | None = None) -> MachineCosts:
        """Time this pair on this machine (seconds); see :mod:`codecue.tuning.machine_costs`."""
        from codecue.tuning.machine_costs import measure_machine_costs, probe_text

        return measure_machine_costs(self, probe_text(), should_stop=should_stop)

    def k_authority(self, profile_path: str | None = None) -> KPolicy:
        """The K authority for what this completer serves: its runtime and model files, with the costs
        this machine measured for them (K = 0 until there are some)."""
        return KPolicy.for_served(self.runtime, *self.names, draft_model=self.draft is not None,
                                  profile_path=profile_path)

    def warm(self, prompt: Sequence[int], cancelled: Callable[[], bool] | None = None, step: int | None = None, *,
             fresh: bool = False, with_draft: bool = True, interrupted: Callable[[], bool] | None = None) -> int:
        """Evaluate ``prompt`` into the target's KV cache ahead of a request (and with ``fresh`` refresh it),
        then into the draft's (which reads it too before drafting; a generation whose draft lags drafts by
        n-gram, :meth:`draft_lags`), ``step`` tokens at a time (None: :data:`WARM_STEP`, or
        :data:`INTERRUPTIBLE_STEP` on a backend whose calls stop part-way), checking ``cancelled`` between
        steps, and within them where the backend can stop a call (there ``interrupted`` where given: a
        request that needs what the call evaluates lets it finish): a real request waits for one step at
        most, or for none. Returns how many tokens the target evaluated (what its cache did not hold
        already, or with ``fresh`` did not hold as a fresh evaluation does). A warm-up cancelled between the chunks it shifts keeps what it evaluated, and the chunks
        it did not reach right after it (:meth:`CachedSequence.prefill`).

        ``fresh``: so that a request here decodes what a fresh evaluation of its prompt gives (the target's
        cache first, then the draft's, whose guesses make the target's rounds). Where the backend saves
        caches, the prompt is evaluated as into an empty cache, what the cache held saved aside
        (:meth:`CachedSequence.prefill` with ``exact``: to the last bit; a request during it loads the saved
        cache back); elsewhere what the cache kept by shifting is evaluated again
        (:meth:`CachedSequence.refresh`; cancelled part-way, the cache keeps the old entries of what was not
        reached, and what it evaluates is not in the count returned). The prompt's last token is left to
        the request, which evaluates it alone for its logits (:data:`~codecue.backends.kv_cache.LAST_ALONE_FROM`).

        ``with_draft`` False: the target's cache only (where no request drafts, the K authority's ceiling
        0, the draft's cache is never read)."""
        def stopped() -> bool:
            return cancelled is not None and cancelled()

        def stopped_within_call() -> bool:
            return interrupted() if interrupted is not None else stopped()

        def interruptible(seq: CachedSequence) -> bool:
            return cancelled is not None and getattr(seq.backend, "can_interrupt", False)

        def steps_for(seq: CachedSequence) -> int:
            if step is not None:
                return step
            return INTERRUPTIBLE_STEP if interruptible(seq) else WARM_STEP

        def stages_for(seq: CachedSequence) -> list[tuple[CachedSequence, str]]:
            if not fresh:
                return [(seq, "prefill")]
            # Where the backend saves caches, evaluated from an empty one (what it held saved aside): to the
            # last bit; elsewhere shifted and then evaluated again past the shifted chunks.
            return [(seq, "exact")] if seq.saves else [(seq, "prefill"), (seq, "refresh")]

        fed = 0
        prompt = prompt[:-1]
        with self.lock:
            # The target's first: a request that stops the draft's part decodes the fresh answer.
            stages = stages_for(self.target)
            if self.draft is not None and with_draft:  # it only makes decoding faster; a lagging one is skipped
                # Fresh too: its guesses make the target's rounds, as a fresh evaluation's to the last bit.
                stages += stages_for(self.draft)
            for number, (seq, stage) in enumerate(stages):
                size = steps_for(seq)
                steps = seq.refresh(size) if stage == "refresh" else seq.prefill(prompt, size, exact=stage == "exact")
                try:
                    with seq.backend.interruptible(stopped_within_call) if interruptible(seq) else nullcontext():
                        while not stopped():
                            started = time.perf_counter()
                            evaluated = next(steps, None)
                            if evaluated is None:
                                break
                            if number == 0:
                                fed += evaluated
                                # A bare evaluation, nothing else timed: a step's tokens measure the prefill.
                                self._note_prefill(evaluated, (time.perf_counter() - started) * 1e3, at_least=size)
                        else:
                            return fed
                except Interrupted:
                    return fed
                finally:
                    steps.close()
        return fed

    def warm_context(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (), *,
                     path: str | None = None, cancelled: Callable[[], bool] | None = None,
                     decoding: DecodingSettings | None = None, within_ms: float | None = None,
                     fresh: bool = False, with_draft: bool = True,
                     interrupted: Callable[[], bool] | None = None) -> int:
        """:meth:`warm` for the full prompt of this cursor position under ``decoding`` (None: the
        completer's settings). With ``within_ms``, the full prompt only where this machine evaluates what
        its cache lacks of it within that long (its speed seen already); elsewhere the prompt a request there sends first (the
        window around the cursor, :meth:`build_prompt`), so that the pause after a jump readies the first
        suggestion instead of a part of a prompt no request uses. ``fresh``, ``with_draft``,
        ``interrupted``: as in :meth:`warm`."""
        budget = prompt_budget(self._settings(decoding))
        prompt = self.build_prompt(prefix, suffix, extra_context, path=path, full=True, budget=budget)
        speed = self.prefill_ms_per_token
        if within_ms is not None and (speed is None or self.uncached(prompt) * speed > within_ms):
            # Before the speed is known (the first warm-up after a load), the window at its floor: the
            # request that follows measures the speed from this warm-up's steps and sends that window,
            # where a part of the full prompt would be work it does not use.
            prompt = self.build_prompt(prefix, suffix, extra_context, path=path, budget=budget,
                                       unmeasured_limit=budget.window_floor)
        return self.warm(prompt, cancelled, fresh=fresh, with_draft=with_draft, interrupted=interrupted)

    def reset_caches(self) -> None:
        with self.lock:
            self.target.reset()
            if self.draft is not None:
                self.draft.reset()

