"""``codecue bench layouts``: quality of a derived weight layout against the file it derives from.

Teacher-forced over the held-out corpus (the first 768 tokens of each file): perplexity of both files and
the share of positions where both predict the same next token. The record belongs to the model, not to the
machine: ``--json`` writes it as a raw report, and the one CodeCue ships
(``codecue/models/layout_quality.json``) is what :func:`codecue.models.requantize.measured_quality` reads to
decide which layouts the runtime plan may serve.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from codecue.backends.llamacpp import LlamaCppBackend
from codecue.models.requantize import LAYOUT_CHOICES, LayoutQuality, requantized
from codecue.models.resolve import resolve_model
from codecue_bench.points import corpus_files
from codecue_bench.report import report_meta, report_path, write_report

TOKENS_PER_FILE = 768


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("layouts", nargs="+", choices=LAYOUT_CHOICES, help="the layouts to measure")
    parser.add_argument("--target", help="the GGUF file as shipped (default: the configured target)")
    parser.add_argument("--json", dest="json_out", type=Path, help="write the raw report here")


def teacher_forced(path: Path, texts: list[str]) -> tuple[float, list[torch.Tensor], int]:
    """Total negative log-likelihood, per-file argmax predictions, and the token count."""
    nll, predictions, count = 0.0, [], 0
    with LlamaCppBackend.load(path) as backend:
        for text in texts:
            ids = backend.tokenize(text)[:TOKENS_PER_FILE]
            backend.reset()
            logits = torch.as_tensor(backend.forward(ids)[:-1]).double()
            targets = torch.tensor(ids[1:])
            nll -= float(torch.log_softmax(logits, -1)[torch.arange(len(targets)), targets].sum())
            predictions.append(logits.argmax(-1))
            count += len(targets)
    return nll, predictions, count


def layout_quality(source: Path, layout: str) -> tuple[LayoutQuality, float, float]:
    """``source`` re-quantized to ``layout`` against ``source`` over the held-out corpus: the quality record
    and the two perplexities."""
    texts = [path.read_text(encoding="utf-8") for path in corpus_files("heldout")]
    nll_source, predicted_source, count = teacher_forced(source, texts)
    nll, predicted, _ = teacher_forced(requantized(source, layout), texts)
    same = sum(int((a == b).sum()) for a, b in zip(predicted_source, predicted, strict=True))
    ppl_source, ppl = math.exp(nll_source / count), math.exp(nll / count)
    return LayoutQuality(round(ppl / ppl_source, 4), round(same / count, 4), count), ppl_source, ppl


def run(args: argparse.Namespace) -> int:
    source = resolve_model(args.target, "target")
    rows = []
    for layout in args.layouts:
        quality, ppl_source, ppl = layout_quality(source.path, layout)
        rows.append({"model": report_path(source.path), "layout": layout, "perplexity_source": round(ppl_source, 4),
                     "perplexity_derived": round(ppl, 4), "perplexity_ratio": quality.perplexity_ratio,
                     "top1_agreement": quality.top1_agreement, "tokens": quality.tokens,
                     "keeps_quality": quality.keeps_quality})
        print(f"{source.path.name} as {layout.upper()}: perplexity {ppl_source:.4f} -> {ppl:.4f} over "
              f"{quality.tokens} tokens (x{quality.perplexity_ratio}), top-1 agreement {quality.top1_agreement:.2%}"
              f"{'' if quality.keeps_quality else ', NOT within the quality bound'}")
    served = {"source": source.path, **{f"as {layout}": requantized(source.path, layout) for layout in args.layouts}}
    write_report(args.json_out, report_meta("layouts", args.typed_argv, served), {
        "corpus": [report_path(path) for path in corpus_files("heldout")], "tokens_per_file": TOKENS_PER_FILE,
        "summary": rows})
    return 0
