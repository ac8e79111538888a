"""Quality of a derived weight layout against its source: ``python -m codecue.bench.layouts SOURCE LAYOUT``.

Teacher-forced over the held-out corpus (the first 768 tokens of each file): perplexity of both files and
the share of positions where both predict the same next token. These are the numbers
:data:`codecue.models.requantize.MEASURED_QUALITY` ships; they belong to the model, not to the machine.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from codecue.backends.llamacpp import LlamaCppBackend
from codecue.bench.points import corpus_files
from codecue.models.requantize import LayoutQuality, requantized

TOKENS_PER_FILE = 768


def teacher_forced(path: Path, texts: list[str]) -> tuple[float, list[torch.Tensor], int]:
    """Total negative log-likelihood, per-file argmax predictions, and the token count."""
    nll, predictions, count = 0.0, [], 0
    with LlamaCppBackend.load(path) as backend:
        for text in texts:
            ids = backend.tokenize(text)[:TOKENS_PER_FILE]
            backend.reset()
            logits = backend.forward(ids)[:-1].double()
            targets = torch.tensor(ids[1:])
            nll -= float(torch.log_softmax(logits, -1)[torch.arange(len(targets)), targets].sum())
            predictions.append(logits.argmax(-1))
            count += len(targets)
    return nll, predictions, count


def layout_quality(source: Path, layout: str) -> tuple[LayoutQuality, float, float]:
    """The derived layout's quality record, and the two perplexities."""
    texts = [path.read_text(encoding="utf-8") for path in corpus_files("heldout")]
    nll_source, predicted_source, count = teacher_forced(source, texts)
    nll_derived, predicted_derived, _ = teacher_forced(requantized(source, layout), texts)
    same = sum(int((a == b).sum()) for a, b in zip(predicted_source, predicted_derived, strict=True))
    ppl_source, ppl_derived = math.exp(nll_source / count), math.exp(nll_derived / count)
    return LayoutQuality(round(ppl_derived / ppl_source, 4), round(same / count, 4), count), ppl_source, ppl_derived


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="the GGUF file as shipped")
    parser.add_argument("layout", choices=["q4_0", "q8_0"])
    args = parser.parse_args()
    quality, ppl_source, ppl_derived = layout_quality(args.source.expanduser(), args.layout)
    print(f"perplexity {ppl_source:.4f} -> {ppl_derived:.4f} over {quality.tokens} tokens; {quality}")


if __name__ == "__main__":
    main()
