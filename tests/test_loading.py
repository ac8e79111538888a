"""Loading is one pass: a configuration's models are resolved once, planned, loaded as planned; the server
loads again only for other models, never for another request's decoding settings."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest

from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.tuning.k_choice import CostModel
from codecue.tuning.machine_costs import MachineCosts, store_machine_costs
from harness.runtimes import need_llama_cpp

CHEAP = CostModel(draft_cost=0.05, verify_per_token=0.0)  # drafting pays: the plan serves speculative


@pytest.fixture()
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Measured costs, native-check verdicts and converted tokenizers in a throwaway directory."""
    monkeypatch.setenv("CODECUE_MACHINE_COSTS", str(tmp_path / "costs.json"))
    monkeypatch.setenv("CODECUE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture()
def gguf_pair(tmp_path: Path) -> tuple[Path, Path]:
    from harness.tiny_gguf import build_tiny_gguf

    return build_tiny_gguf(tmp_path / "target.gguf", seed=0), build_tiny_gguf(tmp_path / "draft.gguf", seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("served", ["speculative as shipped", "target-only, target re-quantized here"])
def test_a_load_resolves_each_model_once_and_checks_each_file_once(served, gguf_pair, isolated_cache, monkeypatch):
    need_llama_cpp()
    from codecue.completion import Completer
    from codecue.loading import resolve as loading
    from codecue.loading.plan import make_plan
    from codecue.models import requantize, resolve

    target, draft = gguf_pair
    if served == "speculative as shipped":
        store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, CHEAP), str(target), str(draft))
    else:  # the target re-quantized to Q4_0 steps twice as fast; no K pays with the shipped draft
        monkeypatch.setattr(requantize, "measured_quality",
                            lambda: {(target.name, "q4_0"): requantize.LayoutQuality(1.01, 0.95, 100)})
        dear = CostModel(0.6, 0.7, (1.0, 1.9, 2.7, 3.4, 4.1))
        store_machine_costs(MachineCosts("llamacpp", 80.0, 10.0, dear), str(target), str(draft))
        derived = requantize.derived_path(target, "q4_0")
        store_machine_costs(MachineCosts("llamacpp", 40.0, 9.0, None), str(derived), None)
    chosen = make_plan(str(target), str(draft)).chosen

    resolved_roles: list[str] = []
    checked_files: Counter[Path] = Counter()
    resolve_model, check_file = resolve.resolve_model, resolve.resolve_gguf_file

    def counted_resolve(ref, role, **kwargs):
        resolved_roles.append(role)
        return resolve_model(ref, role, **kwargs)

    def counted_check(path):
        checked_files[path] += 1
        return check_file(path)

    monkeypatch.setattr(loading, "resolve_model", counted_resolve)
    for module in (resolve, loading):
        monkeypatch.setattr(module, "resolve_gguf_file", counted_check)
    config = CompletionConfig(ModelChoice(target=str(target), draft=str(draft)), DecodingSettings(draft_vocab="full"))
    completer = Completer.load(config)
    try:
        assert sorted(resolved_roles) == ["draft", "target"]  # once per model, the plan applied included
        assert set(checked_files.values()) == {1}  # each file, a layout made here included, checked once
        assert completer.runtime == chosen.runtime == "llamacpp"
        served_target = chosen.target_file(str(target))
        served_draft = chosen.draft_file(str(draft)) if chosen.speculative else None
        assert completer.names == (served_target, served_draft)
        assert set(checked_files) == {Path(p) for p in (str(target), str(draft), served_target)}
        if served == "speculative as shipped":
            assert chosen.speculative and completer.draft is not None and not completer.target_only
        else:
            assert not chosen.speculative and chosen.layout == "q4_0"
            # The plan's target-only choice holds for every request, one that asks to draft included.
            result = completer.complete("def add(a, b):\n    ", "\n", max_tokens=4,
                                        decoding=DecodingSettings(draft_mode="hybrid", k=3))
            assert completer.draft is None and result.stats.drafted == 0
    finally:
        completer.close()


def test_the_worker_loads_again_only_for_what_loading_depends_on(make_completer):
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    loads: list[CompletionConfig] = []

    def factory(config: CompletionConfig):
        loads.append(config)
        return make_completer(draft="target" if config.decoding.uses_draft_model else None,
                              draft_vocab=config.decoding.draft_vocab)

    base = CompletionConfig(ModelChoice("t"), DecodingSettings(min_confidence=0.0, draft_vocab="full"))

    def with_decoding(**changes) -> CompletionConfig:
        return dataclasses.replace(base, decoding=dataclasses.replace(base.decoding, **changes))

    worker = ModelWorker(base, factory, idle_unload_s=None, measure_costs=False)
    try:
        def run(config: CompletionConfig):
            return worker.submit(make_job(config, "def add(a, b):\n    ", "\n", max_tokens=4)).result(60)

        # Decoding settings travel with each request, on the models loaded.
        assert run(with_decoding(k=2)).stats.k == 2
        assert run(with_decoding(k=0, first_text_ms=0)).stats.k == 0
        assert run(with_decoding(k=3, draft_mode="model", min_confidence=0.2)).stats.k == 3
        assert len(loads) == 1 and worker.holds(with_decoding(k=5)) and worker.loaded == with_decoding(k=2)
        # What loading depends on loads again: other models, no draft model, another draft head.
        run(dataclasses.replace(base, models=ModelChoice("other")))
        run(with_decoding(draft_mode="ngram"))
        run(with_decoding(draft_mode="none"))  # neither ngram nor none loads a draft model: no load
        run(with_decoding(draft_vocab="code"))
        assert [(c.models.target, c.decoding.draft_mode, c.decoding.draft_vocab) for c in loads] == [
            ("t", "hybrid", "full"), ("other", "hybrid", "full"), ("t", "ngram", "full"), ("t", "hybrid", "code")]
    finally:
        worker.shutdown()


def test_a_configuration_is_frozen_and_a_hello_changes_a_copy():
    base = CompletionConfig(ModelChoice(target="mine.gguf"), DecodingSettings(k=3))
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.models.target = "other.gguf"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.decoding.k = 4  # type: ignore[misc]
    got = base.with_wire_values({"draft": "d.gguf", "draftMode": "ngram", "minConfidence": 0.1, "firstTextMs": 0})
    assert got.models == ModelChoice(target="mine.gguf", draft="d.gguf")
    assert got.decoding == DecodingSettings(draft_mode="ngram", k=3, min_confidence=0.1, first_text_ms=0)
    assert base == CompletionConfig(ModelChoice(target="mine.gguf"), DecodingSettings(k=3))
    assert got.to_json()["draftMode"] == "ngram" and got.load_key() != base.load_key()


LOAD_WITHOUT_TORCH = """
import sys
import codecue.backends
codecue.backends._loadable = lambda name: False  # a machine without NVIDIA's driver
from codecue.models.config import CompletionConfig, ModelChoice
from codecue.loading.load import load_models
loaded = load_models(CompletionConfig(ModelChoice(target=sys.argv[1], draft=sys.argv[2])))
print(type(loaded.target).__name__, type(loaded.tokenizer).__name__, codecue.backends.cuda_available(),
      "torch" in sys.modules)
from codecue.completion import Completer
from codecue.models.config import DecodingSettings
completer = Completer.from_loaded(loaded, DecodingSettings(draft_mode="hybrid", k=3))
stats = [completer.complete("def add(a, b):\\n    return a + b\\n\\ndef sub(a, b):\\n    return ", "", max_tokens=12,
                             draft_mode=mode).stats for mode in ("model", "hybrid", "ngram", "none")]
print(stats[0].model_rounds > 0, "torch" in sys.modules)
"""


def test_planning_loading_and_greedy_completion_on_gguf_weights_import_no_torch(gguf_pair, isolated_cache):
    """Torch costs 1.5-2.5 s of CPU to import on a 2-core machine, most of a cold start: a model process
    serving llama.cpp greedily never imports it — not asking for CUDA on a machine without NVIDIA's driver,
    not llama.cpp's backend, not the tokenizer (checks cached, tokenizer converted), not the engine
    generating with a draft model, lookup, both or neither (llama.cpp's logits are numpy arrays)."""
    need_llama_cpp()
    import subprocess
    import sys

    runs = []
    for _ in range(2):  # the first start measures the attention kernels and converts the tokenizer, once
        done = subprocess.run([sys.executable, "-c", LOAD_WITHOUT_TORCH, *map(str, gguf_pair)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout.split())
    assert runs[1] == ["LlamaCppBackend", "FastTokenizer", "False", "False", "True", "False"]
