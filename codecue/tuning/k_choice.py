"""The cost and replay maths K is chosen by: pure functions of costs and recorded rounds, no state.

The geometric model (Leviathan et al., 2023): each draft token is accepted with probability ``alpha``,
independently, until the first rejection. A round that drafts K tokens then yields on average

    E[tokens](K) = 1 + alpha + ... + alpha^K = (1 - alpha^(K+1)) / (1 - alpha)

tokens (the accepted drafts plus the target's own token) and costs ``K * draft_cost + verify_cost(K)``,
in units of one target forward step of one token. Target-only decoding (K = 0) yields 1 token per unit.
The best K has the most expected tokens per unit cost; when no K >= 1 beats 1, speculation is off (K = 0).

That model is only a fallback. Real acceptance is bursty (a run of boilerplate is accepted whole, a new
name is rejected at once) and the draft stops early by itself where it doubts, so the geometric model
undervalues deep drafting. Where rounds were recorded (:class:`RoundRecord`: drafted, accepted, the cap
asked for, who drafted), K is chosen by *replaying* them: each recorded round's output is re-made under
every candidate cap K (:func:`replay_round`), priced with the measured costs, and the K with the most
tokens per unit cost wins (:func:`best_k_replay`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from codecue.engine.rounds import DraftSource, RoundRecord

DEFAULT_K_MAX = 12
#: A speedup the replay predicts under 1 + MIN_GAIN is not worth loading and running a draft for: the draft
#: model's reading of every prompt and the noise of the measured costs are not in the replay.
MIN_GAIN = 0.05


@dataclass(frozen=True)
class CostModel:
    """Costs relative to one target forward step over one token (1.0).

    ``verify_costs[k]``, when measured, is the cost of one target pass over k+1 positions (k drafts plus the
    pending token); entry 0 is 1.0 by definition. Past the table's end, and without a table, the cost
    grows linearly by ``verify_per_token`` per drafted token.
    """

    draft_cost: float = 0.3
    verify_per_token: float = 0.05
    verify_costs: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.draft_cost) and self.draft_cost >= 0):
            raise ValueError(f"draft_cost must be a finite number >= 0, got {self.draft_cost}")
        if not (math.isfinite(self.verify_per_token) and self.verify_per_token >= 0):
            raise ValueError(f"verify_per_token must be a finite number >= 0, got {self.verify_per_token}")
        if any(not (math.isfinite(c) and c > 0) for c in self.verify_costs):
            raise ValueError(f"verify_costs must be finite and > 0, got {list(self.verify_costs)}")
        if self.verify_costs and abs(self.verify_costs[0] - 1.0) > 1e-9:
            raise ValueError("verify_costs[0] is one target step and must be 1.0 (costs are relative to it)")

    def verify_cost(self, k: int) -> float:
        """Cost of the target pass that verifies ``k`` drafted tokens."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        table = self.verify_costs
        if k < len(table):
            return table[k]
        if len(table) >= 2:
            slope = max(table[-1] - table[-2], 0.0)
            return table[-1] + slope * (k - len(table) + 1)
        if table:
            return table[-1] + self.verify_per_token * (k - len(table) + 1)
        return 1.0 + self.verify_per_token * k

    def round_cost(self, k: int) -> float:
        """Cost of one speculative round: ``k`` draft steps plus the verification pass."""
        return k * self.draft_cost + self.verify_cost(k)


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens a round yields with per-token acceptance ``alpha`` and ``k`` drafted tokens."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, costs: CostModel) -> float:
    """Expected tokens per unit cost relative to target-only decoding (which makes 1 token per unit)."""
    return expected_tokens(alpha, k) / costs.round_cost(k)


def best_k(alpha: float, costs: CostModel, k_max: int = DEFAULT_K_MAX) -> tuple[int, float]:
    """The K in 0..k_max with the highest expected speedup, and that speedup.

    K = 0 (speculation off) wins whenever no K >= 1 reaches a speedup of 1. Ties go to the smaller K.
    """
    best, best_speedup = 0, 1.0
    for k in range(1, k_max + 1):
        speedup = expected_speedup(alpha, k, costs)
        if speedup > best_speedup + 1e-12:
            best, best_speedup = k, speedup
    return best, best_speedup


def replay_round(record: RoundRecord, k: int, costs: CostModel) -> tuple[int, float]:
    """The tokens a recorded round made and what they would have cost drafted with a cap of ``k``.

    The round made ``accepted + 1`` tokens (the accepted drafts and the target's own). Under a smaller cap
    the same text takes several rounds: each drafts ``min(k, what the draft would still propose)``, keeps
    what the target agrees with plus the target's token, and pays its draft steps and one verification.
    The draft is assumed to stop where it stopped in the recording; past that point (a recording cut by
    its own cap) it is assumed to propose one more token that is rejected, which prices deeper caps
    conservatively. A model draft that stops before the cap has computed one doubted token more.
    """
    tokens = record.accepted + 1
    if k <= 0:
        return tokens, float(tokens)
    step = costs.draft_cost if record.source == DraftSource.MODEL else 0.0
    done, cost = 0, 0.0
    while done < tokens:
        left = record.drafted - done
        drafted = min(k, left) if left > 0 else 1
        kept = min(drafted, record.accepted - done)
        calls = drafted if drafted == k else drafted + 1
        cost += calls * step + costs.verify_cost(drafted)
        done += kept + 1
    return tokens, cost


WeightedRounds = Mapping[RoundRecord, float]


def replay_speedup(rounds: WeightedRounds, k: int, costs: CostModel, ngram_only: bool = False) -> float | None:
    """Tokens per unit cost at cap ``k`` over weighted recorded rounds, relative to target-only decoding
    (one token per unit); None without rounds.

    ``ngram_only``: drafting without a draft model. Only the n-gram rounds draft; a round the draft model
    drafted (where no n-gram matched) becomes plain decoding of the same tokens, one step each. (Rounds
    that drafted nothing are not recorded; the recorded mix of n-gram and model rounds says how often an
    n-gram matches.)"""
    tokens = cost = 0.0
    for record, weight in rounds.items():
        if ngram_only and record.source != DraftSource.NGRAM:
            t = c = float(record.accepted + 1)
        else:
            t, c = replay_round(record, k, costs)
        tokens += weight * t
        cost += weight * c
    return tokens / cost if cost > 0 else None


def best_k_replay(rounds: WeightedRounds, costs: CostModel, k_max: int = DEFAULT_K_MAX,
                  ngram_only: bool = False) -> tuple[int, float]:
    """The K in 0..k_max with the most replayed tokens per unit cost, and that speedup (K = 0 gives 1).
    Ties go to the smaller K."""
    best, best_speedup = 0, 1.0
    for k in range(1, k_max + 1):
        speedup = replay_speedup(rounds, k, costs, ngram_only)
        if speedup is not None and speedup > best_speedup + 1e-12:
            best, best_speedup = k, speedup
    return best, best_speedup


def worth_drafting(rounds: WeightedRounds, costs: CostModel, k_max: int = DEFAULT_K_MAX,
                   ngram_only: bool = False) -> tuple[int, float]:
    """:func:`best_k_replay`, but (0, 1.0) unless the best K gains more than :data:`MIN_GAIN`: whether
    drafting pays at all on these costs (the runtime plan and the K authority decide it alike)."""
    k, speedup = best_k_replay(rounds, costs, k_max, ngram_only)
    return (k, speedup) if speedup > 1.0 + MIN_GAIN else (0, 1.0)


def pooled_rounds(
    rounds_by_key: Mapping[tuple[str, str], Mapping[RoundRecord, float]],
    key: tuple[str, str],
    class_weight: float,
) -> dict[RoundRecord, float]:
    """The rounds of ``key`` = (language, class), each weighing 1, plus the same class's rounds in every
    language scaled to weigh ``class_weight`` rounds in all: a class seen a few times in one language
    borrows from the same class elsewhere; with many rounds of its own, its own dominate."""
    pooled: Counter[RoundRecord] = Counter(rounds_by_key.get(key, {}))
    if class_weight > 0:
        same_class: Counter[RoundRecord] = Counter()
        for (_, context_class), records in rounds_by_key.items():
            if context_class == key[1]:
                same_class.update(records)
        total = sum(same_class.values())
        for record, count in same_class.items():
            pooled[record] += class_weight * count / total
    return dict(pooled)


def choose_k(rounds: WeightedRounds, alpha: float | None, costs: CostModel,
             k_max: int = DEFAULT_K_MAX) -> tuple[int, float] | None:
    """The K to use and its expected speedup: by replaying ``rounds`` where there are any, else from the
    per-token acceptance ``alpha`` (the geometric model); None with neither."""
    if rounds:
        return best_k_replay(rounds, costs, k_max)
    if alpha is not None:
        return best_k(alpha, costs, k_max)
    return None


def merge_rounds(kept: Mapping[RoundRecord, int], new: Iterable[RoundRecord], limit: int) -> dict[RoundRecord, int]:
    """Recorded rounds plus new ones, as counts; over ``limit`` rounds in all, the older ones are scaled
    down to make room (a profile stays small, and what was seen lately counts)."""
    fresh = Counter(new)
    room = max(limit - sum(fresh.values()), 0)
    old_total = sum(kept.values())
    scale = min(1.0, room / old_total) if old_total else 0.0
    merged = Counter({record: round(count * scale) for record, count in kept.items()})
    merged.update(fresh)
    return {record: count for record, count in sorted(merged.items()) if count > 0}
