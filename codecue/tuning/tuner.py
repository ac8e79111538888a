"""The tuner: measure acceptance per (language, context class) and the cost ratios, build a profile.

Two halves, kept apart so that the maths is testable without models:

- *analysis*: :class:`Tally` counts rounds, and :func:`build_profile` turns tallies and a
  :class:`CostModel` into a :class:`Profile` (K = argmax expected speedup per class; 0 where nothing
  beats target-only decoding; the language default where too few rounds were seen).
- *measurement*: :func:`sample_positions` picks cursor positions in corpus files, spread over context
  classes; :func:`measure_acceptance` completes at each with a fixed probe K and tallies every round by
  the position's class; :func:`measure_costs` times draft steps and target passes over 1..K+1 tokens.
"""

from __future__ import annotations

import bisect
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codecue.engine.rounds import DraftSource, RoundJoiner, RoundRecord
from codecue.tuning.k_choice import (
    DEFAULT_K_MAX,
    CostModel,
    choose_k,
    expected_speedup,
    pooled_rounds,
    replay_speedup,
)
from codecue.tuning.profile import ClassProfile, Profile

if TYPE_CHECKING:
    from codecue.context.analysis import CursorContext


@dataclass
class Tally:
    """Verification rounds of one (language, context class)."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    rejections: int = 0  # rounds that ended with a rejected draft token
    records: Counter[RoundRecord] = field(default_factory=Counter)  # every round, for replay

    def add(self, record: RoundRecord) -> None:
        """Count one round (the engine's ``on_round`` callback)."""
        if record.drafted == 0:
            return
        self.rounds += 1
        self.drafted += record.drafted_tokens
        self.accepted += record.accepted_tokens
        self.rejections += 1 if record.accepted < record.drafted else 0
        self.records[record] += 1

    def add_round(
        self, drafted: int, accepted: int, k: int | None = None, source: DraftSource = DraftSource.MODEL
    ) -> None:
        """Count one round given by its numbers (RoundRecord validates them)."""
        self.add(RoundRecord(drafted, accepted, drafted if k is None else k, source))

    def merge(self, other: Tally) -> None:
        self.rounds += other.rounds
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.rejections += other.rejections
        self.records.update(other.records)

    @property
    def tested(self) -> int:
        """Draft tokens the target actually judged (those after a rejection never were)."""
        return self.accepted + self.rejections

    @property
    def acceptance(self) -> float | None:
        """Maximum-likelihood per-token acceptance under the geometric model."""
        return self.accepted / self.tested if self.tested else None


Tallies = dict[tuple[str, str], Tally]


def pooled_acceptance(
    tallies: Tallies, weight: float, also: Iterable[tuple[str, str]] = ()
) -> dict[tuple[str, str], tuple[float, int]]:
    """Per (language, class): acceptance shrunk toward the class's rate over all languages, which is
    itself shrunk toward the overall rate — ``(accepted + w * prior) / (tested + w)`` at both levels — and
    the rounds behind the class's rate. A class seen in a few rounds in one language borrows strength
    from the same class elsewhere instead of falling back to a guess; with plenty of its own rounds its
    own rate dominates. ``weight`` is how many tested tokens the prior counts as. Keys in ``also``
    (classes not seen in a language) get their class's rate, where the class was seen elsewhere."""
    total = Tally()
    by_class: dict[str, Tally] = {}
    for (_, context_class), tally in tallies.items():
        total.merge(tally)
        by_class.setdefault(context_class, Tally()).merge(tally)
    overall = total.acceptance if total.acceptance is not None else 0.5
    class_rate = {
        context_class: ((t.accepted + weight * overall) / (t.tested + weight) if t.tested + weight > 0 else overall)
        for context_class, t in by_class.items()
    }
    out = {}
    for (language, context_class), tally in tallies.items():
        prior = class_rate[context_class]
        denominator = tally.tested + weight
        alpha = (tally.accepted + weight * prior) / denominator if denominator > 0 else prior
        out[(language, context_class)] = (alpha, by_class[context_class].rounds)
    for key in also:
        if key not in out and key[1] in class_rate:
            out[key] = (class_rate[key[1]], by_class[key[1]].rounds)
    return out


def build_profile(
    tallies: Tallies,
    costs: CostModel,
    *,
    k_max: int = DEFAULT_K_MAX,
    min_rounds: int = 20,
    default_k: Callable[[str, str], int] | None = None,
    base: Profile | None = None,
    source: str = "codecue tune",
    models: dict[str, str] | None = None,
    pool_weight: float = 0.0,
) -> Profile:
    """A profile from measured tallies: per class, the K that maximises expected tokens per unit cost.

    Where the tallies recorded their rounds, K comes from replaying them under every cap
    (:func:`~codecue.tuning.k_choice.best_k_replay`); otherwise from the geometric acceptance model.
    Classes with fewer than ``min_rounds`` rounds keep ``base``'s entry (or ``default_k``, else none) but
    record what was seen. ``base`` entries for classes not measured are kept as they are. With
    ``pool_weight`` > 0, acceptance is :func:`pooled_acceptance` (the prior counting ``pool_weight`` tested
    tokens), the replayed rounds are pooled with the class's rounds in other languages counting
    ``pool_weight`` rounds (:func:`~codecue.tuning.k_choice.pooled_rounds`), and the rounds that count
    toward ``min_rounds`` are the class's over all languages.
    """
    profile = base.copy() if base is not None else Profile()
    profile.warnings = []
    profile.costs = costs
    profile.k_max = k_max
    profile.source = source
    profile.created = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if models is not None:
        profile.models = dict(models)
    for classes in profile.languages.values():  # kept entries must fit the new k_max
        for entry in classes.values():
            entry.k = min(entry.k, k_max)
    pooled: dict[tuple[str, str], tuple[float, int]] = {}
    if pool_weight > 0:
        measured_languages = {language for language, _ in tallies}
        unseen = [(language, context_class) for language in measured_languages
                  for context_class in profile.languages.get(language, {}) if (language, context_class) not in tallies]
        pooled = pooled_acceptance(tallies, pool_weight, unseen)
        tallies = {**{key: Tally() for key in unseen if key in pooled}, **tallies}
    rounds_by_key = {key: tally.records for key, tally in tallies.items() if tally.records}
    for (language, context_class), tally in sorted(tallies.items()):
        alpha, evidence = tally.acceptance, tally.rounds
        if pooled:
            alpha, evidence = pooled[(language, context_class)]
        if alpha is None:
            continue
        replayed = pooled_rounds(rounds_by_key, (language, context_class), pool_weight) if rounds_by_key else {}
        choice = choose_k(replayed, alpha, costs, k_max) if evidence >= min_rounds else None
        if choice is not None:
            k, speedup = choice
        else:
            previous = profile.entry(language, context_class)
            if previous is not None:
                k = previous.k
            elif default_k is not None:
                k = default_k(language, context_class)
            else:
                continue
            k = min(k, k_max)
            speedup = replay_speedup(replayed, k, costs) if replayed else expected_speedup(alpha, k, costs)
        profile.set_entry(language, context_class,
                          ClassProfile(k, alpha, tally.rounds, speedup, dict(sorted(tally.records.items()))))
    return profile


def rechoose_k(profile: Profile, costs: CostModel, pool_weight: float) -> None:
    """Re-choose every entry's K for ``costs`` from what the profile recorded (the rule the policy applies
    on a runtime the K values were not tuned for): replayed rounds, pooled as in :func:`build_profile`,
    where the profile has them; else the entry's acceptance."""
    rounds_by_key = profile.rounds_by_key()
    for language, classes in profile.languages.items():
        for context_class, entry in classes.items():
            replayed = pooled_rounds(rounds_by_key, (language, context_class), pool_weight) if rounds_by_key else {}
            choice = choose_k(replayed, entry.acceptance, costs, profile.k_max)
            if choice is not None:
                entry.k, entry.speedup = choice


def costs_from_timings(draft_step_s: Sequence[float], target_pass_s: dict[int, Sequence[float]]) -> CostModel:
    """A cost model from timings: ``target_pass_s[n]`` are times of target passes over ``n`` tokens
    (n = 1 is one target step), ``draft_step_s`` times of one draft step. Medians resist noise."""
    if 1 not in target_pass_s or not target_pass_s[1] or not draft_step_s:
        raise ValueError("need draft step timings and target timings for 1 token")
    unit = statistics.median(target_pass_s[1])
    if unit <= 0:
        raise ValueError("target step time must be > 0")
    sizes = sorted(n for n in target_pass_s if target_pass_s[n])
    if sizes != list(range(1, len(sizes) + 1)):
        raise ValueError(f"target timings must cover 1..n tokens without gaps, got {sizes}")
    # A longer pass never costs less than a shorter one; timing noise sometimes says otherwise.
    verify: list[float] = []
    for n in sizes:
        verify.append(max(statistics.median(target_pass_s[n]) / unit, verify[-1] if verify else 1.0))
    verify[0] = 1.0
    per_token = (verify[-1] - 1.0) / (len(verify) - 1) if len(verify) > 1 else CostModel().verify_per_token
    return CostModel(statistics.median(draft_step_s) / unit, max(per_token, 0.0), tuple(verify))


# --- measurement ------------------------------------------------------------------------------------------


@dataclass
class Position:
    line: int
    character: int
    offset: int  # character index into the text (the prefix is text[:offset])
    context: CursorContext


def _candidate_offsets(text: str) -> list[int]:
    """Places a person pauses while typing: after a word, an opening bracket, '.', ',', ':' or a line's
    indentation, and inside comments and strings."""
    offsets = []
    for i in range(1, len(text)):
        before, after = text[i - 1], text[i]
        if before in "([{.,:=" or (before.isalnum() and not after.isalnum() and after != "_") or (
            before == "\n" and after not in " \t\n"
        ):
            offsets.append(i)
        elif before in " \t" and text[i - 1 : i + 1] != "  " and after not in " \t\n":
            offsets.append(i)
    return offsets


def sample_positions(
    text: str, language: str, per_class: int, rng: random.Random, max_candidates: int = 400
) -> list[Position]:
    """Up to ``per_class`` cursor positions per context class in ``text``, chosen at random."""
    from codecue.context.documents import DocumentTrees

    candidates = _candidate_offsets(text)
    rng.shuffle(candidates)
    trees = DocumentTrees()
    trees.open("tune://sample", text, language)
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
    chosen: dict[str, list[Position]] = {}
    for offset in candidates[:max_candidates]:
        line = bisect.bisect_right(line_starts, offset) - 1
        column_text = text[line_starts[line] : offset]
        character = len(column_text.encode("utf-16-le")) // 2
        context = trees.context("tune://sample", line, character)
        bucket = chosen.setdefault(context.context_class, [])
        if len(bucket) < per_class:
            bucket.append(Position(line, character, offset, context))
    return [p for bucket in chosen.values() for p in bucket]


@dataclass
class AcceptanceRun:
    tallies: Tallies = field(default_factory=dict)
    completions: int = 0
    seconds: float = 0.0


def measure_acceptance(
    completer: Any,
    files: Iterable[tuple[Path, str]],
    *,
    probe_k: int = DEFAULT_K_MAX,
    max_tokens: int = 48,
    per_class: int = 6,
    draft_mode: str = "hybrid",
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> AcceptanceRun:
    """Complete at sampled positions of each ``(path, language)`` with a fixed ``probe_k`` and tally
    every verification round under the position's (language, class). Greedy decoding: the output is
    the target's own, so only acceptance is measured."""
    from codecue.context.languages import get_grammar
    from codecue.context.stopping import make_stop_predicate

    rng = random.Random(seed)
    run = AcceptanceRun()
    start = time.perf_counter()
    for path, language in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        canonical = get_grammar(language).language
        positions = sample_positions(text, language, per_class, rng)
        if progress is not None:
            progress(f"{path.name}: {len(positions)} positions")
        for position in positions:
            key = (canonical, position.context.context_class)
            tally = run.tallies.setdefault(key, Tally())
            rounds = RoundJoiner(tally.add)
            completer.complete(
                text[: position.offset],
                text[position.offset :],
                max_tokens=max_tokens,
                k=probe_k,
                k_max=probe_k,  # rounds recorded at the probed depth, which replay prices
                draft_mode=draft_mode,
                stop_predicate=make_stop_predicate(position.context),
                on_round=rounds,
            )
            rounds.close()
            run.completions += 1
    run.seconds = time.perf_counter() - start
    return run


def measure_costs(
    completer: Any, prompt_text: str, *, k_max: int = DEFAULT_K_MAX, repeats: int = 7
) -> CostModel:
    """Time one draft step and target passes over 1..k_max+1 tokens after a real prompt, on this machine.

    Each pass is rolled back (``truncate``) so every timing starts from the same cached prompt.
    """
    if completer.draft is None:
        raise ValueError("measuring costs needs a draft model")
    prompt = completer.build_prompt(prompt_text, "")
    probe_tokens = list(prompt[-(k_max + 1) :])
    base = prompt[: -(k_max + 1)] if len(prompt) > k_max + 1 else prompt[:1]
    target = completer.target
    draft = completer.draft
    with completer.lock:
        target.sync(base, 1)
        draft.sync(base, 1)
        length_t, length_d = len(target), len(draft)
        timings: dict[int, list[float]] = {n: [] for n in range(1, k_max + 2)}
        draft_steps: list[float] = []
        for _ in range(repeats):
            for n in range(1, k_max + 2):
                start = time.perf_counter()
                target.extend(probe_tokens[:n], n)  # verification reads every position
                timings[n].append(time.perf_counter() - start)
                target.truncate(length_t)
            start = time.perf_counter()
            draft.extend(probe_tokens[:1], 1)
            draft_steps.append(time.perf_counter() - start)
            draft.truncate(length_d)
    return costs_from_timings(draft_steps, timings)
