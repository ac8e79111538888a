"""Tiny random-weight models for tests: fast, deterministic, no downloads.

``build_tiny_model_dir(path, seed)`` writes a Hugging Face model directory (Qwen2 architecture, a small
byte-level BPE tokenizer with Qwen's FIM special tokens). Two models built with the same ``vocab_seed``
share a tokenizer, so they can pair as target and draft; a different weight ``seed`` gives an unrelated
draft whose guesses are almost always rejected.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|im_start|>",
    "<|im_end|>",
]

_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nfor i in range(10):\n    print(i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "function add(a, b) {\n  return a + b;\n}\nconst xs = [1, 2, 3].map((x) => x * 2);\n",
    "func main() {\n\tfmt.Println(\"hello\")\n}\n",
    "fn main() {\n    let v: Vec<i32> = Vec::new();\n    println!(\"{}\", v.len());\n}\n",
    "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
    "public class Main {\n    public static void main(String[] args) {\n        System.out.println(1);\n    }\n}\n",
    "# comment: the quick brown fox jumps over the lazy dog\n\"\"\"docstring\"\"\"\n",
]


def build_tokenizer(vocab_size: int = 384):
    """A deterministic byte-level BPE tokenizer with Qwen-style special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )


def build_tiny_model_dir(
    path: str | Path,
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    vocab_size: int = 384,
    logit_scale: float = 8.0,
) -> Path:
    """Write a tiny random Qwen2 model + tokenizer to ``path`` and return it.

    ``logit_scale`` multiplies the output head so that the model's distributions are peaked like a
    trained model's rather than uniform (greedy decoding then has no near-ties).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
