"""The llama.cpp backend's own behaviour (the shared protocol is in test_backend_conformance.py).

Runs on the tiny random GGUF from :mod:`harness.tiny_gguf`, which holds the same weights as the tiny
HF model, so llama.cpp can be checked against transformers directly. Tests that need the real default
models are marked ``realmodels``. Without llama.cpp or the models these tests skip, saying why, or fail
where ``CODECUE_REQUIRE_REAL_MODELS`` is set (harness.runtimes.need).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from codecue.backends import llamacpp
from codecue.errors import BackendUnavailable, CodeCueError, ModelError
from harness.runtimes import need, need_hardware, need_llama_cpp
from harness.tiny_models import SPECIAL_TOKENS

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "fn main() {\n    let v: Vec<i32> = Vec::new();\n}\n",
    "  weird   spacing\t\tand tabs\n\n\n",
    "unicode: café — π ≈ 3.14159 🙂\n",
    "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n    return y<|fim_middle|>",
]


needs_llama_cpp = pytest.mark.usefixtures("llama_cpp")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from harness.tiny_gguf import build_tiny_gguf
    from harness.tiny_models import build_tiny_model_dir

    root = tmp_path_factory.mktemp("llamacpp")
    return {"gguf": build_tiny_gguf(root / "tiny.gguf", seed=0), "hf": build_tiny_model_dir(root / "hf", seed=0)}


@pytest.fixture(scope="module")
def backend(tiny: dict[str, Path]):
    need_llama_cpp()
    b = llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=256)
    yield b
    b.close()


@pytest.fixture(scope="module")
def tokenizer():
    from harness.tiny_models import build_tokenizer

    return build_tokenizer()


# -- no llama.cpp needed ----------------------------------------------------------------------------


def test_physical_core_count_is_within_the_cpus_we_may_use() -> None:
    n = llamacpp.physical_core_count()
    assert 1 <= n <= len(os.sched_getaffinity(0))


def test_missing_llama_cpp_python_is_a_clear_backend_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(llamacpp, "_lib", None)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp...` raise ImportError
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cpp", None)
    with pytest.raises(BackendUnavailable) as info:
        llamacpp.LlamaCppBackend.load(tmp_path / "any.gguf")
    message = str(info.value)
    assert "pip install 'codecue[llamacpp]'" in message
    assert "\n" not in message
    assert isinstance(info.value, CodeCueError)


def test_draft_accounting_reads_acceptance_off_the_context() -> None:
    from codecue_bench.llamacpp_peers import CountingDraftModel

    counted = CountingDraftModel(lambda ids: [1, 2, 3])
    assert list(counted([7, 8])) == [1, 2, 3]
    counted([7, 8, 1, 2, 9])  # two draft tokens accepted, then the target's own token 9
    counted([7, 8, 1, 2, 9, 1, 2, 3, 4])  # all three accepted plus a bonus token
    counted([7, 8, 1, 2, 9, 1, 2, 3, 4, 5])  # none accepted
    stats = counted.stats()
    assert (stats["draft_calls"], stats["drafted"], stats["accepted"]) == (4.0, 9.0, 5.0)


def test_tiny_gguf_has_the_tiny_tokenizer(tiny: dict[str, Path], tokenizer) -> None:
    import gguf

    reader = gguf.GGUFReader(str(tiny["gguf"]))
    fields = reader.fields
    tokens = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in fields["tokenizer.ggml.tokens"].data]
    assert len(tokens) == len(tokenizer)
    vocab = tokenizer.get_vocab()
    assert all(vocab[token] == i for i, token in enumerate(tokens))
    fim_pre = fields["tokenizer.ggml.fim_pre_token_id"]
    assert int(fim_pre.parts[fim_pre.data[0]][0]) == tokenizer.convert_tokens_to_ids("<|fim_prefix|>")
    names = {t.name for t in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.1.attn_q.bias", "blk.1.ffn_down.weight"} <= names


# -- the tiny GGUF in llama.cpp ---------------------------------------------------------------------


@needs_llama_cpp
def test_loading_prints_nothing(tiny: dict[str, Path], capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    with llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=64) as b:
        b.forward([5, 6, 7])
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@needs_llama_cpp
def test_uses_the_physical_core_count_by_default(backend) -> None:
    assert backend.n_threads == llamacpp.physical_core_count()


@needs_llama_cpp
def test_tokenize_matches_the_hf_tokenizer(backend, tokenizer) -> None:
    for text in CORPUS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert backend.tokenize(text) == ids, text
        assert backend.detokenize(ids) == tokenizer.decode(ids), text


@needs_llama_cpp
def test_special_token_ids(backend, tokenizer) -> None:
    assert backend.eos_token_id == tokenizer.eos_token_id
    assert backend.is_end_of_generation(tokenizer.eos_token_id)
    assert not backend.is_end_of_generation(tokenizer.encode("def", add_special_tokens=False)[0])
    fim = backend.fim_token_ids
    assert fim == {
        "prefix": tokenizer.convert_tokens_to_ids("<|fim_prefix|>"),
        "suffix": tokenizer.convert_tokens_to_ids("<|fim_suffix|>"),
        "middle": tokenizer.convert_tokens_to_ids("<|fim_middle|>"),
        "pad": tokenizer.convert_tokens_to_ids("<|fim_pad|>"),
    }
    assert backend.tokenize(SPECIAL_TOKENS[1]) == [fim["prefix"]]
    assert len(backend.tokenize(SPECIAL_TOKENS[1], parse_special=False)) > 1


@needs_llama_cpp
def test_logits_match_transformers_on_the_same_weights(backend, tiny: dict[str, Path], tokenizer) -> None:
    """The GGUF conversion and llama.cpp's qwen2 graph compute the HF model's function."""
    from transformers import Qwen2ForCausalLM

    ids = tokenizer.encode("".join(CORPUS[:3]), add_special_tokens=False)
    backend.reset()
    ours = torch.as_tensor(backend.forward(ids))
    model = Qwen2ForCausalLM.from_pretrained(tiny["hf"], dtype=torch.float32).eval()
    with torch.inference_mode():
        reference = model(torch.tensor([ids])).logits[0]
    # llama.cpp keeps K/V in F16: measured max difference 2e-3 on logits of magnitude ~5.
    torch.testing.assert_close(ours, reference, atol=1e-2, rtol=0)
    assert torch.equal(ours.argmax(-1), reference.argmax(-1))


@needs_llama_cpp
def test_n_logits_returns_the_last_rows(backend, tokenizer) -> None:
    ids = tokenizer.encode(CORPUS[0] + CORPUS[1], add_special_tokens=False)
    backend.reset()
    full = torch.as_tensor(backend.forward(ids))
    backend.reset()
    last = torch.as_tensor(backend.forward(ids, n_logits=3))
    assert last.shape == (3, backend.vocab_size)
    assert backend.length == len(ids)
    torch.testing.assert_close(last, full[-3:], atol=1e-2, rtol=0)


@needs_llama_cpp
def test_inputs_longer_than_n_batch_are_split(tiny: dict[str, Path], backend, tokenizer) -> None:
    ids = tokenizer.encode("".join(CORPUS), add_special_tokens=False)
    backend.reset()
    whole = torch.as_tensor(backend.forward(ids))
    with llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=256, n_batch=8) as small_batches:
        assert small_batches.n_batch == 8 < len(ids)
        split = torch.as_tensor(small_batches.forward(ids))
        assert small_batches.length == len(ids)
        tail = small_batches.forward(ids[:3], n_logits=2)
    # Different batch splits run different kernels: measured up to 3.6e-3 on logits within ±5.3.
    torch.testing.assert_close(split, whole, atol=1e-2, rtol=0)
    assert tail.shape == (2, backend.vocab_size)


@needs_llama_cpp
def test_bad_input_is_refused_and_the_cache_kept(backend) -> None:
    backend.reset()
    backend.forward([10, 11, 12])
    with pytest.raises(ValueError, match="vocabulary"):
        backend.forward([13, backend.vocab_size])
    with pytest.raises(ValueError, match="context"):
        backend.forward([13] * backend.max_length)
    with pytest.raises(ValueError, match="at least one token"):
        backend.forward([])
    with pytest.raises(ValueError):
        backend.truncate(-1)
    assert backend.length == 3
    row = backend.forward([13])
    # numpy, not torch: a model process serving llama.cpp greedily never imports torch (engine/logits.py)
    assert isinstance(row, np.ndarray) and row.dtype == np.float32 and row.shape == (1, backend.vocab_size)


@needs_llama_cpp
def test_missing_and_corrupt_files_are_model_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        llamacpp.LlamaCppBackend.load(tmp_path / "absent.gguf")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00" * 64)
    with pytest.raises(ModelError, match="could not load"):
        llamacpp.LlamaCppBackend.load(corrupt)


@needs_llama_cpp
def test_a_closed_backend_refuses_work(tiny: dict[str, Path]) -> None:
    b = llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=64)
    b.close()
    b.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        b.forward([1])


@needs_llama_cpp
def test_peers_agree_with_each_other_and_with_the_backend(tiny: dict[str, Path], tmp_path: Path, tokenizer) -> None:
    """llama.cpp's own modes (the benchmark's peers) give the target's greedy output on the tiny model."""
    from codecue.backends.kv_cache import CachedSequence
    from codecue_bench.llamacpp_peers import LlamaCppPeers

    prompt = tokenizer.encode(CORPUS[0] * 3, add_special_tokens=False)
    with LlamaCppPeers(tiny["gguf"], tiny["gguf"], n_ctx=256) as peers:
        plain, plain_t = peers.target_only(prompt, 24, stop_ids=())
        lookup, lookup_t = peers.prompt_lookup(prompt, 24, stop_ids=())
        drafted, drafted_t = peers.draft_model(prompt, 24, stop_ids=(), draft_max=4, p_min=0.0)
    assert len(plain) == 24
    assert lookup == plain
    assert drafted == plain
    assert drafted_t["drafted"] > 0 and drafted_t["draft_calls"] > 0
    # The draft is the target itself (p_min 0): every settled draft token is accepted.
    assert drafted_t["accepted"] == drafted_t["drafted"]
    assert 0 <= lookup_t["accepted"] <= lookup_t["drafted"]
    for timings in (plain_t, lookup_t, drafted_t):
        assert timings["total_ms"] >= timings["ttft_ms"] > 0
        assert timings["new_tokens"] == 24

    with llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=256) as b:
        seq = CachedSequence(b)
        context = list(prompt)
        for _ in range(24):
            context.append(int(seq.sync(context)[-1].argmax()))
    assert context[len(prompt) :] == plain


# -- the real default models --------------------------------------------------------------------------


def _real_model(role: str) -> Path:
    from codecue.models.provision import is_pulled, model_path
    from codecue.models.registry import default_spec

    spec = default_spec(role)  # type: ignore[arg-type]
    need(is_pulled(spec), f"the default {role} model is not pulled (codecue models pull)")
    return model_path(spec)


@pytest.mark.realmodels
@pytest.mark.slow
@needs_llama_cpp
def test_real_draft_loads_quantized_and_predicts_code() -> None:
    path = _real_model("draft")
    with llamacpp.LlamaCppBackend.load(path, n_ctx=512) as b:
        assert b.vocab_size == 151936
        fim = b.fim_token_ids
        assert b.tokenize("<|fim_prefix|>") == [fim["prefix"]] and fim["prefix"] >= 151643
        prompt = b.tokenize("def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(")
        logits = b.forward(prompt)
        assert logits.shape == (len(prompt), b.vocab_size)
        assert b.detokenize([int(logits[-1].argmax())]).strip() == "n"


@needs_llama_cpp
def test_repack_switch_loads_the_same_model(tiny: dict[str, Path], backend, tokenizer) -> None:
    ids = tokenizer.encode(CORPUS[0], add_special_tokens=False)
    backend.reset()
    reference = torch.as_tensor(backend.forward(ids))
    with llamacpp.LlamaCppBackend.load(tiny["gguf"], n_ctx=64, repack=False) as plain_layout:
        assert plain_layout.repack is False
        torch.testing.assert_close(torch.as_tensor(plain_layout.forward(ids)), reference, atol=1e-2, rtol=0)


@needs_llama_cpp
def test_peers_without_repack_restore_llama_cpp_defaults(tiny: dict[str, Path], tokenizer) -> None:
    import llama_cpp.llama_cpp as lib

    from codecue_bench.llamacpp_peers import LlamaCppPeers

    original = lib.llama_model_default_params
    prompt = tokenizer.encode(CORPUS[0], add_special_tokens=False)
    with LlamaCppPeers(tiny["gguf"], n_ctx=128, repack=False) as peers:
        tokens, _ = peers.target_only(prompt, 8, stop_ids=())
    assert lib.llama_model_default_params is original
    assert lib.llama_model_default_params().use_extra_bufts  # llama.cpp's default is untouched
    with LlamaCppPeers(tiny["gguf"], n_ctx=128) as peers:
        assert peers.target_only(prompt, 8, stop_ids=())[0] == tokens


@needs_llama_cpp
def test_requantized_layout_is_made_once_atomically_and_computes_nearly_the_same(tiny: dict[str, Path], backend,
                                                                                 tokenizer, tmp_path) -> None:
    import shutil

    from codecue.models.requantize import derived_path, requantized

    source = tmp_path / "tiny.gguf"
    shutil.copy(tiny["gguf"], source)
    made = requantized(source, "q8_0", n_threads=1)
    assert made == derived_path(source, "q8_0") and made.is_file()
    assert not list(tmp_path.glob("*.partial"))
    assert made.stat().st_size < source.stat().st_size  # F32 tensors became 8-bit ones
    stamp = made.stat().st_mtime_ns
    assert requantized(source, "q8_0") == made and made.stat().st_mtime_ns == stamp  # cached, not made again
    ids = tokenizer.encode(CORPUS[0], add_special_tokens=False)
    backend.reset()
    reference = torch.as_tensor(backend.forward(ids))
    with llamacpp.LlamaCppBackend.load(made, n_ctx=64) as derived:
        logits = torch.as_tensor(derived.forward(ids))
    assert logits.shape == reference.shape
    assert not torch.equal(logits, reference)  # really another layout
    agree = (logits.argmax(-1) == reference.argmax(-1)).float().mean().item()
    assert agree >= 0.8, agree


@needs_llama_cpp
def test_layout_quality_compares_the_derived_file_with_its_source(tiny: dict[str, Path], tmp_path, monkeypatch):
    import shutil

    from codecue_bench import layouts

    source = tmp_path / "tiny.gguf"
    shutil.copy(tiny["gguf"], source)
    monkeypatch.setattr(layouts, "TOKENS_PER_FILE", 24)
    quality, ppl_source, ppl_derived = layouts.layout_quality(source, "q8_0")
    assert quality.tokens == 16 * 23  # every held-out file, teacher-forced
    assert ppl_source > 1 and ppl_derived > 1 and ppl_source != ppl_derived
    assert quality.perplexity_ratio == pytest.approx(ppl_derived / ppl_source, abs=1e-4)
    assert 0.8 <= quality.top1_agreement <= 1.0


_ROWS_PROBE = """
import json, sys
from codecue.backends.llamacpp import LlamaCppBackend
backend = LlamaCppBackend.load(sys.argv[1], n_ctx=256, repack=True, flash_attn=True)
prompt, run = list(range(10, 60)), [7, 99, 3, 250, 31, 64]
backend.forward(prompt, 1)
steps = [backend.forward([t], 1)[0].tolist() for t in run]
backend.truncate(len(prompt))
rows = backend.forward(run, len(run)).tolist()
print(json.dumps({"same": rows == steps, "differing_rows": sum(r != s for r, s in zip(rows, steps))}))
"""


def _rows_probe(model: Path, rowwise_max: str | None) -> dict:
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "GGML_AMX_ROWWISE_MAX"}
    if rowwise_max is not None:
        env["GGML_AMX_ROWWISE_MAX"] = rowwise_max  # read once per process: a child each
    done = subprocess.run([sys.executable, "-c", _ROWS_PROBE, str(model)], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_llama_cpp
def test_a_q4_0_verification_computes_each_row_as_a_one_token_step_on_amx(tmp_path):
    from codecue.backends.native_check import cpu_signature
    from codecue.models.requantize import requantized
    from harness.tiny_gguf import build_tiny_gguf

    need_hardware("amx_int8" in cpu_signature().split(),
                  "the amx-verify-rows kernel is compiled for CPUs with AMX only; others never run it")
    model = requantized(build_tiny_gguf(tmp_path / "tiny.gguf", seed=0, hidden_size=256), "q4_0")
    # A 6-token call's rows equal the one-token steps' rows bit for bit, on the patch's multi-row kernel as
    # on llama.cpp's own tiles (its path switched off): a wrong row, block or scale in the kernel would not.
    assert _rows_probe(model, None) == {"same": True, "differing_rows": 0}
    assert _rows_probe(model, "1") == {"same": True, "differing_rows": 0}
