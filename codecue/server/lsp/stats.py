"""``codecue/stats`` (a custom request) and ``workspace/executeCommand`` ``codecue.stats``.

Both answer this session's numbers per language::

    {"languages": {"python": {"completions": 12, "acceptanceRate": 0.71, "ttftMs": 180.0,
                              "tpotMs": 41.2, "tokensPerSecond": 24.3, "speculation": true}},
     "total": {...same keys...},
     "runtimes": {"remote": {...same keys...}, "llamacpp": {...}},
     "session": {"typeThrough": 3, "superseded": 9, "cancelled": 1, "maxRoundsAfterCancel": 1, ...},
     "worker": {"modelsLoaded": true, ...}}

``completions`` counts generations that ran to the end; ``ttftMs`` and ``tpotMs`` are means over them;
``tokensPerSecond`` is generated tokens over generation time; ``speculation`` says whether the latest
generation in that language drafted (K > 0 with a proposer). ``runtimes`` has the same numbers per
place the completions ran: a local runtime, or ``remote`` (a shared server; its TTFT includes the network
and the server's queue), so a remote's latency can be read next to local runs and fallbacks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codecue.engine.results import GenerationResult, GenerationStats
    from codecue.server.lsp.session import CodeCueServer

STATS_REQUEST = "codecue/stats"
STATS_COMMAND = "codecue.stats"


@dataclass
class LanguageStats:
    completions: int = 0
    drafted: int = 0
    accepted: int = 0
    tokens: int = 0
    ttft_ms_sum: float = 0.0
    tpot_ms_sum: float = 0.0
    tpot_count: int = 0
    generation_ms: float = 0.0
    prefilled_tokens: int = 0
    prompt_tokens: int = 0
    speculation: bool = False

    def add(self, stats: GenerationStats) -> None:
        self.completions += 1
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.tokens += stats.new_tokens
        self.ttft_ms_sum += stats.ttft_ms
        if stats.new_tokens > 1:
            self.tpot_ms_sum += stats.tpot_ms
            self.tpot_count += 1
        self.generation_ms += stats.total_ms
        self.prefilled_tokens += stats.prefilled_tokens
        self.prompt_tokens += stats.prompt_tokens
        self.speculation = stats.speculative

    def merge(self, other: LanguageStats) -> None:
        for name in ("completions", "drafted", "accepted", "tokens", "ttft_ms_sum", "tpot_ms_sum", "tpot_count",
                     "generation_ms", "prefilled_tokens", "prompt_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.speculation = self.speculation or other.speculation

    def to_json(self) -> dict[str, Any]:
        return {
            "completions": self.completions,
            "acceptanceRate": round(self.accepted / self.drafted, 4) if self.drafted else 0.0,
            "ttftMs": round(self.ttft_ms_sum / self.completions, 1) if self.completions else 0.0,
            "tpotMs": round(self.tpot_ms_sum / self.tpot_count, 1) if self.tpot_count else 0.0,
            "tokensPerSecond": round(self.tokens / (self.generation_ms / 1e3), 1) if self.generation_ms else 0.0,
            "speculation": self.speculation,
            "tokens": self.tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            # How much of the prompts came from the KV cache instead of being evaluated again.
            "cacheReuse": round(1 - self.prefilled_tokens / self.prompt_tokens, 4) if self.prompt_tokens else 0.0,
        }


@dataclass
class CancelRecord:
    rounds_after_cancel: int
    tokens: int
    max_tokens: int
    stop_reason: str


class SessionStats:
    def __init__(self) -> None:
        self.languages: dict[str, LanguageStats] = {}
        self.runtimes: dict[str, LanguageStats] = {}
        self.type_through = 0
        self.prefetched = 0  # next suggestions generated ahead, after one was accepted
        self.warm_ups = 0  # places whose prompt was sent to be warmed (document opened, cursor moved)
        self.next_lines_prepared = 0  # lines after a line's end generated in a rest there
        self.next_line_served = 0  # Enter answered from one of them, without the model
        self.warmed = 0  # ... that got through their whole prompt
        self.warm_cancelled = 0  # ... that a request (or a newer warm-up) cancelled first
        self.last_warm: dict[str, Any] | None = None
        self.adopted = 0  # requests answered by a generation already running for an earlier keystroke
        self.diverged = 0  # joined generations that turned out to disagree with the typing, and restarted
        self.superseded = 0
        self.cancelled = 0
        self.stale = 0
        self.failed = 0
        self.max_rounds_after_cancel = 0
        self.last_cancel: CancelRecord | None = None
        self.last_generation: dict[str, Any] | None = None
        self.generations: deque[dict[str, Any]] = deque(maxlen=1000)  # recent ones, for benchmarks

    def record(self, language: str, result: GenerationResult) -> None:
        stats = result.stats
        self.languages.setdefault(language, LanguageStats()).add(stats)
        self.runtimes.setdefault(stats.runtime or "local", LanguageStats()).add(stats)
        self.last_generation = {
            "language": language, "runtime": stats.runtime or "local", "stopReason": result.stop_reason,
            "tokens": stats.new_tokens,
            "rounds": stats.rounds, "promptTokens": stats.prompt_tokens, "prefilledTokens": stats.prefilled_tokens,
            "shiftedTokens": stats.shifted_tokens,
            "ttftMs": round(stats.ttft_ms, 1), "totalMs": round(stats.total_ms, 1), "speculative": stats.speculative,
            "k": stats.k, "drafted": stats.drafted, "waitedForWindow": stats.waited_for_window,
        }
        self.generations.append(self.last_generation)

    def record_warm(self, uri: str, line: int, character: int, evaluated: int, complete: bool) -> None:
        if complete:
            self.warmed += 1
        else:
            self.warm_cancelled += 1
        self.last_warm = {"uri": uri, "line": line, "character": character, "evaluatedTokens": evaluated,
                          "cancelled": not complete}

    def record_cancel(self, record: CancelRecord) -> None:
        self.max_rounds_after_cancel = max(self.max_rounds_after_cancel, record.rounds_after_cancel)
        self.last_cancel = record

    def snapshot(self) -> dict[str, Any]:
        total = LanguageStats()
        for lang in self.languages.values():
            total.merge(lang)
        last = self.last_cancel
        return {
            "languages": {name: s.to_json() for name, s in sorted(self.languages.items())},
            "total": total.to_json(),
            "runtimes": {name: s.to_json() for name, s in sorted(self.runtimes.items())},
            "session": {
                "typeThrough": self.type_through,
                "prefetched": self.prefetched,
                "warmUps": self.warm_ups,
                "nextLinesPrepared": self.next_lines_prepared,
                "nextLineServed": self.next_line_served,
                "warmed": self.warmed,
                "warmCancelled": self.warm_cancelled,
                "lastWarm": self.last_warm,
                "adopted": self.adopted,
                "diverged": self.diverged,
                "superseded": self.superseded,
                "cancelled": self.cancelled,
                "stale": self.stale,
                "failed": self.failed,
                "maxRoundsAfterCancel": self.max_rounds_after_cancel,
                "lastGeneration": self.last_generation,
                "lastCancel": None if last is None else {
                    "roundsAfterCancel": last.rounds_after_cancel, "tokens": last.tokens,
                    "maxTokens": last.max_tokens, "stopReason": last.stop_reason,
                },
            },
        }


def stats_result(server: CodeCueServer) -> dict[str, Any]:
    from codecue.server.lsp.accepted import shared_store

    result = server.stats.snapshot()
    result["worker"] = server.worker.status()
    # per language, per context class: {"shown", "accepted": {"whole", "line", "word"}, "acceptedCharacters"}
    result["suggestions"] = {"session": server.acceptance.to_json(), "machine": shared_store().counts.to_json()}
    return result


def register(server: CodeCueServer) -> None:
    @server.feature(STATS_REQUEST)
    def on_stats(params: Any) -> dict[str, Any]:
        return stats_result(server)

    @server.command(STATS_COMMAND)
    def on_stats_command(*args: Any) -> dict[str, Any]:
        return stats_result(server)
