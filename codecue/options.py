"""Every option CodeCue takes, declared once, and the one check every value passes wherever it came from.

Four places set options:

- ``initializationOptions``, sent by the editor at ``initialize``: the session's own options, and the
  decoding settings its requests use (over the server's);
- the command line (``--chunk-reuse 128``): the models and decoding of a command, a server or the daemon;
- ``config.toml`` (``[decoding] chunk_reuse = 128``): the user's defaults, under the flags;
- the daemon's wire format: the hello a relay opens its connection with names the flags it was given, by
  their camelCase names (``{"chunkReuse": 128}``).

Each :class:`Option` names itself in each place it can be set, with its type, its range or choices, its
default and a one-line help. :func:`check` validates a value for an option and returns it, or raises
:class:`OptionError` with one message, the same whatever the place::

    chunkReuse (--chunk-reuse, [decoding] chunk_reuse): 9000 is not an integer from 0 to 8192

The message names the option by all its names (the one the user wrote is among them) and the value as JSON
and TOML write it. Each place then adds what it does about it and nothing else: ``initialize`` reports it
and uses the default (it never fails), a flag is refused, ``config.toml`` warns and uses the default (the
``[remote]`` table refuses to start, as it always did), and a hello's value is reported to the editor at
``initialize`` and the daemon's own setting used.

``docs/server.md``'s options table is :func:`markdown_table` (``python -m codecue.options``
prints it; a test keeps them equal), and the editor clients forward these options under these names.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from codecue.errors import CodeCueError
from codecue.paths import config_path, read_config_table

log = logging.getLogger(__name__)

#: the runtimes a model can be loaded on (``auto``: :func:`codecue.loading.load.choose_backend` decides). Here,
#: below the backends, so that the flags, the hello and config.toml check a runtime's name as the rest.
BACKENDS = ("auto", "torch", "llamacpp", "exllamav2")
DRAFT_MODES = ("hybrid", "model", "ngram", "none")
#: the draft modes that draft with a draft model (and so load one)
MODEL_DRAFT_MODES = ("hybrid", "model")
DTYPES = ("auto", "float32", "bfloat16", "float16", "int8")
DRAFT_VOCABS = ("code", "full")
MAX_CHUNK_REUSE = 8192
FALLBACKS = ("local", "none")

Kind = Literal["int", "number", "bool", "choice", "text", "languages"]


class OptionError(CodeCueError):
    """A value an option cannot take. The message is the same wherever the value came from."""


@dataclass(frozen=True)
class Option:
    """One option: its names in each place that sets it, what it takes, its default and its help."""

    name: str  # Python: the field it sets (of ServerOptions, ModelChoice, DecodingSettings or RemoteSettings)
    kind: Kind
    default: Any
    help: str  # one line: what it does (the flag's help and the documented table's)
    wire: str | None = None  # camelCase: its name in the table, and its key in the daemon's hello
    init: str | None = None  # its key in initializationOptions ("model.target"), None: not there
    hello: bool = False  # in the daemon's hello (every option with a flag that the models take)
    flag: str | None = None
    toml: tuple[str, str] | None = None  # (table, key) in config.toml
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is out of range
    high_open: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False  # None is a value: unset (k: the K authority decides)
    expect: str | None = None  # what a good value is, where the kind and range say it badly
    shown_default: str | None = None  # the default as the table shows it, where the value does not say it

    @property
    def label(self) -> str:
        """All its names: ``chunkReuse (--chunk-reuse, [decoding] chunk_reuse)``."""
        names = [name for name in (self.init or self.wire, self.flag, self.toml_name) if name]
        return f"{names[0]} ({', '.join(names[1:])})" if len(names) > 1 else names[0]

    @property
    def toml_name(self) -> str | None:
        return f"[{self.toml[0]}] {self.toml[1]}" if self.toml else None

    @property
    def expected(self) -> str:
        """What a good value is: ``an integer from 0 to 8192``, ``one of code, full``."""
        if self.expect:
            return self.expect
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "text":
            return "a non-empty string"
        return f"{'an integer' if self.kind == 'int' else 'a number'} {self._range()}"

    def _range(self) -> str:
        if self.low is not None and self.high is not None and not (self.low_open or self.high_open):
            return f"from {_number(self.low)} to {_number(self.high)}"
        bounds = []
        if self.low is not None:
            bounds.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.high is not None:
            bounds.append(f"{'<' if self.high_open else '<='} {_number(self.high)}")
        return " and ".join(bounds)

    @property
    def default_text(self) -> str:
        """The default as the table and the flag's help show it: ``auto``, ``0.4``, ``true``."""
        if self.shown_default:
            return self.shown_default
        if isinstance(self.default, str):
            return self.default
        return _number(self.default) if isinstance(self.default, float) else show(self.default)

    def error(self, value: Any) -> OptionError:
        return OptionError(f"{self.label}: {show(value)} is not {self.expected}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def show(value: Any) -> str:
    """A value as JSON and TOML write it (strings quoted, true and false), however it came; cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # not JSON (a TOML date), or nested past the stack
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


OPTIONS: tuple[Option, ...] = (
    # The session: initializationOptions only.
    Option("max_tokens", "int", 64, "longest suggestion, in tokens",
           wire="maxTokens", init="maxTokens", low=1, high=1024),
    Option("temperature", "number", 0.0, "0 = greedy: each token is the target's own greedy choice from the "
           "cache it holds", wire="temperature", init="temperature", low=0, high=2),
    Option("languages", "languages", {}, "false turns a language off (by LSP languageId or CodeCue language "
           "name); absent = on", wire="languages", init="languages",
           expect="an object of language ids to true or false"),
    Option("debounce_ms", "int", 0, "wait this long before generating; a newer request for the document "
           "within it replaces this one", wire="debounceMs", init="debounceMs", low=0, high=5000),
    Option("request_timeout_ms", "int", 300_000, "a request not answered within this long gets RequestFailed "
           "(-32803) and its generation stops", wire="requestTimeoutMs", init="requestTimeoutMs",
           low=100, high=3_600_000),
    Option("work_ahead", "bool", True, "warm the caches where a document opens or the cursor rests, a "
           "place's full prompt after a request, the next suggestion after an accepted one (any request "
           "cancels them)", wire="workAhead", init="workAhead"),
    Option("token", "text", None, "only for --tcp: the token the server printed at start",
           wire="token", init="token", expect="the token string", shown_default="none"),
    # The models: flags and the hello; the model pair also from initializationOptions and config.toml.
    Option("target", "text", None, "target model: registry name, GGUF file, HF or EXL2 directory",
           wire="target", init="model.target", hello=True, flag="--target", toml=("models", "target"),
           nullable=True, expect="a model name or path", shown_default="the default pair's"),
    Option("draft", "text", None, "draft model (it shares the target's tokenizer): registry name, GGUF "
           "file, HF or EXL2 directory", wire="draft", init="model.draft", hello=True, flag="--draft",
           toml=("models", "draft"), nullable=True, expect="a model name or path",
           shown_default="the default pair's"),
    Option("backend", "choice", "auto", "runtime for the models (auto: the runtime plan's; remote: the "
           "--remote server)", wire="backend", hello=True, flag="--backend", choices=(*BACKENDS, "remote")),
    Option("draft_backend", "choice", None, "runtime for the draft", wire="draftBackend", hello=True,
           flag="--draft-backend", choices=BACKENDS, nullable=True, shown_default="--backend's"),
    Option("dtype", "choice", "auto", "torch backend weights for the target (auto: fastest measured; int8: "
           "weight-only quantized)", wire="dtype", hello=True, flag="--dtype", choices=DTYPES),
    Option("device", "text", "auto", "torch device: auto, cpu, cuda",
           wire="device", hello=True, flag="--device", expect="a device name"),
    Option("remote", "text", None, "complete on this shared inference server (OpenAI-style "
           "/v1/completions); the local models are its fallback", wire="remote", hello=True,
           flag="--remote", toml=("remote", "url"), nullable=True, expect="a server URL",
           shown_default="[remote] url, else none"),
    # Decoding: every place; from initializationOptions for the session's own requests.
    Option("draft_mode", "choice", "hybrid", "who drafts: hybrid (n-gram lookup, else the draft model), "
           "model, ngram, none", wire="draftMode", init="draftMode", hello=True, flag="--draft-mode",
           toml=("decoding", "draft_mode"), choices=DRAFT_MODES),
    Option("k", "int", None, "a fixed drafting depth K (0 = no speculation); unset: the K authority decides "
           "per request from the costs measured on this machine", wire="k", init="k", hello=True,
           flag="--k", toml=("decoding", "k"), low=0, high=32, nullable=True,
           shown_default="the K authority's"),
    Option("min_confidence", "number", 0.4, "stop drafting when the draft's probability for its guess falls "
           "below this", wire="minConfidence", init="minConfidence", hello=True, flag="--min-confidence",
           toml=("decoding", "min_confidence"), low=0, high=1, high_open=True),
    Option("draft_vocab", "choice", "code", "code: the draft scores only ASCII code tokens (cheaper; the "
           "target still verifies every token)", wire="draftVocab", init="draftVocab", hello=True, flag="--draft-vocab",
           toml=("decoding", "draft_vocab"), choices=DRAFT_VOCABS),
    # -1 (the field's default) is the prompt budget's own, 400 ms: a sentinel, never a value to send.
    Option("first_text_ms", "int", -1, "at a place the cache does not hold, evaluate at most this long of "
           "prompt before the first text (a shorter prompt; 0: always the full prompt)", wire="firstTextMs",
           init="firstTextMs", hello=True, flag="--first-text-ms", toml=("decoding", "first_text_ms"),
           low=0, shown_default="400, the prompt budget's"),
    Option("chunk_reuse", "int", 64, "keep cached runs of at least this many tokens that reappear after an "
           "edit or a jump by shifting their positions instead of evaluating them again (llama.cpp; 0: "
           "reuse the common prefix only)", wire="chunkReuse", init="chunkReuse", hello=True,
           flag="--chunk-reuse", toml=("decoding", "chunk_reuse"), low=0, high=MAX_CHUNK_REUSE),
    # The shared inference server: config.toml's [remote] only (its url also --remote).
    Option("model", "text", None, "the model name sent to the server", toml=("remote", "model"),
           expect="a model name", shown_default="the server's only or default model"),
    Option("api_key_env", "text", None, "the name of the environment variable that holds the API key (the "
           "key itself is never written down)", toml=("remote", "api_key_env"),
           expect="an environment variable's name", shown_default="no key"),
    Option("connect_timeout", "number", 3.0, "seconds to open the connection (TCP and TLS)",
           toml=("remote", "connect_timeout"), low=0, low_open=True),
    Option("first_byte_timeout", "number", 10.0, "seconds from sending the request to the first token",
           toml=("remote", "first_byte_timeout"), low=0, low_open=True),
    Option("read_timeout", "number", 5.0, "the longest silence between two tokens once streaming, in "
           "seconds", toml=("remote", "read_timeout"), low=0, low_open=True),
    Option("fallback", "choice", "local", "local: a failing server is answered by the local models; none: "
           "an error", toml=("remote", "fallback"), choices=FALLBACKS),
    Option("retry_after", "number", 30.0, "after a failure with fallback local, use the local models this "
           "many seconds", toml=("remote", "retry_after"), low=0, low_open=True),
    Option("ca_bundle", "text", None, "a PEM file of CAs to trust (a team's own CA); TLS is always "
           "verified", toml=("remote", "ca_bundle"), expect="a path", shown_default="the system's"),
    Option("tokenizer", "text", None, "the model whose tokenizer trims the prompt",
           toml=("remote", "tokenizer"), expect="a model name or path", shown_default="the local target's"),
)


#: initializationOptions by key (``model.target`` and ``model.draft`` under ``model``)
INIT: dict[str, Option] = {o.init: o for o in OPTIONS if o.init}
#: the daemon's hello by camelCase key; also the fields of ModelChoice and DecodingSettings by Python name
HELLO: dict[str, Option] = {o.wire: o for o in OPTIONS if o.hello and o.wire}
CONFIG_FIELDS: dict[str, Option] = {o.name: o for o in HELLO.values()}
#: config.toml by table and key
TABLES: dict[str, dict[str, Option]] = {}
for _option in OPTIONS:
    if _option.toml:
        TABLES.setdefault(_option.toml[0], {})[_option.toml[1]] = _option


def check(option: Option, value: Any) -> Any:
    """``value`` as ``option`` holds it (a number as a float, a string stripped), or :class:`OptionError`."""
    if value is None and option.nullable:
        return None
    return _CHECKS[option.kind](option, value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _in_range(option: Option, value: float) -> bool:
    low, high = option.low, option.high
    return ((low is None or (value > low if option.low_open else value >= low))
            and (high is None or (value < high if option.high_open else value <= high)))


def _check_int(option: Option, value: Any) -> int:
    if not _is_int(value) or not _in_range(option, value):
        raise option.error(value)
    return value


def _check_number(option: Option, value: Any) -> float:
    number = _is_int(value) or isinstance(value, float)
    if not number or not math.isfinite(value) or not _in_range(option, value):
        raise option.error(value)
    return float(value)


def _check_bool(option: Option, value: Any) -> bool:
    if not isinstance(value, bool):
        raise option.error(value)
    return value


def _check_choice(option: Option, value: Any) -> str:
    if not isinstance(value, str) or value not in option.choices:
        raise option.error(value)
    return value


def _check_text(option: Option, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise option.error(value)
    return value.strip()


def _check_languages(option: Option, value: Any) -> dict[str, bool]:
    """All or nothing; :func:`good_languages` keeps the good entries of a bad object."""
    if not isinstance(value, Mapping):
        raise option.error(value)
    bad = {k: v for k, v in value.items() if not (isinstance(k, str) and isinstance(v, bool))}
    if bad:
        raise option.error(bad)
    return dict(value)


def good_languages(value: Mapping[Any, Any]) -> dict[str, bool]:
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, bool)}


_CHECKS: dict[str, Callable[[Option, Any], Any]] = {
    "int": _check_int, "number": _check_number, "bool": _check_bool, "choice": _check_choice,
    "text": _check_text, "languages": _check_languages}


# -- each place's reading ---------------------------------------------------------------------------------
def from_text(option: Option, text: str) -> Any:
    """A flag's value: its text read as JSON and TOML read a number (``1`` an integer, ``1.5`` and ``nan``
    not), then checked as any value is, so that a message shows it as it would show it from there."""
    value: Any = text
    if option.kind in ("int", "number"):
        value = _parse_number(text)
        if value is None:
            raise option.error(text)
    return check(option, value)


def _parse_number(text: str) -> int | float | None:
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return None


def flag_type(option: Option) -> Callable[[str], Any]:
    """argparse's ``type=`` for the option's flag: a bad value is refused with the option's message."""

    def convert(text: str) -> Any:
        try:
            return from_text(option, text)
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = option.name
    return convert


def check_table(table: str, entries: Mapping[str, Any], *, unknown: str = "", bad: str = "",
                ) -> tuple[dict[str, Any], list[str]]:
    """Entries of config.toml's ``[table]``: the good ones by key, and one line per entry left out, the
    ``unknown`` or ``bad`` suffix after it (what the caller does about it)."""
    known = TABLES.get(table, {})
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in entries.items():
        option = known.get(key)
        if option is None:
            problems.append(f"unknown setting [{table}] {key}{unknown} (known: {', '.join(sorted(known))})")
            continue
        try:
            values[key] = check(option, value)
        except OptionError as exc:
            problems.append(f"{exc}{bad}")
    return values, problems


def read_config_options(table: str) -> dict[str, Any]:
    """The user's ``[table]`` checked, by key. A bad or unknown entry is logged and left out, so that its
    default applies: a broken settings file must not stop completions."""
    entries = read_config_table(table)
    values, problems = check_table(table, entries, unknown=" ignored", bad="; using the default")
    for problem in problems:
        log.warning("%s: %s", config_path(), problem)
    return values


def read_wire_values(values: Any) -> tuple[dict[str, Any], list[str]]:
    """The daemon's hello (camelCase keys): the good values by Python name, and one line per value left
    out (the daemon's own setting stays). An empty ``remote`` means none (the relay's ``--no-remote``);
    ``backend`` remote means auto, the server being the ``remote`` URL's."""
    if values is None:
        return {}, []
    if not isinstance(values, Mapping):
        return {}, [f"the hello's settings: {show(values)} is not an object; using the daemon's"]
    changes: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in values.items():
        option = HELLO.get(key)
        if option is None:
            problems.append(f"unknown option {show(key)} ignored")
        elif key == "remote" and value == "":
            changes["remote"] = None
        else:
            try:
                changes[option.name] = check(option, value)
            except OptionError as exc:
                problems.append(f"{exc}; using the daemon's")
    if changes.get("backend") == "remote":
        changes["backend"] = "auto"
    return changes, problems


# -- the documented table ---------------------------------------------------------------------------------
def _where(option: Option) -> str:
    """Where the option is set: ``editor`` (initializationOptions), its flag, its config.toml entry."""
    places = []
    if option.init:
        places.append("editor" if option.init == option.wire else f"editor (`{option.init}`)")
    places += [f"`{name}`" for name in (option.flag, option.toml_name) if name]
    return ", ".join(places)


def markdown_table() -> str:
    """docs/server.md's table of every option: where each is set, what it takes, its default."""
    rows = ["| Option | Where | Values | Default | Meaning |", "| --- | --- | --- | --- | --- |"]
    for o in OPTIONS:
        default = o.shown_default or f"`{o.default_text}`"
        rows.append(f"| `{o.wire or o.toml_name}` | {_where(o)} | {o.expected} | {default} | {o.help} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
