"""How often suggestions are taken, measured where it happens and kept on this machine.

The editor clients tell the server when the user accepts a suggestion (``codecue/accepted``: all of it, a
line or a word, and how many characters); the server counts what it showed. Both are kept per language
and context class in ``<config_dir()>/acceptance.json`` (written atomically after each accept), so that
``codecue/stats`` and ``codecue doctor`` can say what is taken where. Nothing leaves the machine.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecue.paths import atomic_write_text, config_dir, read_json_object

log = logging.getLogger(__name__)

ACCEPT_KINDS = ("whole", "line", "word")
UNKNOWN_CLASS = "unknown"  # a language without a grammar, or a cursor the context engine could not read


def acceptance_path() -> Path:
    return config_dir() / "acceptance.json"


@dataclass
class Counts:
    """Suggestions shown, and accepts of each kind with the characters they took."""

    shown: int = 0
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ACCEPT_KINDS, 0))
    accepted_characters: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"shown": self.shown, "accepted": dict(self.accepted), "acceptedCharacters": self.accepted_characters}

    @classmethod
    def from_json(cls, data: Any) -> Counts:
        if not isinstance(data, dict):
            return cls()
        accepted = data.get("accepted") if isinstance(data.get("accepted"), dict) else {}
        return cls(_count(data.get("shown")), {kind: _count(accepted.get(kind)) for kind in ACCEPT_KINDS},
                   _count(data.get("acceptedCharacters")))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class AcceptanceCounts:
    """Counts per language and context class (thread-safe)."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self.by_place: dict[tuple[str, str], Counts] = {}
        for language, classes in (data or {}).items():
            if isinstance(classes, dict):
                for context_class, counts in classes.items():
                    self.by_place[(str(language), str(context_class))] = Counts.from_json(counts)

    def _at(self, language: str, context_class: str | None) -> Counts:
        return self.by_place.setdefault((language, context_class or UNKNOWN_CLASS), Counts())

    def shown(self, language: str, context_class: str | None) -> None:
        with self._lock:
            self._at(language, context_class).shown += 1

    def accepted(self, language: str, context_class: str | None, kind: str, characters: int) -> None:
        if kind not in ACCEPT_KINDS:
            raise ValueError(f"unknown accept kind {kind!r}: one of {', '.join(ACCEPT_KINDS)}")
        with self._lock:
            counts = self._at(language, context_class)
            counts.accepted[kind] += 1
            counts.accepted_characters += max(0, characters)

    def to_json(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for (language, context_class), counts in sorted(self.by_place.items()):
                out.setdefault(language, {})[context_class] = counts.to_json()
            return out


class AcceptanceStore:
    """The machine's counts (all sessions, all days) in one file, and this process's share of them."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or acceptance_path()
        self.counts = AcceptanceCounts(read_json_object(self.path))
        self._write_lock = threading.Lock()

    def save(self) -> None:
        """Write the counts atomically; a failure is logged, never raised (serving goes on)."""
        with self._write_lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(self.path, json.dumps(self.counts.to_json(), indent=1) + "\n", 0o600)
            except OSError as exc:
                log.warning("could not save the acceptance counts to %s: %s", self.path, exc)


def load_counts(path: Path | None = None) -> AcceptanceCounts:
    """The counts kept on this machine (empty where none were kept)."""
    return AcceptanceCounts(read_json_object(path or acceptance_path()))
