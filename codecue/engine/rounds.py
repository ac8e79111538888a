"""What one verification round did (:class:`RoundRecord`) and who drafted it (:class:`DraftSource`), as
reported to a K policy or a tuner (no torch here: the policy reads it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum


class DraftSource(StrEnum):
    """Who drafted a round's tokens: a draft model (each token costs a draft-model step), an n-gram
    match (free), or nobody (no draft)."""

    MODEL = "model"
    NGRAM = "ngram"
    NONE = "none"


@dataclass(frozen=True, order=True)
class RoundRecord:
    """One round: the proposer was asked for up to ``k`` tokens, gave ``drafted``, the target kept ``accepted``.

    ``source`` is who drafted (:class:`DraftSource`, a model or an n-gram match; never NONE). With
    ``drafted < k`` the draft stopped early on its own (low confidence, or an n-gram match ran out).
    ``joins`` > 0 marks rounds joined by :class:`RoundJoiner`: the target's token between two joined
    rounds counts as drafted and accepted in ``drafted``/``accepted`` (and in ``k``), ``joins`` times.
    """

    drafted: int
    accepted: int
    k: int
    source: DraftSource = DraftSource.MODEL
    joins: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.accepted <= self.drafted:
            raise ValueError(f"need 0 <= accepted <= drafted, got drafted={self.drafted} accepted={self.accepted}")
        if self.k < self.drafted:
            raise ValueError(f"drafted {self.drafted} tokens with k={self.k}")
        if self.source not in (DraftSource.MODEL, DraftSource.NGRAM):
            raise ValueError(f"source must be 'model' or 'ngram', got {self.source!r}")
        object.__setattr__(self, "source", DraftSource(self.source))  # a plain "model" from a caller
        if not 0 <= self.joins <= self.accepted:
            raise ValueError(f"joins must be in 0..accepted, got {self.joins}")

    @property
    def drafted_tokens(self) -> int:
        """Tokens the draft really proposed (joined-in target tokens not counted)."""
        return self.drafted - self.joins

    @property
    def accepted_tokens(self) -> int:
        """Drafted tokens the target really accepted (joined-in target tokens not counted)."""
        return self.accepted - self.joins

    # A compact text form for profiles and measurement files: "m8/5@12" (source, drafted/accepted@k), with
    # "+2" appended for two joins.
    def key(self) -> str:
        return f"{self.source[0]}{self.drafted}/{self.accepted}@{self.k}" + (f"+{self.joins}" if self.joins else "")

    @classmethod
    def from_key(cls, text: str) -> RoundRecord:
        try:
            source = {"m": DraftSource.MODEL, "n": DraftSource.NGRAM}[text[0]]
            counts, cap = text[1:].split("@")
            drafted, accepted = counts.split("/")
            k, _, joins = cap.partition("+")
            return cls(int(drafted), int(accepted), int(k), source, int(joins) if joins else 0)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"not a round record like 'm8/5@12': {text!r}") from exc


class RoundJoiner:
    """Joins a round that drafted its whole cap and had all of it accepted with the round after it, and
    passes the joined rounds on to ``callback``: what a deeper cap would have drafted in one round.

    Without this, rounds drafted at a cap k say nothing about caps above k (the run was cut by the cap,
    not by the draft), and a policy could never learn that deeper drafting pays. The joined record
    replays exactly as the original rounds at caps up to k (the target's token between them counts as
    a drafted, accepted token: the draft would have proposed it too, as it agreed all along). Use one
    joiner per completion, as its ``on_round``, and :meth:`close` it at the end.
    """

    def __init__(self, callback: Callable[[RoundRecord], None]) -> None:
        self.callback = callback
        self._open: RoundRecord | None = None

    def __call__(self, record: RoundRecord) -> None:
        if self._open is not None and self._open.source != record.source:
            self.close()  # a model draft and an n-gram match cost differently: not one round
        if self._open is not None:
            record = RoundRecord(self._open.drafted + 1 + record.drafted, self._open.accepted + 1 + record.accepted,
                                 self._open.k + 1 + record.k, record.source, self._open.joins + 1 + record.joins)
            self._open = None
        if record.accepted == record.drafted == record.k:
            self._open = record  # cut by the cap: the run goes on in the next round
        else:
            self.callback(record)

    def close(self) -> None:
        """The completion ended: pass on a round still held open."""
        if self._open is not None:
            record, self._open = self._open, None
            self.callback(record)
