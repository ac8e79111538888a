"""Short integration tests on the real default pair: speculative greedy == target-only greedy; a prompt
evaluated step by step (a rest's warm-up), and after a jump's window, gives the logits of one evaluated fresh,
bit for bit."""

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
        text = completer.tokenizer.encode((PREFIX + SUFFIX) * 8, add_special_tokens=False)
        for length in (600, 1030):  # 1030: a fresh evaluation's calls of 512, 256 and 261 tokens
            prompt = text[:length]
            backend.reset()
            fresh = np.asarray(CachedSequence(backend).sync(prompt, 1))[-1].copy()
            for step in (None, 16):  # a rest's warm-up, step by step: as the server runs it, and in 16-token steps
                completer.reset_caches()
                completer.warm(prompt, lambda: False, step)
                assert np.array_equal(np.asarray(completer.target.sync(prompt, 1))[-1], fresh), (length, step)
    finally:
        completer.close()


def test_real_target_after_a_rest_past_a_jumps_window_gives_a_fresh_evaluations_logits(real_models):
    """The acceptance case: a jump's short window evaluated first, then the rest's full prompt (``fresh``),
    stopped once by a request that uses the window (it loads the window back), then again to its end:
    the target's logits are a fresh evaluation's bit for bit. Evaluated beside the window's entries, with
    the window's runs shifted in and refreshed, they part in the last bits."""
    import numpy as np

    need_llama_cpp()
    from codecue.backends import CachedSequence
    from codecue.models.config import CompletionConfig
    from codecue.server.worker.model_worker import load_completer

    body = "".join(f"def handler_{i}(request, limit={i * 7}):\n    items = fetch(request, 'kind_{i}')\n"
                   f"    return [x for x in items if x.size < limit]\n\n\n" for i in range(24))
    prefix, suffix = PREFIX + body + "def handler_last(request):\n    ", "\n" + SUFFIX + body
    completer = load_completer(CompletionConfig())
    try:
        seq = completer.target
        full = completer.build_prompt(prefix, suffix, full=True)
        seq.backend.reset()
        fresh = np.asarray(CachedSequence(seq.backend).sync(full, 1))[-1].copy()
        completer.reset_caches()
        completer.prefill_ms_per_token = 15.0  # the window a jump gets where 1.5 s affords 100 tokens
        completer.warm_context(prefix, suffix, within_ms=1500, cancelled=lambda: False)
        window = list(seq.tokens)
        assert len(window) < len(full) / 2
        completer.warm_context(prefix, suffix, fresh=True, cancelled=lambda: len(seq.tokens) > len(full) / 2)
        assert [saved.tokens for saved in seq.saved] == [window]
        key = completer.build_prompt(prefix, suffix)  # a request there: the window, loaded back
        assert completer.generate_ids(key, max_tokens=1, k=0).stats.prefilled_tokens <= 1
        completer.warm_context(prefix, suffix, fresh=True, cancelled=lambda: False)
        assert seq.exact_length == len(full) - 1
        assert np.array_equal(np.asarray(seq.sync(full, 1))[-1], fresh)
    finally:
        completer.close()
