"""Drafting by lookup alone (no draft model): the depth follows the length of the match, and the output is
still token for token what the target alone writes."""

from __future__ import annotations

import pytest

from codecue.engine.proposers import NgramProposer
from codecue.engine.rounds import DraftSource

REPEAT = list(range(100, 140))  # a 40-token stretch that occurs twice: the second time is predictable


def context_with_match(length: int) -> list[int]:
    """A context whose last ``length`` tokens (and no more) occurred before, followed by REPEAT's rest."""
    return [*REPEAT, 7, 8, 9, *range(500, 520), 1, *REPEAT[:length]]


@pytest.mark.parametrize(("match", "short_depth", "k", "expected"), [
    (20, 3, 12, 12),  # a long match drafts as deep as asked
    (12, 3, 12, 12),
    (10, 3, 12, 3),  # a shorter one: at most the class's depth
    (8, 3, 12, 3),
    (10, 0, 12, 0),  # the class is off: only long matches draft
    (16, 0, 12, 12),
    (7, 3, 12, 0),  # under 8 tokens: no draft
])
def test_depth_follows_the_match_length(match, short_depth, k, expected):
    proposer = NgramProposer.by_match_length(short_depth)
    draft = proposer.propose(context_with_match(match), k)
    assert len(draft.tokens) == expected
    if expected:
        assert draft.tokens == REPEAT[match:match + expected] and draft.source == DraftSource.NGRAM


def test_a_short_match_in_another_document_counts_the_same():
    proposer = NgramProposer.by_match_length(2, extra=[[*REPEAT, 1, 2]])
    context = [3, 4, *REPEAT[:9]]
    assert proposer.propose(context, 12).tokens == REPEAT[9:11]


def test_lookup_alone_is_lossless_and_drafts_on_repeats(make_completer):
    """A target without a draft model, decoding with lookup alone at the ceiling: the same tokens as
    target-only greedy decoding, with drafts where the prompt repeats itself."""
    completer = make_completer(draft=None, draft_mode="ngram")
    text = "def f(x):\n    return x + 1\n\n" * 12
    prompt = completer.build_prompt(text, "")
    plain = completer.generate_ids(prompt, max_tokens=40, k=0)
    for start in (0, 2):
        completer.reset_caches()
        looked_up = completer.generate_ids(prompt, max_tokens=40, k=start, k_max=12, draft_mode="ngram")
        assert looked_up.tokens == plain.tokens
        assert looked_up.stats.speculative and looked_up.stats.k == 12
