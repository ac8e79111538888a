"""The runtime plan: which configuration serves fastest on this machine, from costs measured here.

Candidates are the runtimes and pairings present: llama.cpp target-only, llama.cpp with n-gram drafting
only (no draft model), llama.cpp speculative (target and draft on llama.cpp), torch target with a llama.cpp draft, and torch; on llama.cpp also the target in
each derived weight layout that keeps its quality (:mod:`codecue.models.requantize`), target-only and
speculative, and speculative with the draft re-quantized (:data:`DRAFT_LAYOUTS`). Each is priced with
what was measured on this machine (:mod:`codecue.tuning.machine_costs`) and the profile's recorded rounds: expected
time per token = target step / replayed speedup at the best K (1 for target-only), time to first token =
prefill per token x a typical prompt. The plan picks the lowest time per token, then the lowest TTFT; a
speculative candidate whose best K here is 0 is never picked over a target-only one.
Unmeasured candidates are listed but never chosen; with nothing measured the plan falls back to the
cheapest safe default (llama.cpp target-only where llama.cpp is installed, else torch).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from codecue.engine.rounds import RoundRecord
from codecue.models.requantize import AS_IS, derived_path, offered_layouts, requantized
from codecue.tuning.k_choice import DEFAULT_K_MAX, worth_drafting
from codecue.tuning.machine_costs import MachineCosts, load_machine_costs
from codecue.tuning.profile import Profile, load_profile

TYPICAL_PROMPT_TOKENS = 1000
TIE = 0.02  # time-per-token estimates within 2% are a tie; TTFT decides


#: Layouts a llama.cpp draft is also offered in. A draft needs no quality bound (every token it guesses is
#: verified by the target); only its speed matters, and Q4_0 has fast kernels on more CPUs than the
#: shipped draft's Q5_0 (no AMX kernel).
DRAFT_LAYOUTS = ("q4_0",)


@dataclass(frozen=True)
class Candidate:
    """One way to serve: the target's runtime, the draft's (None: no draft), the drafting mode, and the
    target's and the draft's weight layouts (as shipped, or re-quantized here)."""

    label: str
    backend: str
    draft_backend: str | None
    draft_mode: str
    layout: str = AS_IS
    draft_layout: str = AS_IS

    def target_file(self, target: str) -> str:
        """The model file this candidate serves as the target (a derived one may not exist yet)."""
        return target if self.layout == AS_IS else str(derived_path(Path(target), self.layout))

    def draft_file(self, draft: str) -> str:
        """The model file this candidate drafts with (a derived one may not exist yet)."""
        return draft if self.draft_layout == AS_IS else str(derived_path(Path(draft), self.draft_layout))

    def files(self, target: Path, draft: Path | None) -> tuple[str, str | None]:
        """The target and draft files to load, re-quantizing here what is not made yet (seconds, once)."""
        target_file = str(target if self.layout == AS_IS else requantized(target, self.layout))
        if draft is None or not self.loads_draft or self.draft_layout == AS_IS:
            return target_file, None if draft is None else str(draft)
        return target_file, str(requantized(draft, self.draft_layout))

    @property
    def runtime(self) -> str:
        """The runtime label a Completer reports for this candidate (what costs are keyed by)."""
        if self.draft_backend is None or self.draft_backend == self.backend:
            return self.backend
        return f"{self.backend}+{self.draft_backend}"

    @property
    def speculative(self) -> bool:
        """Whether it drafts at all (a draft model, or free n-gram lookups in the prompt)."""
        return self.draft_mode != "none"

    @property
    def loads_draft(self) -> bool:
        """Whether it loads a draft model (n-gram drafting needs none)."""
        return self.draft_backend is not None


LLAMACPP_TARGET_ONLY = Candidate("llama.cpp target-only", "llamacpp", None, "none")
#: The target alone, drafting only by n-gram lookup in the prompt: free drafts, where a draft model's step
#: costs too much of a target step to pay (2-core CPUs without AVX-512, measured) but verifying a few
#: tokens at once still costs less than decoding them one by one.
LLAMACPP_NGRAM = Candidate("llama.cpp n-gram", "llamacpp", None, "ngram")
LLAMACPP_SPECULATIVE = Candidate("llama.cpp speculative", "llamacpp", "llamacpp", "hybrid")
TORCH_WITH_LLAMACPP_DRAFT = Candidate("torch target + llama.cpp draft", "torch", "llamacpp", "hybrid")
TORCH_SPECULATIVE = Candidate("torch speculative", "torch", "torch", "hybrid")


def candidates(llamacpp: bool | None = None, layouts: tuple[str, ...] = (),
               draft_layouts: tuple[str, ...] = ()) -> list[Candidate]:
    if llamacpp is None:
        llamacpp = importlib.util.find_spec("llama_cpp") is not None
    torch_only = [TORCH_SPECULATIVE]
    if not llamacpp:
        return torch_only
    derived = [Candidate(f"{base.label}, target as {layout.upper()}", base.backend, base.draft_backend,
                         base.draft_mode, layout)
               for layout in layouts for base in (LLAMACPP_TARGET_ONLY, LLAMACPP_NGRAM, LLAMACPP_SPECULATIVE)]
    spec = LLAMACPP_SPECULATIVE
    derived_drafts = [Candidate(spec.label + (f", target as {layout.upper()}" if layout != AS_IS else "")
                                + f", draft as {draft_layout.upper()}", spec.backend, spec.draft_backend,
                                spec.draft_mode, layout, draft_layout)
                      for layout in (AS_IS, *layouts) for draft_layout in draft_layouts]
    return [LLAMACPP_TARGET_ONLY, LLAMACPP_NGRAM, LLAMACPP_SPECULATIVE, *derived, *derived_drafts,
            TORCH_WITH_LLAMACPP_DRAFT, *torch_only]


@dataclass(frozen=True)
class PlanRow:
    candidate: Candidate
    measured: MachineCosts | None
    k: int = 0
    speedup: float = 1.0  # replayed, over the candidate's own target step
    ms_per_token: float | None = None
    ttft_ms: float | None = None


@dataclass(frozen=True)
class Plan:
    rows: list[PlanRow]
    chosen: Candidate
    reason: str

    def row(self, candidate: Candidate) -> PlanRow | None:
        return next((r for r in self.rows if r.candidate == candidate), None)


def all_rounds(profile: Profile) -> Counter[RoundRecord]:
    """Every recorded round of the profile, each class and language counted as recorded."""
    pooled: Counter[RoundRecord] = Counter()
    for records in profile.rounds_by_key().values():
        pooled.update(records)
    return pooled


def price(candidate: Candidate, measured: MachineCosts | None, rounds: Counter[RoundRecord],
          k_max: int = DEFAULT_K_MAX) -> PlanRow:
    """Expected time per token and to first token of ``candidate`` from what was measured for it."""
    if measured is None:
        return PlanRow(candidate, None)
    k, speedup = 0, 1.0
    if candidate.speculative and measured.costs is not None and rounds:
        k, speedup = worth_drafting(rounds, measured.costs, k_max, ngram_only=not candidate.loads_draft)
    return PlanRow(candidate, measured, k, speedup, measured.target_step_ms / speedup,
                   measured.prefill_ms_per_token * TYPICAL_PROMPT_TOKENS)


def measured_for(candidate: Candidate, target: str, draft: str | None) -> MachineCosts | None:
    """What this machine measured for the candidate. A target-only candidate also takes the target timings
    of a speculative measurement on the same runtime (the target step is the same); an n-gram one takes the
    verification passes measured with the target alone, else those of a speculative measurement of the same
    target (the passes do not depend on the draft), with drafts that cost nothing."""
    target = candidate.target_file(target)
    draft = candidate.draft_file(draft) if draft else None
    if candidate.speculative and not candidate.loads_draft:
        own = load_machine_costs(candidate.runtime, target, None)
        if own is not None and own.costs is not None:
            return own
        with_draft = load_machine_costs(candidate.runtime, target, draft) if draft else None
        if with_draft is None or with_draft.costs is None:
            return None
        return replace(with_draft, costs=replace(with_draft.costs, draft_cost=0.0))
    if not candidate.speculative:
        own = load_machine_costs(candidate.runtime, target, None)
        if own is not None or draft is None:
            return own
        with_draft = load_machine_costs(candidate.runtime, target, draft)
        if with_draft is None:
            return None
        return MachineCosts(with_draft.runtime, with_draft.target_step_ms, with_draft.prefill_ms_per_token, None,
                            with_draft.cpu, with_draft.measured_at)
    return load_machine_costs(candidate.runtime, target, draft) if draft else None


def make_plan(target: str, draft: str | None, profile: Profile | None = None,
              llamacpp: bool | None = None) -> Plan:
    """The plan for serving ``target`` (with ``draft``) on this machine; paths are resolved model files."""
    profile = profile if profile is not None else load_profile()
    rounds = all_rounds(profile)
    layouts = tuple(offered_layouts(Path(target))) if Path(target).suffix == ".gguf" else ()
    draft_layouts = DRAFT_LAYOUTS if draft and Path(draft).suffix == ".gguf" else ()
    rows = [price(c, measured_for(c, target, draft), rounds, profile.k_max)
            for c in candidates(llamacpp, layouts, draft_layouts)]
    priced = [r for r in rows if r.ms_per_token is not None]
    if not priced:
        # Loaded with its draft but decoding target-only (K = 0 while costs are unknown), so that the
        # server's idle-time measurement covers both the target step and the draft.
        fallback = LLAMACPP_SPECULATIVE if rows[0].candidate == LLAMACPP_TARGET_ONLY else rows[0].candidate
        return Plan(rows, fallback, "nothing measured on this machine yet: target-only decoding until costs are "
                                    "measured (`codecue doctor --measure`, or the server in idle time)")
    # A speculative candidate whose best K is 0 would load the draft (its memory, and its reading of every
    # prompt) only to decode target-only: a target-only candidate serves the same for less.
    useful = [r for r in priced if not (r.candidate.speculative and r.k == 0)] or priced
    fastest = min(r.ms_per_token for r in useful)
    close = [r for r in useful if r.ms_per_token <= fastest * (1 + TIE)]
    best = min(close, key=lambda r: (r.ttft_ms or 0.0, r.ms_per_token))
    return Plan(rows, best.candidate, f"lowest expected time per token ({best.ms_per_token:.1f} ms)"
                + (f", then lowest time to first token among {len(close)} within {TIE:.0%}" if len(close) > 1 else ""))
