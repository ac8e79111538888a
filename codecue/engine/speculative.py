"""The speculative decoding loop.

The target's cache always holds the committed context except its last token (the *pending* token).
Each round the proposer drafts up to K tokens, and the target scores ``[pending] + draft`` in one
forward pass (``CachedSequence.sync`` feeds exactly what is not cached yet). The accepted prefix plus the
target's own next token are committed; rejected draft positions are rolled back by the next sync, which
keeps only the longest common prefix. Rollback is just a length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codecue.backends.kv_cache import CachedSequence
from codecue.engine.acceptance import greedy_accept, logits_to_probs, one_hot_q, rejection_sample
from codecue.engine.proposers import Draft, Proposer
from codecue.engine.results import GenerationResult, GenerationStats
from codecue.engine.rounds import DraftSource, RoundRecord
from codecue.engine.sampling import RandomStream, Sampling
from codecue.engine.streaming import TextStream

StopPredicate = Callable[[str], "int | None"]


@dataclass
class GenerationParams:
    max_new_tokens: int = 64
    k: int = 4  # draft depth (the first round's); 0 = target only
    sampling: Sampling = Sampling()  # greedy by default
    stop_strings: tuple[str, ...] = ()
    k_max: int | None = None  # deepest draft the depth grows to (the proposer's DepthSchedule); None: always k


def generate(
    target: CachedSequence,
    proposer: Proposer | None,
    prompt: Sequence[int],
    params: GenerationParams,
    *,
    decode: Callable[[list[int]], str],
    eos_ids: Sequence[int] = (),
    on_text: Callable[[str], None] | None = None,
    stop_predicate: StopPredicate | None = None,
    cancelled: Callable[[], bool] | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> GenerationResult:
    """Generate up to ``params.max_new_tokens`` tokens after ``prompt``.

    ``on_text(text_so_far)`` is called as verified text becomes stable; every call's text is a prefix of
    the final text. ``stop_predicate(text) -> cut index | None`` ends generation (the LSP layer uses it for
    syntax-aware stops). ``cancelled()`` is checked between rounds. ``on_round(record)`` reports each
    drafted round (:class:`RoundRecord`) to an online K policy or a tuner.
    """
    if not prompt:
        raise ValueError("the prompt is empty")
    t_start = time.perf_counter()
    drafting = proposer is not None and params.k > 0
    stats = GenerationStats(prompt_tokens=len(prompt), speculative=drafting, k=params.k if drafting else 0)
    generator = params.sampling.generator(RandomStream.VERIFY)
    eos = set(eos_ids)
    context = list(prompt)
    generated: list[int] = []
    stream = TextStream(decode, params.stop_strings)
    stop_reason = "max_tokens"
    t_first: float | None = None
    fed_before, shifted_before = target.fed_tokens, target.shifted_tokens
    if drafting:
        proposer.start(params.k, params.k_max)

    while len(generated) < params.max_new_tokens:
        if cancelled is not None and cancelled():
            stop_reason = "cancelled"
            break
        remaining = params.max_new_tokens - len(generated)
        # The first token comes from the prompt's own evaluation, never with a draft: the prompt is then fed
        # by the same calls whether and however deep we speculate (feeding prompt and draft together would
        # make its chunks, and so its rounding, depend on the draft's length), as llama.cpp's generator does.
        k = proposer.next_k(remaining) if drafting and stats.rounds > 0 else 0
        if drafting and stats.rounds == 0:
            proposer.prepare(context)  # the draft reads the prompt now, within the time to first token
        draft = proposer.propose(context, k) if k > 0 else Draft()
        logits = target.sync(context + draft.tokens, n_logits=len(draft.tokens) + 1)
        if stats.rounds == 0:
            stats.prefilled_tokens = target.fed_tokens - fed_before - len(draft.tokens)
            stats.shifted_tokens = target.shifted_tokens - shifted_before
        n_accepted, next_token = accept(draft, logits, params.sampling, generator)

        stats.record_round(len(draft.tokens), n_accepted, ngram=draft.source == DraftSource.NGRAM)
        if proposer is not None:
            proposer.verified(context, len(draft.tokens), n_accepted)
        if on_round is not None and draft.tokens:
            on_round(RoundRecord(len(draft.tokens), n_accepted, k, draft.source))

        hit_eos = commit([*draft.tokens[:n_accepted], next_token][:remaining], eos, generated, context)
        if t_first is None and generated:
            t_first = time.perf_counter()
        cut = stream.update(generated)
        if cut is None and stop_predicate is not None:
            cut = stop_predicate(stream.text)
        if cut is not None:
            stream.cut(cut)
            stop_reason = "stop"
        stream.emit(on_text, final=cut is not None or hit_eos)
        if cut is not None:
            break
        if hit_eos:
            stop_reason = "eos"
            break

    t_end = time.perf_counter()
    text = stream.finish(on_text)
    stats.record_times(t_start, t_first, t_end, len(generated), ended_by_eos=stop_reason == "eos")
    return GenerationResult(tokens=generated, text=text, stop_reason=stop_reason, stats=stats)


def accept(draft: Draft, logits, sampling: Sampling, generator) -> tuple[int, int]:
    """How many of the draft's tokens the target keeps, and the target's own next token: the greedy rule, or
    rejection sampling with p (the target's distribution) and q (the draft's; one-hot for a lookup draft)."""
    if sampling.greedy:
        return greedy_accept(draft.tokens, logits)
    import torch

    draft_tokens = torch.tensor(draft.tokens, dtype=torch.long)
    p = logits_to_probs(logits, sampling.temperature, sampling.top_p)
    q = draft.q if draft.q is not None else one_hot_q(draft_tokens, p.shape[-1])
    if q.shape[-1] != p.shape[-1]:  # a draft head narrower than the target's: pad with zero mass
        q = torch.nn.functional.pad(q, (0, p.shape[-1] - q.shape[-1]))
    return rejection_sample(draft_tokens, q, p, generator)


def commit(tokens: Sequence[int], eos: set[int], generated: list[int], context: list[int]) -> bool:
    """Append the round's kept tokens to the output and the context, up to an end-of-generation token;
    whether one came."""
    for token in tokens:
        if token in eos:
            return True
        generated.append(token)
        context.append(token)
    return False
