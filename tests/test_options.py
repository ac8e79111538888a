"""One options schema (codecue.options): the same wrong value gets the same message from an editor's
initializationOptions, config.toml, the command-line flag and the daemon's hello; the documented table is
the schema; the clients forward the schema's options under its names; the dataclasses keep its defaults."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

from codecue.backends.remote import RemoteSettings
from codecue.cli import main
from codecue.commands.common import config_from_args, given_model_flags, given_model_values
from codecue.errors import CodeCueError
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.models.flags import add_model_arguments
from codecue.options import (
    CONFIG_FIELDS,
    INIT,
    OPTIONS,
    TABLES,
    OptionError,
    check,
    markdown_table,
    read_wire_values,
)
from codecue.paths import config_path
from codecue.server.lsp.options import ServerOptions, parse_options

ROOT = Path(__file__).resolve().parents[1]

# (wire name, the value as JSON sends it, the flag, its text, the config.toml key, the TOML literal, message)
WRONG = [
    pytest.param("chunkReuse", 9000, "--chunk-reuse", "9000", "chunk_reuse", "9000",
                 "chunkReuse (--chunk-reuse, [decoding] chunk_reuse): 9000 is not an integer from 0 to 8192",
                 id="range"),
    pytest.param("chunkReuse", "lots", "--chunk-reuse", "lots", "chunk_reuse", '"lots"',
                 'chunkReuse (--chunk-reuse, [decoding] chunk_reuse): "lots" is not an integer from 0 to 8192',
                 id="type"),
    pytest.param("draftMode", "fast", "--draft-mode", "fast", "draft_mode", '"fast"',
                 'draftMode (--draft-mode, [decoding] draft_mode): "fast" is not one of hybrid, model, ngram, none',
                 id="choice"),
    pytest.param("minConfidence", 1, "--min-confidence", "1", "min_confidence", "1",
                 "minConfidence (--min-confidence, [decoding] min_confidence): 1 is not a number >= 0 and < 1",
                 id="open-range"),
    pytest.param("k", 1.5, "--k", "1.5", "k", "1.5", "k (--k, [decoding] k): 1.5 is not an integer from 0 to 32",
                 id="float-for-int"),
]


CONFIG_FIELDS_BY_WIRE = {option.wire: name for name, option in CONFIG_FIELDS.items()}


def _write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    monkeypatch.setenv("CODECUE_CONFIG_DIR", str(tmp_path))
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return config_path()


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return parser.parse_args(list(argv))


# -- the acceptance: one message from every place ---------------------------------------------------------
@pytest.mark.parametrize(("wire", "value", "flag", "text", "key", "literal", "message"), WRONG)
def test_a_wrong_value_gets_the_same_message_from_every_place(
        wire, value, flag, text, key, literal, message, tmp_path, monkeypatch, caplog, capsys):
    # initializationOptions: reported, the server's setting used, initialize goes on
    options, problems = parse_options({wire: value})
    assert problems == [f"{message}; using the server's"]
    assert options.decoding == {}

    # config.toml: a warning, the default used
    path = _write_config(tmp_path, monkeypatch, f"[decoding]\n{key} = {literal}\n")
    with caplog.at_level(logging.WARNING):
        config = config_from_args(_parse())
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {message}; using the default"]
    assert config.decoding == DecodingSettings()

    # the flag: refused by the command line, before anything loads
    with pytest.raises(SystemExit) as exit_info:
        main(["complete", "x.py", "--line", "0", "--character", "0", flag, text])
    assert exit_info.value.code == 2
    assert f"error: argument {flag}: {message}\n" in capsys.readouterr().err

    # the daemon's hello: reported, the daemon's setting used
    assert read_wire_values({wire: value}) == ({}, [f"{message}; using the daemon's"])

    # a configuration built in code (a benchmark's, a test's): the same message from validate()
    with pytest.raises(OptionError) as error:
        DecodingSettings(**{CONFIG_FIELDS_BY_WIRE[wire]: value}).validate()
    assert str(error.value) == message


def test_the_model_pair_gets_the_same_message_from_an_editor_and_config_toml(tmp_path, monkeypatch, caplog):
    from codecue.models.resolve import configured_model

    message = "model.target (--target, [models] target): 5 is not a model name or path"
    _, problems = parse_options({"model": {"target": 5}})
    assert problems == [f"{message}; using the default target"]
    path = _write_config(tmp_path, monkeypatch, "[models]\ntarget = 5\n")
    with caplog.at_level(logging.WARNING):
        assert configured_model("target") is None
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {message}; using the default"]
    with pytest.raises(SystemExit):  # an empty name is refused on the command line
        _parse("--target", " ")


def test_a_bad_remote_entry_still_stops_the_command_with_the_schemas_message(tmp_path, monkeypatch):
    path = _write_config(tmp_path, monkeypatch, '[remote]\nurl = "http://127.0.0.1:9"\nread_timeout = -1\n')
    with pytest.raises(CodeCueError) as error:
        RemoteSettings.load()
    assert str(error.value) == f"[remote] read_timeout: -1 is not a number > 0 (in {path})"


def test_a_hello_problem_reaches_the_editor_with_its_own_at_initialize():
    """The daemon does not refuse a session whose hello holds a bad value: the session starts without it
    and the editor hears of it in the one showMessage initialize sends, beside its own options'."""
    from codecue.server.lsp.lifecycle import configure
    from codecue.server.lsp.session import CodeCueServer
    from codecue.server.worker.model_worker import ModelWorker

    changes, problems = read_wire_values({"chunkReuse": -1, "draftMode": "ngram"})
    worker = ModelWorker(factory=lambda choice: pytest.fail("no model may load here"), load_at_connect=False)
    try:
        server = CodeCueServer(worker, CompletionConfig().with_values(changes), config_problems=problems)
        shown: list[str] = []
        server.show_message = lambda message, kind=None: shown.append(message)  # type: ignore[method-assign]
        options = asyncio.run(configure(server, {"chunkReuse": 128, "maxTokens": 0}))
        assert len(shown) == 1
        assert "chunkReuse (--chunk-reuse, [decoding] chunk_reuse): -1 is not an integer from 0 to 8192; " \
               "using the daemon's" in shown[0]
        assert "maxTokens: 0 is not an integer from 1 to 1024; using 64" in shown[0]
        # what was good in either applies: the hello's draft mode, the editor's chunk reuse
        assert options.decoding == {"chunk_reuse": 128}
        decoding = server.completion_config.decoding
        assert (decoding.draft_mode, decoding.chunk_reuse) == ("ngram", 128)
    finally:
        worker.shutdown()


# -- good values, and which place wins ---------------------------------------------------------------------
def test_an_editor_over_the_flags_over_config_toml_over_the_default(tmp_path, monkeypatch):
    _write_config(tmp_path, monkeypatch, '[decoding]\nchunk_reuse = 128\ndraft_mode = "ngram"\nk = 3\n')
    from_config = config_from_args(_parse())
    assert (from_config.decoding.chunk_reuse, from_config.decoding.draft_mode, from_config.decoding.k) == (
        128, "ngram", 3)
    flagged = config_from_args(_parse("--chunk-reuse", "32"))
    assert (flagged.decoding.chunk_reuse, flagged.decoding.draft_mode) == (32, "ngram")
    options, problems = parse_options({"chunkReuse": 16, "k": None})
    assert problems == []
    session = flagged.with_values(options.decoding)
    assert (session.decoding.chunk_reuse, session.decoding.k, session.decoding.draft_mode) == (16, None, "ngram")


def test_the_benchmark_lab_takes_the_flags_alone(tmp_path, monkeypatch):
    from codecue.models.flags import config_from_args as flags_only

    _write_config(tmp_path, monkeypatch, "[decoding]\nchunk_reuse = 128\n")
    assert flags_only(_parse()).decoding.chunk_reuse == DecodingSettings().chunk_reuse


def test_flags_round_trip_through_a_daemon_start_and_a_hello():
    args = _parse("--chunk-reuse", "0", "--min-confidence", "0.25", "--draft-mode", "model", "--target", " t.gguf ")
    config = config_from_args(args)
    assert (config.decoding.chunk_reuse, config.decoding.min_confidence, config.models.target) == (0, 0.25, "t.gguf")
    assert config_from_args(_parse(*given_model_flags(args))) == config
    changes, problems = read_wire_values(json.loads(json.dumps(given_model_values(args))))
    assert problems == [] and CompletionConfig().with_values(changes) == config


# -- the check itself ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("key", "value", "expected"), [
    ("maxTokens", True, "maxTokens: true is not an integer from 1 to 1024"),  # a bool is not a number
    ("temperature", float("nan"), "temperature: NaN is not a number from 0 to 2"),
    ("workAhead", "yes", 'workAhead: "yes" is not true or false'),
    ("languages", {"python": "yes", "go": False},
     'languages: {"python": "yes"} is not an object of language ids to true or false'),
    ("model.draft", "", 'model.draft (--draft, [models] draft): "" is not a model name or path'),
    ("debounceMs", "x" * 200, 'debounceMs: "' + "x" * 76 + "... is not an integer from 0 to 5000"),  # cut short
])
def test_each_kind_of_wrong_value_gets_one_message(key, value, expected):
    with pytest.raises(OptionError) as error:
        check(INIT[key], value)
    assert str(error.value) == expected


def test_good_values_come_back_as_the_option_holds_them():
    assert check(INIT["temperature"], 1) == 1.0 and isinstance(check(INIT["temperature"], 1), float)
    assert check(INIT["model.target"], " t.gguf ") == "t.gguf"
    assert check(INIT["k"], None) is None  # unset: the K authority decides
    with pytest.raises(OptionError):
        check(INIT["maxTokens"], None)  # None is a value only where the option has no other unset


# -- one table, the dataclasses' defaults, the clients ------------------------------------------------------
def test_the_documented_table_is_the_schema():
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    table = re.search(r"<!-- the options table:[^\n]*-->\n(.*?)<!-- end of the options table -->", text, re.S)
    assert table is not None, "docs/server.md lost its options table markers"
    assert table.group(1) == markdown_table(), "docs/server.md's options table is stale: python -m codecue.options"
    names = [row.split("|")[1].strip().strip("`") for row in table.group(1).splitlines()[2:]]
    assert names == [option.wire or option.toml_name for option in OPTIONS]


def _field_defaults(cls) -> dict[str, object]:
    return {f.name: f.default if f.default is not MISSING else f.default_factory() for f in fields(cls)
            if f.default is not MISSING or f.default_factory is not MISSING}


def test_the_schema_keeps_the_dataclasses_defaults():
    server, remote = _field_defaults(ServerOptions), _field_defaults(RemoteSettings)
    config = {**_field_defaults(ModelChoice), **_field_defaults(DecodingSettings)}
    for option in OPTIONS:
        if option.hello:
            assert config[option.name] == option.default, option.name
        elif option.toml and option.toml[0] == "remote":
            assert remote[option.name] == option.default, option.name
        else:
            assert server[option.name] == option.default, option.name
    assert set(TABLES["remote"]) == {f.name for f in fields(RemoteSettings)}


def test_the_clients_forward_the_schemas_options_under_its_names():
    top = {key.partition(".")[0] for key in INIT}
    settings_ts = (ROOT / "editor_clients" / "vscode" / "src" / "settings.ts").read_text(encoding="utf-8")
    body = settings_ts[settings_ts.index("export function initializationOptions"):]
    body = body[:body.index("\n}\n")]
    vscode = set(re.findall(r"\boptions\.(\w+) =", body))
    assert vscode == {"maxTokens", "temperature", "languages", "model"} and vscode <= top
    config_lua = (ROOT / "editor_clients" / "nvim" / "lua" / "codecue" / "config.lua").read_text(encoding="utf-8")
    nvim = set(re.findall(r"\binit\.(\w+) =", config_lua))
    assert nvim == {"maxTokens", "temperature", "model"} and nvim <= top

    # VS Code's settings UI holds a forwarded number to the server's range
    package = json.loads((ROOT / "editor_clients" / "vscode" / "package.json").read_text(encoding="utf-8"))
    properties = package["contributes"]["configuration"]["properties"]
    for key in ("maxTokens", "temperature"):
        setting, option = properties[f"codecue.{key}"], INIT[key]
        assert (setting["minimum"], setting["maximum"]) == (option.low, option.high), key
    for role in ("target", "draft"):
        assert f"codecue.model.{role}" in properties and f"model.{role}" in INIT
