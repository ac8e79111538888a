"""What a generation returns (:class:`GenerationResult`) and how it went (:class:`GenerationStats`).

No torch here: a result crosses the pipe from the model process, and the server that reads it (the daemon,
the relay's other end) never imports the engine's tensors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class GenerationStats:
    prompt_tokens: int = 0
    prefilled_tokens: int = 0  # prompt tokens actually evaluated (the rest came from the cache)
    #: the prompt's window was raised to the quality floor: the first text waited for a better prompt
    waited_for_window: bool = False
    shifted_tokens: int = 0  # of the prompt tokens that came from the cache, those kept by shifting (chunk reuse)
    new_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    ngram_rounds: int = 0
    model_rounds: int = 0
    histogram: list[int] = field(default_factory=list)  # histogram[n] = rounds that accepted n drafts
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    total_ms: float = 0.0
    speculative: bool = False
    k: int = 0  # the draft depth asked for (the first drafting round's; 0: target-only)
    k_max: int = 0  # the deepest draft made
    runtime: str = ""  # where it ran: a local runtime ("llamacpp", "torch+llamacpp") or "remote"

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.new_tokens / self.rounds if self.rounds else 0.0

    def record_round(self, drafted: int, accepted: int, *, ngram: bool) -> None:
        """Count one verification round: ``drafted`` tokens proposed (0: a target-only step), ``accepted``
        of them kept, drafted by an n-gram lookup (``ngram``) or the draft model."""
        self.rounds += 1
        if not drafted:
            return
        self.drafted += drafted
        self.accepted += accepted
        if len(self.histogram) <= accepted:
            self.histogram.extend([0] * (accepted + 1 - len(self.histogram)))
        self.histogram[accepted] += 1
        self.k_max = max(self.k_max, drafted)
        if ngram:
            self.ngram_rounds += 1
        else:
            self.model_rounds += 1

    def record_times(self, start: float, first: float | None, end: float, new_tokens: int,
                     ended_by_eos: bool = False) -> None:
        """Set the token count and the times from ``time.perf_counter()`` readings: the request's
        ``start``, its ``first`` token (None: none came) and its ``end``. TPOT is the time per token
        after the first; a generation that ended by its end-of-generation token counts that token too (the
        step that made it is in the time), as llama.cpp's llama-server counts it."""
        first = end if first is None else first
        self.new_tokens = new_tokens
        self.total_ms = (end - start) * 1e3
        self.ttft_ms = (first - start) * 1e3
        after_first = new_tokens - 1 + (1 if ended_by_eos and new_tokens > 0 else 0)
        self.tpot_ms = (end - first) * 1e3 / after_first if after_first > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["acceptance_rate"] = self.acceptance_rate
        d["tokens_per_round"] = self.tokens_per_round
        return d


@dataclass
class GenerationResult:
    tokens: list[int]
    text: str
    stop_reason: str  # "eos", "stop", "max_tokens", "cancelled"
    stats: GenerationStats
    notice: str | None = None  # for the user: how this result was made when not as asked (a fallback)
