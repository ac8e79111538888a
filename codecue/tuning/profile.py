"""K profiles: the tuned draft depth per (language, context class) and the measured costs, as TOML.

A profile is read with :mod:`tomllib` and written atomically by a small writer (the format only needs
strings, numbers, lists of numbers and tables). Reading never fails: a missing user profile falls back to
the shipped default (``codecue/tuning/default_profile.toml``), and a corrupt or hand-broken one logs a
clear warning and falls back too. A single bad entry is skipped with a warning; the rest is kept.

Layout::

    version = 1
    source = "codecue tune"
    k_max = 12

    [models]
    draft = "..."
    target = "..."

    [costs]
    draft_cost = 0.21             # one draft step / one target step
    verify_per_token = 0.04
    verify_costs = [1.0, 1.03]    # target pass over k+1 tokens / one target step, by k

    [runtime_costs.llamacpp]      # the same, measured on another runtime (`codecue tune --costs-only`)
    draft_cost = 0.66
    verify_costs = [1.0, 1.62, 2.24]

    [languages.python]
    call_arguments = { k = 5, acceptance = 0.81, samples = 1200, speedup = 1.9, rounds = { "m12/12@12" = 3, "m4/2@12" = 1 } }

``rounds`` counts recorded verification rounds by kind ("m4/2@12": the draft model drafted 4 tokens, asked for
up to 12, and 2 were accepted; "n..." an n-gram match); the policy replays them to choose K.
"""

from __future__ import annotations

import copy
import logging
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecue.engine.rounds import RoundRecord
from codecue.paths import atomic_write_text, config_dir
from codecue.tuning.k_choice import DEFAULT_K_MAX, CostModel

log = logging.getLogger(__name__)

PROFILE_VERSION = 1
DEFAULT_PROFILE_PATH = Path(__file__).with_name("default_profile.toml")


def user_profile_path() -> Path:
    return config_dir() / "profile.toml"


@dataclass
class ClassProfile:
    k: int
    acceptance: float | None = None  # per-token acceptance measured for this class
    samples: int = 0  # verification rounds the measurement is based on
    speedup: float | None = None  # expected speedup at k
    #: recorded verification rounds (how many of each), replayed to choose K for any costs
    rounds: dict[RoundRecord, int] = field(default_factory=dict)


@dataclass
class Profile:
    costs: CostModel = field(default_factory=CostModel)
    #: costs measured on other runtimes ("llamacpp", "torch+llamacpp" = target on torch, draft on llama.cpp):
    #: the same per-class acceptance gives another K where a draft step or a verification costs more.
    runtime_costs: dict[str, CostModel] = field(default_factory=dict)
    languages: dict[str, dict[str, ClassProfile]] = field(default_factory=dict)
    k_max: int = DEFAULT_K_MAX
    source: str = "built-in defaults"
    created: str = ""
    models: dict[str, str] = field(default_factory=dict)
    notes: str = ""
    warnings: list[str] = field(default_factory=list)  # problems met while loading (not saved)

    @property
    def runtime(self) -> str | None:
        """The runtime the ``k`` values were chosen for (``[models] runtime``), if recorded."""
        return self.models.get("runtime")

    def entry(self, language: str, context_class: str) -> ClassProfile | None:
        return self.languages.get(language, {}).get(context_class)

    def rounds_by_key(self) -> dict[tuple[str, str], dict[RoundRecord, int]]:
        """The recorded rounds of every (language, class) that has any."""
        return {(language, context_class): entry.rounds
                for language, classes in self.languages.items()
                for context_class, entry in classes.items() if entry.rounds}

    def set_entry(self, language: str, context_class: str, entry: ClassProfile) -> None:
        self.languages.setdefault(language, {})[context_class] = entry

    def copy(self) -> Profile:
        return copy.deepcopy(self)


# --- reading ----------------------------------------------------------------------------------------------


class _Invalid(Exception):
    pass


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Invalid(f"{where} must be a number, got {value!r}")
    if not low <= value <= high:
        raise _Invalid(f"{where} must be in {low:g}..{high:g}, got {value!r}")
    return float(value)


def _integer(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{where} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise _Invalid(f"{where} must be in {low}..{high}, got {value}")
    return value


def _parse_costs(raw: Any, where: str = "costs") -> CostModel:
    if not isinstance(raw, dict):
        raise _Invalid(f"[{where}] must be a table")
    defaults = CostModel()
    draft_cost = _number(raw.get("draft_cost", defaults.draft_cost), f"{where}.draft_cost", 0.0, 100.0)
    per_token = _number(raw.get("verify_per_token", defaults.verify_per_token), f"{where}.verify_per_token",
                        0.0, 100.0)
    table = raw.get("verify_costs", [])
    if not isinstance(table, list):
        raise _Invalid(f"{where}.verify_costs must be a list of numbers")
    verify = tuple(_number(v, f"{where}.verify_costs[{i}]", 1e-6, 1000.0) for i, v in enumerate(table))
    try:
        return CostModel(draft_cost, per_token, verify)
    except ValueError as exc:
        raise _Invalid(f"{where}: {exc}") from exc


def _parse_entry(raw: Any, where: str, k_max: int) -> ClassProfile:
    if not isinstance(raw, dict):
        raise _Invalid(f"{where} must be a table like {{ k = 4 }}")
    unknown = set(raw) - {"k", "acceptance", "samples", "speedup", "rounds"}
    if unknown:
        raise _Invalid(f"{where} has unknown keys {sorted(unknown)}")
    k = _integer(raw.get("k"), f"{where}.k", 0, k_max)
    acceptance = raw.get("acceptance")
    if acceptance is not None:
        acceptance = _number(acceptance, f"{where}.acceptance", 0.0, 1.0)
    samples = _integer(raw.get("samples", 0), f"{where}.samples", 0, 2**62)
    speedup = raw.get("speedup")
    if speedup is not None:
        speedup = _number(speedup, f"{where}.speedup", 0.0, 1000.0)
    rounds_raw = raw.get("rounds", {})
    if not isinstance(rounds_raw, dict):
        raise _Invalid(f"{where}.rounds must be a table like {{ \"m4/2@12\" = 3 }}")
    rounds: dict[RoundRecord, int] = {}
    for text, count in rounds_raw.items():
        try:
            record = RoundRecord.from_key(text)
        except ValueError as exc:
            raise _Invalid(f"{where}.rounds: {exc}") from exc
        rounds[record] = rounds.get(record, 0) + _integer(count, f"{where}.rounds[{text!r}]", 0, 2**40)
    return ClassProfile(k, acceptance, samples, speedup, rounds)


def parse_profile(data: dict[str, Any], origin: str = "profile") -> Profile:
    """A Profile from parsed TOML. Raises ValueError when the file as a whole is unusable; bad entries
    are skipped and listed in ``profile.warnings``."""
    from codecue.context.languages import CONTEXT_CLASSES

    try:
        version = data.get("version", PROFILE_VERSION)
        if version != PROFILE_VERSION:
            raise _Invalid(f"version {version!r} is not supported (this CodeCue reads version {PROFILE_VERSION})")
        k_max = _integer(data.get("k_max", DEFAULT_K_MAX), "k_max", 1, 64)
        costs = _parse_costs(data.get("costs", {}))
        languages_raw = data.get("languages", {})
        if not isinstance(languages_raw, dict):
            raise _Invalid("[languages] must be a table of tables")
        models = data.get("models", {})
        if not isinstance(models, dict) or not all(isinstance(v, str) for v in models.values()):
            raise _Invalid("[models] must map names to strings")
    except _Invalid as exc:
        raise ValueError(str(exc)) from exc
    runtime_costs: dict[str, CostModel] = {}
    runtimes_raw = data.get("runtime_costs", {})
    if not isinstance(runtimes_raw, dict):
        runtimes_raw = {}
        warnings = [f"{origin}: [runtime_costs] must be a table of tables; ignored"]
    else:
        warnings = []
    for runtime, raw in runtimes_raw.items():
        try:
            runtime_costs[str(runtime)] = _parse_costs(raw, f"runtime_costs.{runtime}")
        except _Invalid as exc:
            warnings.append(f"{origin}: {exc}; that runtime uses [costs]")
    profile = Profile(
        costs=costs,
        runtime_costs=runtime_costs,
        warnings=warnings,
        k_max=k_max,
        source=str(data.get("source", "")),
        created=str(data.get("created", "")),
        models=dict(models),
        notes=str(data.get("notes", "")),
    )
    for language, classes in languages_raw.items():
        if not isinstance(classes, dict):
            profile.warnings.append(f"{origin}: languages.{language} must be a table; ignored")
            continue
        for context_class, raw in classes.items():
            where = f"languages.{language}.{context_class}"
            if context_class not in CONTEXT_CLASSES:
                profile.warnings.append(f"{origin}: {where}: unknown context class; ignored")
                continue
            try:
                profile.set_entry(language, context_class, _parse_entry(raw, where, k_max))
            except _Invalid as exc:
                profile.warnings.append(f"{origin}: {exc}; that entry uses the default")
    return profile


def _read(path: Path) -> Profile:
    """Read and validate one file; ValueError (with a one-line reason) when it is unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from exc
    return parse_profile(data, str(path))


def default_profile() -> Profile:
    """The shipped default profile, or built-in defaults if it cannot be read."""
    try:
        return _read(DEFAULT_PROFILE_PATH)
    except ValueError as exc:
        message = f"the shipped profile {DEFAULT_PROFILE_PATH} is unusable ({exc}); using built-in defaults"
        log.warning(message)
        return Profile(warnings=[message])


def load_profile(path: str | Path | None = None) -> Profile:
    """The profile at ``path`` (default: the user's, else the shipped default). Never raises for content:
    a missing, unreadable or corrupt file logs a warning and gives the shipped defaults."""
    explicit = path is not None
    resolved = Path(path) if path is not None else user_profile_path()
    if not resolved.exists() and not explicit:
        return default_profile()
    try:
        profile = _read(resolved)
    except ValueError as exc:
        message = f"profile {resolved} is unusable ({exc}); using the default profile"
        log.warning(message)
        fallback = default_profile()
        fallback.warnings.insert(0, message)
        return fallback
    for warning in profile.warnings:
        log.warning(warning)
    return profile


# --- writing ----------------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(value: str) -> str:
    out = ['"']
    for char in value:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04X}" if code < 0xD800 else "\\uFFFD")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(round(value, 6))
        return text if any(c in text for c in ".en") else text + ".0"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items() if v is not None) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def dumps_profile(profile: Profile) -> str:
    """The TOML text of a profile (comments explain the fields for people who edit it)."""
    lines = [
        "# CodeCue draft-depth profile: K (draft tokens per round) per language and context class.",
        "# Written by `codecue tune`; hand edits are fine (a broken file gives a warning and the defaults).",
        "# k = 0 turns speculation off for a class; the server re-probes it now and then.",
        f"version = {PROFILE_VERSION}",
        f"source = {_string(profile.source)}",
    ]
    if profile.created:
        lines.append(f"created = {_string(profile.created)}")
    if profile.notes:
        lines.append(f"notes = {_string(profile.notes)}")
    lines.append(f"k_max = {profile.k_max}")
    if profile.models:
        lines += ["", "[models]"] + [f"{_key(k)} = {_string(v)}" for k, v in sorted(profile.models.items())]
    costs = profile.costs
    lines += [
        "",
        "# Costs relative to one target forward step over one token.",
        "[costs]",
        f"draft_cost = {_value(float(costs.draft_cost))}",
        f"verify_per_token = {_value(float(costs.verify_per_token))}",
    ]
    if costs.verify_costs:
        lines.append(f"verify_costs = {_value([float(c) for c in costs.verify_costs])}")
    for runtime, other in sorted(profile.runtime_costs.items()):
        lines += ["", f"[runtime_costs.{_key(runtime)}]",
                  f"draft_cost = {_value(float(other.draft_cost))}",
                  f"verify_per_token = {_value(float(other.verify_per_token))}"]
        if other.verify_costs:
            lines.append(f"verify_costs = {_value([float(c) for c in other.verify_costs])}")
    for language in sorted(profile.languages):
        lines += ["", f"[languages.{_key(language)}]"]
        for context_class, entry in sorted(profile.languages[language].items()):
            fields: dict[str, Any] = {"k": entry.k}
            if entry.acceptance is not None:
                fields["acceptance"] = round(entry.acceptance, 4)
            if entry.samples:
                fields["samples"] = entry.samples
            if entry.speedup is not None:
                fields["speedup"] = round(entry.speedup, 3)
            if entry.rounds:
                fields["rounds"] = {record.key(): count for record, count in sorted(entry.rounds.items())}
            lines.append(f"{_key(context_class)} = {_value(fields)}")
    return "\n".join(lines) + "\n"


def save_profile(profile: Profile, path: str | Path | None = None) -> Path:
    """Write ``profile`` atomically (readers see the old file or the new one); returns the path."""
    target = Path(path) if path is not None else user_profile_path()
    atomic_write_text(target, dumps_profile(profile))
    return target
