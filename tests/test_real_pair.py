"""Short integration tests on the real default pair: speculative greedy == target-only greedy; a prompt
evaluated step by step (a rest's warm-up) gives the logits of one evaluated fresh, bit for bit."""

from __future__ import annotations

import pytest

from harness.runtimes import need_llama_cpp

pytestmark = [pytest.mark.realmodels, pytest.mark.slow]

PREFIX = '''import json
from pathlib import Path


def load_config(path: Path) -> dict:
    """Read a JSON config file and return it as a dict."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def save_config(path: Path, config: dict) -> None:
    """Write the config as JSON."""
'''
SUFFIX = "\n\ndef main() -> None:\n    config = load_config(Path('config.json'))\n    save_config(Path('out.json'), config)\n"


@pytest.mark.parametrize("draft_backend", ["torch", "llamacpp"])
def test_real_pair_speculative_greedy_equals_target_only(real_models, draft_backend):
    from codecue.completion import Completer
    from codecue.models.config import CompletionConfig, ModelChoice

    if draft_backend == "llamacpp":
        need_llama_cpp()
    c = Completer.load(CompletionConfig(ModelChoice(backend="torch", draft_backend=draft_backend, dtype="bfloat16")))
    prompt = c.build_prompt(PREFIX, SUFFIX)
    target_only = c.generate_ids(prompt, max_tokens=24, k=0)
    assert len(target_only.tokens) >= 4 and target_only.text.strip()
    for mode in ("model", "hybrid"):
        c.reset_caches()
        spec = c.generate_ids(prompt, max_tokens=24, k=4, draft_mode=mode)
        assert spec.tokens == target_only.tokens, (mode, spec.text, target_only.text)
        assert spec.stats.drafted > 0 and spec.stats.accepted > 0  # the real draft really guesses right


def test_real_target_warmed_step_by_step_gives_a_fresh_evaluations_logits(real_models):
    """What a rest shows is what a fresh evaluation shows: the warm-up evaluates a place's prompt in steps
    (of 64 tokens that a key stops part-way, ``INTERRUPTIBLE_STEP``; of 16 where calls cannot stop) but its
    last, a fresh evaluation in calls of 512, never fewer than 16 tokens a call, and both evaluate the last
    token alone (``kv_cache.LAST_ALONE_FROM``): the quantized target, loaded as the server loads it, then
    gives the same logits bit for bit."""
    import numpy as np

    need_llama_cpp()
    from codecue.backends import CachedSequence
    from codecue.models.config import CompletionConfig
    from codecue.server.worker.model_worker import load_completer

    completer = load_completer(CompletionConfig())
    try:
        backend = completer.target.backend
        prompt = completer.tokenizer.encode((PREFIX + SUFFIX) * 4, add_special_tokens=False)[:600]
        backend.reset()
        fresh = np.asarray(CachedSequence(backend).sync(prompt, 1))[-1].copy()
        for step in (None, 16):  # a rest's warm-up, step by step: as the server runs it, and in 16-token steps
            completer.reset_caches()
            completer.warm(prompt, lambda: False, step)
            assert np.array_equal(np.asarray(completer.target.sync(prompt, 1))[-1], fresh), step
    finally:
        completer.close()
