"""llama.cpp's llama-server as a bench peer: started on loopback, greedy over CodeCue's own prompt ids, the
same tokens as CodeCue's llama.cpp decode of the same model; the ratio lines the speed bench prints."""

from __future__ import annotations

from pathlib import Path

from codecue_bench.llama_server import LlamaServer, ServerConfig, standard_configs
from codecue_bench.report import server_ratio_lines
from codecue_bench.runner import RunRecord
from harness.runtimes import need_llama_cpp, need_llama_server


def test_configurations_name_the_flags_users_pass(tmp_path):
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    configs = {c.label: c for c in standard_configs(target, draft, suffix=", Q4_0")}
    assert set(configs) == {"llama-server target, Q4_0", "llama-server -md draft, Q4_0", "llama-server ngram, Q4_0"}
    argv = configs["llama-server -md draft, Q4_0"].argv(Path("/bin/llama-server"), 8080, 2, 4096)
    assert argv[argv.index("-md") + 1] == str(draft)
    assert argv[argv.index("--spec-type") + 1] == "draft-simple" and "--spec-draft-n-max" in argv
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # loopback only
    assert "--spec-default" in configs["llama-server ngram, Q4_0"].argv(Path("x"), 1, 2, 64)
    assert "--draft-max" not in " ".join(argv)  # removed from llama-server


def test_ratio_lines_compare_with_the_fastest_server_configuration_per_point():
    def rec(point: str, method: str, tpot: float) -> RunRecord:
        return RunRecord(point, "python", method, [1], "x", 10.0, tpot, 100.0, 1)

    records = [rec("a", "target", 100), rec("a", "default", 80), rec("a", "server-target", 90),
               rec("a", "server-ngram", 85), rec("b", "target", 100), rec("b", "default", 100),
               rec("b", "server-target", 110), rec("b", "server-ngram", 120)]
    lines = server_ratio_lines(records, ["target", "default", "server-target", "server-ngram"])
    default_vs_best = next(line for line in lines if line.startswith("default vs the best"))
    assert "1.081" in default_vs_best  # median of 85/80 and 110/100
    own = next(line for line in lines if line.startswith("default vs CodeCue's target-only"))
    assert "1.125" in own and "lowest 1.000" in own  # median of 100/80 and 100/100


def test_llama_server_decodes_the_prompt_ids_greedily_as_codecue_does(tmp_path):
    """Same model, same prompt ids: llama-server's greedy tokens are CodeCue's llama.cpp greedy tokens."""
    need_llama_cpp()
    need_llama_server()
    from codecue.backends.llamacpp import LlamaCppBackend
    from harness.tiny_gguf import build_tiny_gguf

    model = build_tiny_gguf(tmp_path / "tiny.gguf")
    backend = LlamaCppBackend.load(model, n_ctx=512, repack=False)
    try:
        prompt = backend.tokenize("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n")
        expected: list[int] = []
        logits = backend.forward(prompt)
        for _ in range(12):
            expected.append(int(logits[-1].argmax()))
            logits = backend.forward([expected[-1]])
    finally:
        backend.close()
    with LlamaServer(ServerConfig("tiny", model), n_ctx=512) as server:
        assert server.url.startswith("http://127.0.0.1:")
        done = server.complete(prompt, 12)
        again = server.complete(prompt, 12)
    assert done.tokens[: len(expected)] == expected[: len(done.tokens)] and len(done.tokens) > 0
    assert again.tokens == done.tokens and done.tpot_ms > 0
    assert server.process is None  # stopped on leaving the block


def test_speed_bench_runs_the_server_peers_beside_codecue(tmp_path, capsys):
    """`codecue bench speed` starts llama-server for each server method, on loopback, decodes the same
    prompt ids greedily (identical to CodeCue's target-only on the same file), prints the ratio lines
    against the best server configuration, and stops the servers when the run ends."""
    import json

    from codecue.cli import main
    from harness.tiny_gguf import build_tiny_gguf

    need_llama_cpp()
    need_llama_server()
    target, draft = build_tiny_gguf(tmp_path / "t.gguf", seed=0), build_tiny_gguf(tmp_path / "d.gguf", seed=1)
    src = tmp_path / "sample.py"
    src.write_text("import os\n\n\ndef add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"path": str(src), "line": 8, "character": 4}) + "\n")
    out = tmp_path / "speed.json"
    assert main(["bench", "speed", "--points", str(points), "--target", str(target), "--draft", str(draft),
                 "--backend", "llamacpp", "--max-tokens", "8", "--prompt-tokens", "64",
                 "--methods", "default", "server-target", "server-ngram", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    runs = {r["method"]: r for r in data["runs"]}
    assert set(runs) == {"target", "default", "server-target", "server-ngram"}
    assert runs["server-target"]["identical"] and runs["server-target"]["tpot_ms"] > 0
    assert any(line.startswith("default vs the best llama-server configuration") for line in data["peer_ratios"])
    assert "llama-server" in capsys.readouterr().out
    assert [cmd for cmd in _command_lines() if str(target) in cmd] == []  # every server stopped with the run


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        try:
            lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
