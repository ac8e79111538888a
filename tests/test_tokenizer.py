"""A GGUF model's tokenizer: converted once with transformers, then read with the ``tokenizers`` library
alone (no transformers, no torch on a cold start's path), answering exactly as transformers does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from codecue.models.resolve import ModelSource
from codecue.models.tokenizer import FastTokenizer, load_tokenizer

PROBES = [
    "def mean(values: list[float]) -> float:\n    return sum(values) / len(values)\n",
    "<|fim_prefix|>import os\n\n\ndef walk(root):\n    <|fim_suffix|>\n<|fim_middle|>",
    "<|repo_name|>demo\n<|file_sep|>src/app.ts\nexport const answer = 42;\r\n\tconsole.log('x');",
    "  he\u0301llo wörld 😀  ﬁ ＡＢＣ ① Å\n\n\n    ",  # not NFC: transformers' normalizer must be kept
    "fn main() { let s = \"it's 1234567 o'clock\"; }<|endoftext|>trailing<|im_end|>",
    "",
]
NAMES = ["<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|file_sep|>", "<|fim_middle|>", "not-a-token-at-all"]


def assert_same(reference, fast: FastTokenizer) -> None:
    assert len(fast) == len(reference)
    assert (fast.eos_token_id, fast.unk_token_id) == (reference.eos_token_id, reference.unk_token_id)
    assert fast.all_special_ids == sorted(reference.all_special_ids)
    assert fast.get_vocab() == reference.get_vocab()
    assert [fast.convert_tokens_to_ids(n) for n in NAMES] == [reference.convert_tokens_to_ids(n) for n in NAMES]
    for text in PROBES:
        for special in (True, False):
            ids = reference.encode(text, add_special_tokens=special)
            assert fast.encode(text, add_special_tokens=special) == ids, text
            for skip in (True, False):
                assert fast.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def check_model(path: Path) -> None:
    source = ModelSource("gguf", path, path.name)
    first = load_tokenizer(source)  # converted from the GGUF file with transformers, and kept
    assert not isinstance(first, FastTokenizer) and hasattr(first, "backend_tokenizer")
    second = load_tokenizer(source)
    assert isinstance(second, FastTokenizer)
    assert_same(first, second)
    # The second load, as a cold start makes it, imports neither transformers nor torch.
    code = ("import sys; from pathlib import Path; from codecue.models.resolve import ModelSource; "
            "from codecue.models.tokenizer import load_tokenizer; "
            f"t = load_tokenizer(ModelSource('gguf', Path({str(path)!r}), 'm')); "
            "print(type(t).__name__, 'transformers' in sys.modules, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["FastTokenizer", "False", "False"], done.stderr[-2000:]


@pytest.fixture()
def own_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_gguf_tokenizer_is_read_without_transformers_after_its_conversion_and_answers_the_same(tmp_path, own_cache):
    from harness.tiny_gguf import build_tiny_gguf

    check_model(build_tiny_gguf(tmp_path / "tiny.gguf", seed=0))


@pytest.mark.realmodels
def test_the_shipped_models_tokenizer_read_without_transformers_answers_the_same(real_models, own_cache):
    check_model(Path(real_models[0].path))


def test_a_damaged_record_is_read_by_transformers_again(tmp_path, own_cache):
    from harness.tiny_gguf import build_tiny_gguf

    path = build_tiny_gguf(tmp_path / "tiny.gguf", seed=0)
    source = ModelSource("gguf", path, path.name)
    reference = load_tokenizer(source)
    [record] = own_cache.glob(f"tokenizers/*/{FastTokenizer.FILE}")
    record.write_text('{"backend": "not json', encoding="utf-8")
    again = load_tokenizer(source)  # transformers reads it, and keeps a good record for the next load
    assert not isinstance(again, FastTokenizer) and again.encode(PROBES[0]) == reference.encode(PROBES[0])
    assert isinstance(load_tokenizer(source), FastTokenizer)
