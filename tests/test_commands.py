"""The command line: one model flag set for every command that runs a model, and ``serve`` passing it on."""

from __future__ import annotations

import pytest

from codecue.cli import SUBCOMMANDS, build_parser
from codecue.commands.common import given_model_values
from codecue.commands.serve import daemon_flags, model_config
from codecue.models.config import ModelConfig


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
    assert (config.target, config.draft, config.backend, config.draft_backend, config.dtype, config.draft_mode,
            config.min_confidence, config.draft_vocab) == (
        "t.gguf", "d.gguf", "torch", "llamacpp", "bfloat16", "model", 0.25, "full")


def test_serve_takes_draft_backend_and_passes_it_to_the_models(make_completer):
    """In process, the worker loads the configuration the flags give; through the daemon, the flags it is
    started with and the session's hello carry it too."""
    from codecue.server.worker import GenerationJob, ModelWorker

    args = _parse("serve", "--in-process", "--backend", "torch", "--draft-backend", "llamacpp", "--no-remote")
    loaded: list[ModelConfig] = []
    completer = make_completer()

    def factory(config: ModelConfig):
        loaded.append(config)
        return completer

    worker = ModelWorker(model_config(args), factory, idle_unload_s=None)
    try:
        result = worker.submit(GenerationJob(worker.default_model, "def add(a, b):\n    ", "\n", max_tokens=2))
        assert result.result(timeout=60) is not None
    finally:
        worker.shutdown()
    assert [(c.backend, c.draft_backend) for c in loaded] == [("torch", "llamacpp")]

    # Through the daemon: the flags it is started with parse back to the same configuration ...
    started = _parse("daemon", "start", *daemon_flags(args))
    assert model_config(started) == model_config(args)
    # ... and a daemon started with other defaults applies the session's hello.
    hello = given_model_values(args)
    assert hello["draftBackend"] == "llamacpp"
    assert ModelConfig(backend="llamacpp").with_wire_values(hello).draft_backend == "llamacpp"


def test_serve_without_model_flags_leaves_the_daemon_its_defaults():
    args = _parse("serve")
    assert given_model_values(args) == {} and daemon_flags(args) == []
    daemon_default = ModelConfig(target="mine.gguf", backend="llamacpp", draft_mode="ngram")
    assert daemon_default.with_wire_values(given_model_values(args)) == daemon_default


def test_hello_values_of_the_wrong_type_are_ignored():
    base = ModelConfig(k=3, dtype="float32")
    got = base.with_wire_values({"k": "7", "dtype": 5, "minConfidence": True, "backend": "remote", "remote": ""})
    assert (got.k, got.dtype, got.min_confidence, got.backend, got.remote) == (3, "float32", 0.4, "auto", None)


def test_every_subcommand_is_wired():
    parser = build_parser()
    for name, (module_name, _) in SUBCOMMANDS.items():
        assert module_name == f"codecue.commands.{name}"
        assert parser.parse_args([name, *_required(name)])._module.__name__ == module_name


def _required(name: str) -> list[str]:
    return {"complete": ["x.py", "--line", "0", "--character", "0"], "explain": ["x.py", "--line", "0",
            "--character", "0"], "daemon": ["status"], "models": ["list"]}.get(name, [])
