"""The exllamav2 backend's adapter logic, on the CPU, against a stand-in ``exllamav2`` module.

The stand-in (:func:`make_fake_exllamav2`) keeps exllamav2's low-level API as the backend uses it
(``ExLlamaV2Config(dir)``, ``ExLlamaV2(config)``, ``ExLlamaV2Cache(model, batch_size, max_seq_len, lazy)``,
``load_autosplit(cache)``, ``forward(ids, cache, preprocess_only=, last_id_only=)`` returning FP16 logits
padded to a multiple of 32, ``cache.current_seq_len``) and a cache that behaves like a real one: slots past
``current_seq_len`` keep stale entries until overwritten, so a backend that forgot to roll back would read
them. Its logits are a pure function of the token prefix, so rollback and chunking can be checked exactly.
The real library runs in ``scripts/gpu_check.sh`` on a CUDA machine and in the conformance suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import types
import zlib
from pathlib import Path

import pytest
import torch

from codecue.backends.kv_cache import CachedSequence
from codecue.errors import BackendUnavailable, CodeCueError, ModelError

REPO = Path(__file__).resolve().parents[1]
HEAD_PADDING = 32  # the stand-in pads its output head like exllamav2 does for vocabularies % 32 != 0


def model_salt(model_dir: str | Path) -> int:
    """Two model directories give unrelated logits; one directory loaded twice gives the same ones."""
    return zlib.crc32(Path(model_dir).name.encode())


def prefix_logits(prefix: list[int], vocab: int, salt: int = 0) -> torch.Tensor:
    """Deterministic logits for the position after ``prefix`` (what a real model's output depends on)."""
    seed = zlib.crc32(torch.tensor(prefix, dtype=torch.int64).numpy().tobytes(), salt)
    return torch.randn(vocab, generator=torch.Generator().manual_seed(seed)) * 4


def make_fake_exllamav2() -> types.ModuleType:
    module = types.ModuleType("exllamav2")
    module.__version__ = "0.3.2+fake"
    module.models = []

    class ExLlamaV2Config:
        def __init__(self, model_dir: str | None = None) -> None:
            self.max_batch_size = 1
            self.max_input_len = 2048
            self.max_seq_len = 2048
            self.compat_overrides = False
            self.no_flash_attn = self.no_xformers = self.no_sdpa = False  # exllamav2 reads EXLLAMA_NO_* here
            if model_dir is not None:
                self.model_dir = model_dir
                self.prepare()

        def prepare(self) -> None:
            path = Path(self.model_dir)
            assert (path / "config.json").exists(), "Can't find " + str(path / "config.json")
            config = json.loads((path / "config.json").read_text())
            if not list(path.glob("*.safetensors")):
                raise ValueError(f" ## No .safetensors files found in {path}")
            self.vocab_size = config["vocab_size"]
            self.rotary_embedding_base = float(config.get("rope_theta", 10000.0))  # what exllamav2 0.3.2 reads
            self.num_hidden_layers = config["num_hidden_layers"]
            self.max_seq_len = config.get("max_position_embeddings", 2048)

        def arch_compat_overrides(self, quiet: bool = False, warn_only: bool = False) -> None:
            self.compat_overrides = True

    class ExLlamaV2Cache:
        def __init__(self, model, batch_size: int = 1, max_seq_len: int = -1, copy_from=None, lazy: bool = False,
                     num_key_value_heads=None, fixed_device=None) -> None:
            assert batch_size == 1
            self.model = model
            self.batch_size = batch_size
            self.max_seq_len = max_seq_len if max_seq_len != -1 else model.config.max_seq_len
            self.lazy = lazy
            self.current_seq_len = 0
            self.slots: list[int | None] = [None] * self.max_seq_len

    class ExLlamaV2:
        def __init__(self, config, lazy_load: bool = False, archparams=None) -> None:
            self.config = config
            self.loaded = False
            self.calls: list[dict] = []
            self.fail_with: BaseException | None = None
            self.fail_after_chunk: BaseException | None = None
            module.models.append(self)

        def load_autosplit(self, cache, reserve_vram=None, last_id_only: bool = False, callback=None,
                           callback_gen=None, progress: bool = False) -> None:
            assert cache.lazy, "load_autosplit allocates the cache: it must be created with lazy=True"
            print(f" -- Loading model: {self.config.model_dir}")  # exllamav2 talks on stdout
            self.loaded = True

        def unload(self) -> None:
            self.loaded = False

        def forward(self, input_ids, cache=None, input_mask=None, preprocess_only: bool = False,
                    last_id_only: bool = False, loras=None, return_last_state: bool = False,
                    position_offsets=None, abort_event=None, cpu_logits: bool = False, **kwargs):
            assert self.loaded
            assert input_ids.dtype == torch.long and input_ids.dim() == 2 and input_ids.shape[0] == 1
            q_len = input_ids.shape[1]
            past = cache.current_seq_len
            assert past + q_len <= cache.max_seq_len, "Total sequence length exceeds cache size in model.forward"
            self.calls.append({"past": past, "q_len": q_len, "preprocess_only": preprocess_only,
                               "last_id_only": last_id_only})
            if self.fail_with is not None:
                exc, self.fail_with = self.fail_with, None
                raise exc
            # Like exllamav2, process in chunks of max_input_len and advance the cache after each chunk.
            rows = []
            for begin in range(0, q_len, self.config.max_input_len):
                chunk = input_ids[0, begin : begin + self.config.max_input_len].tolist()
                for i, token in enumerate(chunk):
                    cache.slots[cache.current_seq_len + i] = token
                if not preprocess_only:
                    # exllamav2 0.3.x without flash-attn or xformers: its SDPA path passes no causal mask, so
                    # in a pass of several tokens each row also sees the tokens after it.
                    unmasked = len(chunk) > 1 and not self.config.no_sdpa
                    for i in range(len(chunk)):
                        end = cache.current_seq_len + i + 1
                        seen = cache.slots[: cache.current_seq_len + len(chunk)] + [-end] if unmasked else cache.slots[:end]
                        rows.append(prefix_logits(seen, self.config.vocab_size, model_salt(self.config.model_dir)))
                cache.current_seq_len += len(chunk)
                if self.fail_after_chunk is not None:
                    exc, self.fail_after_chunk = self.fail_after_chunk, None
                    raise exc
            if preprocess_only:
                return None
            if last_id_only:
                rows = rows[-1:]
            logits = torch.stack(rows)
            padding = torch.full((len(rows), HEAD_PADDING), -65504.0)
            return torch.cat([logits, padding], dim=1)[None].half()

    module.ExLlamaV2Config = ExLlamaV2Config
    module.ExLlamaV2Cache = ExLlamaV2Cache
    module.ExLlamaV2 = ExLlamaV2
    return module


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A machine with a CUDA GPU (80 GiB free) and exllamav2 installed, as far as the backend can tell."""
    fake = make_fake_exllamav2()
    monkeypatch.setitem(sys.modules, "exllamav2", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 1024**3, 141 * 1024**3))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    return fake


@pytest.fixture
def backend(fake_gpu, tiny_dirs):
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    return ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=256)


def reference_logits(tokens: list[int], backend) -> torch.Tensor:
    """What the stand-in model gives for every position of ``tokens`` evaluated fresh (FP16, like the GPU)."""
    salt = model_salt(backend.path)
    return torch.stack([prefix_logits(tokens[: i + 1], backend.vocab_size, salt)
                        for i in range(len(tokens))]).half().float()


# -- loading -------------------------------------------------------------------------------------------


def test_load_builds_a_batch_one_cache_of_the_requested_length(backend, fake_gpu) -> None:
    model = fake_gpu.models[-1]
    assert backend.name == "exllamav2"
    assert backend.max_length == 256 and backend._cache.max_seq_len == 256
    assert model.config.max_seq_len == 256  # RoPE tables are sized from the config
    assert model.config.max_input_len == 256  # min(MAX_INPUT_LEN=512, max_seq_len)
    assert model.config.compat_overrides
    assert backend.vocab_size == json.loads((Path(backend.path) / "config.json").read_text())["vocab_size"]
    assert backend.length == 0


def test_exllamav2_output_goes_to_stderr_not_the_protocol_stream(fake_gpu, tiny_dirs, capsys) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=256)
    captured = capsys.readouterr()
    assert captured.out == "" and " -- Loading model:" in captured.err


def test_multi_token_passes_are_causal_without_flash_attn(backend) -> None:
    """A verification pass must give the rows that one-token steps give: exllamav2's SDPA path (what runs
    without flash-attn) has no causal mask, so the backend runs its masked matmul attention instead."""
    tokens = [5, 9, 2, 7, 7, 3, 11]
    batch = backend.forward(tokens, n_logits=len(tokens))
    backend.reset()
    steps = torch.cat([backend.forward([token]) for token in tokens])
    assert backend.model.config.no_sdpa
    torch.testing.assert_close(batch, steps, atol=0, rtol=0)
    torch.testing.assert_close(batch, reference_logits(tokens, backend), atol=0, rtol=0)


def test_context_is_capped_at_the_models_limit(fake_gpu, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    limit = json.loads((tiny_dirs["target"] / "config.json").read_text())["max_position_embeddings"]
    backend = ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=limit * 2)
    assert backend.max_length == limit


def test_rope_theta_written_the_transformers_5_way_reaches_exllamav2(fake_gpu, tiny_dirs, tmp_path) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    model_dir = tmp_path / "qwen-like"
    shutil.copytree(tiny_dirs["target"], model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.pop("rope_theta", None)
    config["rope_parameters"] = {"rope_theta": 1000000.0, "rope_type": "default"}
    (model_dir / "config.json").write_text(json.dumps(config))
    assert ExLlamaV2Backend.load(model_dir, 256).model.config.rotary_embedding_base == 1000000.0
    config["rope_theta"] = 500000.0  # written the 4.x way: exllamav2 reads it itself
    (model_dir / "config.json").write_text(json.dumps(config))
    assert ExLlamaV2Backend.load(model_dir, 256).model.config.rotary_embedding_base == 500000.0


def test_a_gguf_file_is_refused_with_the_conversion_hint(fake_gpu, tmp_path) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ModelError, match="codecue models convert"):
        ExLlamaV2Backend.load(gguf)


def test_a_directory_exllamav2_rejects_gives_a_model_error(fake_gpu, tmp_path, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    broken = tmp_path / "no-weights"
    broken.mkdir()
    (broken / "config.json").write_text((tiny_dirs["target"] / "config.json").read_text())
    with pytest.raises(ModelError, match="No .safetensors files found") as info:
        ExLlamaV2Backend.load(broken)
    assert "\n" not in str(info.value)


# -- forward, n_logits, rollback ---------------------------------------------------------------------------


def test_forward_returns_float32_cpu_logits_without_the_head_padding(backend) -> None:
    tokens = [5, 9, 17, 33, 2]
    logits = backend.forward(tokens)
    assert logits.shape == (5, backend.vocab_size)
    assert logits.dtype == torch.float32 and logits.device.type == "cpu"
    assert backend.length == 5
    torch.testing.assert_close(logits, reference_logits(tokens, backend))


def test_n_logits_feeds_the_head_only_for_the_rows_asked(backend, fake_gpu) -> None:
    model = fake_gpu.models[-1]
    tokens = list(range(3, 40))
    rows = backend.forward(tokens, n_logits=3)
    assert rows.shape == (3, backend.vocab_size)
    torch.testing.assert_close(rows, reference_logits(tokens, backend)[-3:])
    assert [(c["past"], c["q_len"], c["preprocess_only"], c["last_id_only"]) for c in model.calls] == [
        (0, 34, True, False), (34, 3, False, False)]
    assert backend.length == len(tokens)


def test_n_logits_zero_only_fills_the_cache(backend, fake_gpu) -> None:
    out = backend.forward([4, 5, 6], n_logits=0)
    assert out.shape == (0, backend.vocab_size)
    assert backend.length == 3
    assert [c["preprocess_only"] for c in fake_gpu.models[-1].calls] == [True]


def test_bad_n_logits_and_empty_input_are_refused(backend) -> None:
    with pytest.raises(ValueError):
        backend.forward([])
    with pytest.raises(ValueError):
        backend.forward([1, 2], n_logits=3)
    assert backend.length == 0


def test_rollback_through_current_seq_len_equals_a_fresh_prefill(backend) -> None:
    prompt, first, second = [7, 8, 9, 10], [11, 12, 13], [21, 22]
    backend.forward(prompt + first)
    backend.truncate(len(prompt))
    assert backend.length == len(prompt) and backend._cache.current_seq_len == len(prompt)
    after_rollback = backend.forward(second)
    torch.testing.assert_close(after_rollback, reference_logits(prompt + second, backend)[len(prompt):])


def test_truncate_past_the_end_is_a_no_op_and_reset_empties(backend) -> None:
    backend.forward([1, 2, 3])
    backend.truncate(10)
    assert backend.length == 3
    with pytest.raises(ValueError):
        backend.truncate(-1)
    backend.reset()
    assert backend.length == 0


def test_prefill_longer_than_max_input_len_is_chunked_by_exllamav2(fake_gpu, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import MAX_INPUT_LEN, ExLlamaV2Backend

    backend = ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=2048)
    tokens = [(i * 7) % 300 + 1 for i in range(MAX_INPUT_LEN + 100)]
    rows = backend.forward(tokens, n_logits=2)
    assert backend.length == len(tokens)
    torch.testing.assert_close(rows, reference_logits(tokens, backend)[-2:])


def test_context_overflow_is_refused_before_touching_the_cache(backend) -> None:
    backend.forward(list(range(1, 251)))
    with pytest.raises(ValueError, match="exceed the context of 256"):
        backend.forward(list(range(1, 10)))
    assert backend.length == 250
    with pytest.raises(ValueError):
        CachedSequence(backend).sync([5] * 257)


def test_a_failure_part_way_leaves_the_cache_where_it_was(fake_gpu, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    backend = ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=2048)
    backend.forward([1, 2, 3])
    fake_gpu.models[-1].fail_after_chunk = KeyboardInterrupt()  # after exllamav2 advanced the cache by a chunk
    with pytest.raises(KeyboardInterrupt):
        backend.forward([1 + i % 300 for i in range(699)])  # two chunks of exllamav2's 512
    assert backend.length == 3


def test_cached_sequence_reuses_prefixes_over_this_backend(backend) -> None:
    seq = CachedSequence(backend, prefill_chunk=16)
    prompt = list(range(10, 50))
    seq.sync(prompt)
    rows = seq.sync(prompt[:30] + [99, 98, 97], n_logits=2)
    assert seq.reused_tokens == 30
    torch.testing.assert_close(rows, reference_logits(prompt[:30] + [99, 98, 97], backend)[-2:])


def test_a_second_cache_over_the_same_weights_is_independent(backend, fake_gpu) -> None:
    other = backend.with_new_cache()
    assert other.model is backend.model and other._cache is not backend._cache
    assert not other._cache.lazy  # allocated now: the weights are already loaded
    backend.forward([1, 2, 3, 4])
    other.forward([9])
    assert backend.length == 4 and other.length == 1
    torch.testing.assert_close(other.forward([8]), reference_logits([9, 8], backend)[-1:])


def test_greedy_speculative_equals_target_only_with_a_self_draft(backend, tiny_tokenizer) -> None:
    from codecue.engine.proposers import DraftModelProposer
    from codecue.engine.sampling import Sampling
    from codecue.engine.speculative import GenerationParams, generate

    prompt = [12, 40, 41, 7, 99]

    def run(proposer, k):
        backend.reset()
        return generate(CachedSequence(backend), proposer, prompt, GenerationParams(max_new_tokens=30, k=k),
                        decode=tiny_tokenizer.decode)

    reference = run(None, 0)
    draft = backend.with_new_cache()
    speculative = run(DraftModelProposer(CachedSequence(draft), Sampling()), 5)
    assert speculative.tokens == reference.tokens
    assert speculative.stats.acceptance_rate == 1.0 and speculative.stats.rounds < 30 / 3


# -- out of memory -------------------------------------------------------------------------------------------


def test_cuda_oom_during_a_request_clears_the_cache_and_raises_a_user_error(backend, fake_gpu, monkeypatch) -> None:
    from codecue.backends.exllamav2 import GPUOutOfMemory

    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    backend.forward([1, 2, 3])
    fake_gpu.models[-1].fail_with = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    with pytest.raises(GPUOutOfMemory) as info:
        backend.forward([4, 5])
    assert isinstance(info.value, CodeCueError) and "\n" not in str(info.value)
    assert info.value.backend is backend  # so a caller can tell the draft's OOM from the target's
    assert backend.length == 0 and emptied and backend.oom_count == 1
    # ...and the backend keeps serving: a CachedSequence notices the lost cache and starts over.
    seq = CachedSequence(backend)
    seq.tokens = [1, 2, 3]  # what it believed was cached
    rows = seq.sync([1, 2, 3, 4, 5], n_logits=1)
    torch.testing.assert_close(rows, reference_logits([1, 2, 3, 4, 5], backend)[-1:])


def test_an_oom_reported_by_the_extension_as_runtime_error_is_recognised(backend, fake_gpu) -> None:
    from codecue.backends.exllamav2 import GPUOutOfMemory

    fake_gpu.models[-1].fail_with = RuntimeError("CUDA error: out of memory")
    with pytest.raises(GPUOutOfMemory):
        backend.forward([1])
    fake_gpu.models[-1].fail_with = RuntimeError("some other failure")
    with pytest.raises(RuntimeError, match="some other failure"):
        backend.forward([1])


def test_close_unloads_the_weights(backend, fake_gpu) -> None:
    backend.close()
    assert not fake_gpu.models[-1].loaded


# -- VRAM planning ---------------------------------------------------------------------------------------------

GIB = 1024**3
# Qwen2.5-Coder-1.5B and -0.5B (their config.json), weights as FP16 safetensors.
TARGET_1_5B = dict(num_layers=28, num_kv_heads=2, head_dim=128, hidden_size=1536, intermediate_size=8960,
                   vocab_size=151936, weight_file_bytes=3_087_467_144, tied_embeddings=True)
DRAFT_0_5B = dict(num_layers=24, num_kv_heads=2, head_dim=64, hidden_size=896, intermediate_size=4864,
                  vocab_size=151936, weight_file_bytes=988_097_824, tied_embeddings=True)


def test_kv_cache_bytes_is_two_tensors_per_layer() -> None:
    from codecue.backends.vram import ModelShape, kv_cache_bytes

    shape = ModelShape(**TARGET_1_5B)
    # 2 (K and V) x 28 layers x 2 heads x 128 dims x 4096 positions x 2 bytes = 112 MiB
    assert kv_cache_bytes(shape, 4096) == 2 * 28 * 2 * 128 * 4096 * 2 == 112 * 1024**2


def test_footprint_moves_the_embedding_to_the_cpu_and_copies_a_tied_head() -> None:
    from codecue.backends.vram import MAX_INPUT_LEN, ModelShape, estimate_footprint

    shape = ModelShape(**TARGET_1_5B)
    fp = estimate_footprint(shape, 4096)
    embedding = 151936 * 1536 * 2
    assert fp.weights == 3_087_467_144 - embedding + embedding
    assert fp.cache == 112 * 1024**2
    assert fp.scratch == MAX_INPUT_LEN * 151936 * 6 + MAX_INPUT_LEN * 8960 * 2 * 2 * 2
    untied = ModelShape(**{**TARGET_1_5B, "tied_embeddings": False})
    assert estimate_footprint(untied, 4096).weights == 3_087_467_144 - embedding
    fp32 = ModelShape(**{**TARGET_1_5B, "weight_file_bytes": 2 * 3_087_467_144, "weights_dtype_bytes": 4,
                         "tied_embeddings": False})
    assert estimate_footprint(fp32, 4096).weights == 3_087_467_144 - embedding  # loaded as FP16


def test_plan_loads_both_when_they_fit() -> None:
    from codecue.backends.vram import ModelShape, plan_vram

    plan = plan_vram(ModelShape(**TARGET_1_5B), ModelShape(**DRAFT_0_5B), 4096, free_bytes=24 * GIB)
    assert plan.target_fits and plan.load_draft
    assert plan.needed_for_target < plan.needed_for_both < 24 * GIB
    assert 3 * GIB < plan.needed_for_both < 8 * GIB  # ~4.8 GiB: 3.5 + 1.2 GiB, plus margin


def test_plan_drops_the_draft_when_only_the_target_fits() -> None:
    from codecue.backends.vram import ModelShape, plan_vram

    target, draft = ModelShape(**TARGET_1_5B), ModelShape(**DRAFT_0_5B)
    just_target = plan_vram(target, None, 4096, free_bytes=64 * GIB).needed_for_target
    plan = plan_vram(target, draft, 4096, free_bytes=just_target + 1)
    assert plan.target_fits and not plan.load_draft
    assert "running target-only" in plan.message and "draft" in plan.message
    assert not plan_vram(target, draft, 4096, free_bytes=just_target - 1).target_fits


def test_plan_grows_with_the_context() -> None:
    from codecue.backends.vram import ModelShape, kv_cache_bytes, plan_vram

    target, draft = ModelShape(**TARGET_1_5B), ModelShape(**DRAFT_0_5B)
    short = plan_vram(target, draft, 2048, free_bytes=100 * GIB)
    long = plan_vram(target, draft, 32768, free_bytes=100 * GIB)
    grown = kv_cache_bytes(target, 32768 - 2048) + kv_cache_bytes(draft, 32768 - 2048)
    assert long.target.total + long.draft.total - short.target.total - short.draft.total == grown
    assert not plan_vram(target, draft, 32768, free_bytes=short.needed_for_both).load_draft


def test_model_shape_is_read_from_config_json_and_file_sizes(tiny_dirs) -> None:
    from codecue.backends.vram import ModelShape

    shape = ModelShape.from_dir(tiny_dirs["target"])
    config = json.loads((tiny_dirs["target"] / "config.json").read_text())
    assert (shape.num_layers, shape.num_kv_heads, shape.hidden_size, shape.vocab_size) == (
        config["num_hidden_layers"], config["num_key_value_heads"], config["hidden_size"], config["vocab_size"])
    assert shape.head_dim == config["hidden_size"] // config["num_attention_heads"]
    assert shape.weight_file_bytes == sum(f.stat().st_size for f in tiny_dirs["target"].glob("*.safetensors")) > 0
    assert shape.weights_dtype_bytes == 4  # the tiny test models are saved in float32


def test_load_refuses_a_model_that_does_not_fit(fake_gpu, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend, InsufficientVRAM

    with pytest.raises(InsufficientVRAM, match="does not fit on the GPU"):
        ExLlamaV2Backend.load(tiny_dirs["target"], max_seq_len=1024, free_bytes=100 * 1024**2)
    assert fake_gpu.models == []  # refused before exllamav2 built anything


def test_load_pair_runs_target_only_when_the_draft_does_not_fit(fake_gpu, tiny_dirs, caplog) -> None:
    from codecue.backends.exllamav2 import load_pair
    from codecue.backends.vram import ModelShape, plan_vram

    target_shape = ModelShape.from_dir(tiny_dirs["target"])
    room_for_target = plan_vram(target_shape, None, 1024, free_bytes=GIB).needed_for_target + 1
    with caplog.at_level("WARNING", logger="codecue.backends.exllamav2"):
        target, draft, plan = load_pair(tiny_dirs["target"], tiny_dirs["unrelated"], 1024, free_bytes=room_for_target)
    assert target.length == 0 and draft is None and not plan.load_draft
    warnings = [r for r in caplog.records if "target-only" in r.getMessage()]
    assert len(warnings) == 1
    target, draft, plan = load_pair(tiny_dirs["target"], tiny_dirs["unrelated"], 1024, free_bytes=8 * GIB)
    assert draft is not None and plan.load_draft


# -- what is missing, and the lazy import ----------------------------------------------------------------------


def test_missing_cuda_and_exllamav2_give_one_line_naming_both(monkeypatch, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delitem(sys.modules, "exllamav2", raising=False)
    monkeypatch.setattr("codecue.backends.exllamav2._exllamav2_installed", lambda: False)
    with pytest.raises(BackendUnavailable) as info:
        ExLlamaV2Backend.load(tiny_dirs["target"])
    message = str(info.value)
    assert "\n" not in message
    assert "CUDA" in message and "exllamav2 is not installed" in message
    assert "pip install 'codecue[cuda]'" in message and "nvcc" in message


def test_missing_cuda_alone_is_named_without_importing_exllamav2(fake_gpu, monkeypatch, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(BackendUnavailable, match="CUDA") as info:
        ExLlamaV2Backend.load(tiny_dirs["target"])
    assert "not installed" not in str(info.value)
    assert fake_gpu.models == []


def test_an_extension_that_fails_to_build_is_a_clear_error(monkeypatch, tiny_dirs) -> None:
    from codecue.backends.exllamav2 import ExLlamaV2Backend

    class BrokenFinder:
        """exllamav2 is installed, but importing it fails the way a failed JIT build does."""

        def find_spec(self, name, path=None, target=None):
            if name != "exllamav2":
                return None
            import importlib.machinery

            return importlib.machinery.ModuleSpec(name, self)

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            raise RuntimeError("Error building extension 'exllamav2_ext': nvcc: not found\nlong compiler log")

    monkeypatch.delitem(sys.modules, "exllamav2", raising=False)
    monkeypatch.setattr(sys, "meta_path", [BrokenFinder(), *sys.meta_path])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(BackendUnavailable) as info:
        ExLlamaV2Backend.load(tiny_dirs["target"])
    message = str(info.value)
    assert "could not be loaded: Error building extension 'exllamav2_ext': nvcc: not found" in message
    assert "\n" not in message and "nvcc" in message


def test_importing_codecue_never_imports_exllamav2(tmp_path) -> None:
    """A planted ``exllamav2`` records any import; the CLI, the backends and create_backend must not do one."""
    marker = tmp_path / "imported"
    planted = tmp_path / "site" / "exllamav2"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    code = ("import codecue.backends, codecue.backends.exllamav2, codecue.backends.vram, codecue.models.exl2,"
            "codecue.commands.models, codecue.cli;"
            "codecue.cli.build_parser(); import sys; print('exllamav2' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(REPO)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False" and not marker.exists()
    # ...and the planted module is importable in that environment, so the check above could have failed.
    out = subprocess.run([sys.executable, "-c", "import exllamav2"], env=env, timeout=60)
    assert out.returncode == 0 and marker.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the CPU-only error path cannot be shown")
def test_complete_with_the_exllamav2_backend_on_a_cpu_machine_is_one_clear_line(tiny_dirs, tmp_path, capsys) -> None:
    from codecue.cli import main

    source = tmp_path / "hello.py"
    source.write_text("def add(a, b):\n    return ")
    code = main(["complete", str(source), "--line", "1", "--character", "11", "--backend", "exllamav2",
                 "--target", str(tiny_dirs["target"]), "--draft-mode", "none", "--max-tokens", "4"])
    err = capsys.readouterr().err
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("codecue: error: the exllamav2 backend cannot run here")
    assert "CUDA" in lines[0] and "pip install 'codecue[cuda]'" in lines[0]
    assert "Traceback" not in err


# -- scripts/gpu_check: the table logic, end to end on the CPU -------------------------------------------------


def load_gpu_check():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_runs_every_step_for_exllamav2_on_the_stand_in(fake_gpu, tmp_path, capsys) -> None:
    gpu_check = load_gpu_check()
    out = tmp_path / "out"
    assert gpu_check.main(["all", "--device", "cpu", "--tiny", "--backends", "exllamav2", "--work",
                           str(tmp_path / "models"), "--out", str(out), "--reps", "2", "--new-tokens", "16"]) == 0
    results = out / "gpu_check"
    conformance = json.loads((results / "conformance-exllamav2.json").read_text())
    assert conformance["counts"]["passed"] == len(conformance["results"]) >= 15, conformance["results"]
    speed = json.loads((results / "speed-exllamav2.json").read_text())
    assert set(speed["costs_ms"]) == {"prefill_per_token", "target_step", "draft_step",
                                      *(f"verify_{k + 1}" for k in range(1, 9))}
    assert all(value > 0 for value in speed["costs_ms"].values())
    self_draft, draft = speed["generation"]["self_draft"], speed["generation"]["draft"]
    assert self_draft["acceptance"] == 1.0 and self_draft["identical"]
    assert draft["acceptance"] < 0.5 and draft["identical"]  # lossless even when (almost) every draft is wrong
    table = (out / "gpu_check.md").read_text()
    assert table.strip() in capsys.readouterr().out  # printed as well as written
    n_passed = conformance["counts"]["passed"]
    assert "| exllamav2 fp16 |" in table and f"{n_passed} passed, 0 failed" in table
    assert all(f"verify K+1 = {k + 1} tokens (K = {k})" in table for k in range(1, 9))
    assert "acc 1.00" in table


@pytest.mark.slow
def test_gpu_check_sh_dry_run_writes_the_table(tmp_path) -> None:
    env = {**os.environ, "GPU_CHECK_WORK": str(tmp_path / "work"), "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), "--dry-run", str(tmp_path / "out")],
                         capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "| | torch cpu fp32 | exllamav2 |" in table
    conformance_row = next(line for line in table.splitlines() if line.startswith("| conformance suite"))
    assert re.search(r"\b(1[5-9]|[2-9]\d) passed, 0 failed, 0 errors", conformance_row), conformance_row
    if not torch.cuda.is_available():
        assert conformance_row.endswith("| n/a |")
        assert "- exllamav2: exllamav2 needs a CUDA GPU; torch sees none" in table
    step_row = next(line for line in table.splitlines() if line.startswith("| target step"))
    assert float(step_row.split("|")[2]) > 0
