"""torch backend specifics: dtype choice, weight-only int8, the single-row padding, the restricted head."""

from __future__ import annotations

import pytest
import torch

from codecue.backends.torch_backend import (
    TorchBackend,
    WeightOnlyInt8Linear,
    resolve_dtype,
    single_row_matmul_is_slow,
)
from codecue.errors import BackendUnavailable, ModelError

IDS = list(range(10, 40))


def test_auto_dtype_is_a_measured_float_type():
    assert resolve_dtype("auto", "cpu") in (torch.float32, torch.bfloat16)
    assert resolve_dtype("bf16", "cpu") is torch.bfloat16
    assert isinstance(single_row_matmul_is_slow(torch.float32, 64, 128), bool)
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8", "cpu")


def test_int8_weight_only_target_agrees_with_bf16(tiny_dirs):
    bf16 = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="bfloat16", pad_single_row=False)
    int8 = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="int8")
    linears = [m for m in int8.model.modules() if isinstance(m, WeightOnlyInt8Linear)]
    assert linears and all(m.weight.dtype == torch.int8 for m in linears)
    a, b = bf16.forward(IDS), int8.forward(IDS)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9
    assert torch.allclose(a, b, atol=0.5)


def test_single_row_padding_gives_the_same_logits(tiny_dirs):
    plain = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32", pad_single_row=False)
    padded = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32", pad_single_row=True)
    plain.forward(IDS[:-1])
    padded.forward(IDS[:-1])
    one_a, one_b = plain.forward(IDS[-1:]), padded.forward(IDS[-1:])
    assert one_b.shape == one_a.shape == (1, plain.vocab_size)
    assert torch.allclose(one_a, one_b, atol=1e-4)
    assert padded.length == plain.length == len(IDS)


def test_restricted_head_scores_a_subset_in_order(tiny_dirs):
    b = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
    full = b.forward(IDS)
    b.truncate(0)
    subset = [5, 3, 100, 7]
    b.restrict_vocab(subset)
    part = b.forward(IDS, n_logits=2)
    assert part.shape == (2, 4) and b.vocab_size == full.shape[1]
    assert torch.allclose(part, full[-2:, subset], atol=1e-4)
    b.restrict_vocab(None)
    b.truncate(0)
    assert b.forward(IDS, n_logits=1).shape == (1, full.shape[1])


def test_truncate_then_forward_equals_fresh_prefill(tiny_dirs):
    b = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
    b.forward(IDS + [1, 2, 3])
    b.truncate(len(IDS) - 4)
    again = b.forward(IDS[-4:])
    fresh = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32").forward(IDS)
    assert torch.allclose(again, fresh[-4:], atol=1e-4)


def test_errors_are_clear(tmp_path):
    with pytest.raises(ModelError, match=str(tmp_path)):
        TorchBackend.from_pretrained(tmp_path, dtype="float32")
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailable, match="CUDA"):
            TorchBackend.from_pretrained(tmp_path, device="cuda")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("context", [5, 90])
def test_verification_rows_are_bit_identical_to_one_token_steps(tiny_dirs, dtype, context):
    """Batch invariance: a row scored inside a K+1-token verification equals the same row scored by a
    one-token step, bit for bit — what makes speculative greedy equal target-only greedy in bf16 too.

    fp32 on the CPU: torch's fp32 matmul (MKL) sums differently for different row counts (only 2 and 3
    rows agree, measured), so there the rows agree to rounding, not bit for bit."""
    torch.manual_seed(context)
    prompt = torch.randint(3, 300, (context,)).tolist()
    tokens = torch.randint(3, 300, (9,)).tolist()
    b = TorchBackend.from_pretrained(tiny_dirs["target"], dtype=dtype)
    b.forward(prompt, n_logits=1)
    steps = torch.cat([b.forward([t]) for t in tokens])
    b.truncate(context)
    for k in (1, 4, 8):  # verifications of different lengths
        block = b.forward(tokens[: k + 1])
        if dtype == "bfloat16":
            assert torch.equal(block, steps[: k + 1]), f"K={k}: max diff {(block - steps[: k + 1]).abs().max()}"
        else:
            assert torch.allclose(block, steps[: k + 1], atol=1e-4, rtol=0)
        b.truncate(context)


def test_batch_invariance_can_be_turned_off(tiny_dirs):
    b = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32", batch_invariant=False)
    assert b.model.config._attn_implementation != "codecue_rowwise"
    b2 = TorchBackend.from_pretrained(tiny_dirs["target"], dtype="float32")
    assert b2.model.config._attn_implementation == "codecue_rowwise"
    assert torch.allclose(b.forward(IDS), b2.forward(IDS), atol=1e-4)  # same model, other kernels
