"""The command line: one model flag set for every command that runs a model, and ``serve`` passing it on."""

from __future__ import annotations

import pytest

from codecue.cli import SUBCOMMANDS, build_parser
from codecue.commands.common import given_model_values
from codecue.commands.serve import daemon_flags, model_config
from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice


def _parse(*argv: str):
    args = build_parser().parse_args(list(argv))
    if argv[0] == "bench":  # the benchmark's own parser reads what follows `bench`
        from codecue.commands import bench

        return bench.parse(args.arguments)[1]
    return args


@pytest.mark.parametrize("command", ["complete", "bench", "tune", "doctor", "serve"])
def test_every_model_command_takes_the_same_model_flags(command):
    args = _parse(command, *(["x.py", "--line", "0", "--character", "0"] if command == "complete" else []),
                  "--target", "t.gguf", "--draft", "d.gguf", "--backend", "torch", "--draft-backend", "llamacpp",
                  "--dtype", "bfloat16", "--draft-mode", "model", "--min-confidence", "0.25", "--draft-vocab", "full",
                  "--no-remote")
    from codecue.commands.common import config_from_args

    config = config_from_args(args)
    models, decoding = config.models, config.decoding
    assert (models.target, models.draft, models.backend, models.draft_backend, models.dtype, decoding.draft_mode,
            decoding.min_confidence, decoding.draft_vocab) == (
        "t.gguf", "d.gguf", "torch", "llamacpp", "bfloat16", "model", 0.25, "full")


def test_serve_takes_draft_backend_and_passes_it_to_the_models(make_completer):
    """In process, the worker loads the configuration the flags give; through the daemon, the flags it is
    started with and the session's hello carry it too."""
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    args = _parse("serve", "--in-process", "--backend", "torch", "--draft-backend", "llamacpp", "--no-remote")
    loaded: list[CompletionConfig] = []
    completer = make_completer()

    def factory(config: CompletionConfig):
        loaded.append(config)
        return completer

    worker = ModelWorker(model_config(args), factory, idle_unload_s=None)
    try:
        result = worker.submit(make_job(worker.default_config, "def add(a, b):\n    ", "\n", max_tokens=2))
        assert result.result(timeout=60) is not None
    finally:
        worker.shutdown()
    assert [(c.models.backend, c.models.draft_backend) for c in loaded] == [("torch", "llamacpp")]

    # Through the daemon: the flags it is started with parse back to the same configuration ...
    started = _parse("daemon", "start", *daemon_flags(args))
    assert model_config(started) == model_config(args)
    # ... and a daemon started with other defaults applies the session's hello.
    hello = given_model_values(args)
    assert hello["draftBackend"] == "llamacpp"
    assert CompletionConfig(ModelChoice(backend="llamacpp")).with_wire_values(hello).models.draft_backend == "llamacpp"


def test_serve_without_model_flags_leaves_the_daemon_its_defaults():
    args = _parse("serve")
    assert given_model_values(args) == {} and daemon_flags(args) == []
    daemon_default = CompletionConfig(ModelChoice(target="mine.gguf", backend="llamacpp"),
                                      DecodingSettings(draft_mode="ngram"))
    assert daemon_default.with_wire_values(given_model_values(args)) == daemon_default


def test_hello_values_of_the_wrong_type_are_reported_and_ignored():
    from codecue.options import read_wire_values

    base = CompletionConfig(ModelChoice(dtype="float32"), DecodingSettings(k=3))
    hello = {"k": "7", "dtype": 5, "minConfidence": True, "backend": "remote", "remote": ""}
    got = base.with_wire_values(hello)
    assert (got.decoding.k, got.models.dtype, got.decoding.min_confidence, got.models.backend,
            got.models.remote) == (3, "float32", 0.4, "auto", None)
    # Not silently: each bad value is one line (the daemon shows them to the editor at initialize).
    _, problems = read_wire_values(hello)
    assert [p.split(" ")[0] for p in problems] == ["k", "dtype", "minConfidence"]
    assert all(p.endswith("; using the daemon's") for p in problems)


def test_every_subcommand_is_wired():
    parser = build_parser()
    for name, (module_name, _) in SUBCOMMANDS.items():
        assert module_name == f"codecue.commands.{name}"
        assert parser.parse_args([name, *_required(name)])._module.__name__ == module_name


def _required(name: str) -> list[str]:
    return {"complete": ["x.py", "--line", "0", "--character", "0"], "explain": ["x.py", "--line", "0",
            "--character", "0"], "daemon": ["status"], "models": ["list"]}.get(name, [])
