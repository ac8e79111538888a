"""Prompt layouts that keep the KV cache while typing, project context chunks, post-processing and work
ahead (warm-up, prefetch) that never delays a real request."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
import torch

from codecue.backends.kv_cache import CachedSequence
from codecue.context.chunks import ChunkPool, query_around
from codecue.engine.fim import FILE_SEP, MIDDLE_LINES, PromptBudget, build_fim_prompt, build_fim_text
from codecue.engine.postprocess import suffix_repeat_cut, tidy_completion, whole_lines


class CountingBackend:
    """Holds token ids as its 'cache' and counts every token it evaluates."""

    name = "counting"

    def __init__(self, vocab: int = 200_000) -> None:
        self.tokens: list[int] = []
        self.vocab = vocab

    @property
    def vocab_size(self) -> int:
        return self.vocab

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def max_length(self) -> int:
        return 1 << 20

    def forward(self, token_ids: Sequence[int], n_logits: int | None = None) -> torch.Tensor:
        self.tokens.extend(token_ids)
        return torch.zeros(len(token_ids) if n_logits is None else n_logits, 4)

    def truncate(self, length: int) -> None:
        del self.tokens[length:]

    def reset(self) -> None:
        self.tokens = []


SOURCE = "".join(f"def step_{i}(state):\n    state.value_{i} = compute(state, {i})\n    return state\n\n"
                 for i in range(60))


def _fed_by_keystroke(tokenizer, layout: str, suffix_tokens: int = 128) -> tuple[int, int]:
    """Tokens evaluated for the prompt after one typed character at a cursor in the middle of SOURCE,
    with the cache holding the prompt from before it; and that prompt's length."""
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut] + "    result = comp", SOURCE[cut:]
    budget = PromptBudget(total=900, suffix=suffix_tokens, extra=0, layout=layout)
    seq = CachedSequence(CountingBackend())
    before = build_fim_prompt(tokenizer, prefix, suffix, budget)
    seq.sync(before, 1)
    fed = seq.fed_tokens
    seq.sync(build_fim_prompt(tokenizer, prefix + "u", suffix, budget), 1)
    return seq.fed_tokens - fed, len(before)


@pytest.mark.parametrize("layout", ["psm-mid", "spm"])
def test_a_keystroke_reevaluates_only_a_few_tokens(tiny_tokenizer, layout):
    fed, prompt_len = _fed_by_keystroke(tiny_tokenizer, layout)
    assert prompt_len > 300
    assert fed <= 4, f"{layout}: a keystroke evaluated {fed} tokens"


def test_plain_psm_reevaluates_the_suffix_on_every_keystroke(tiny_tokenizer):
    """The layout the default replaced: the measure above tells them apart."""
    fed, _ = _fed_by_keystroke(tiny_tokenizer, "psm")
    assert fed > 100


def test_psm_mid_puts_the_paragraph_so_far_after_the_middle_token(tiny_tokenizer):
    budget = PromptBudget(layout="psm-mid")
    text = build_fim_text(tiny_tokenizer, "import os\n\ndef f(x):\n    return x +", "\nprint(f(1))\n", budget)
    assert text == "<|fim_prefix|>import os\n\n<|fim_suffix|>\nprint(f(1))\n<|fim_middle|>def f(x):\n    return x +"
    # The paragraph's first line keeps its indentation in the prefix: the prompt is the same while that
    # line holds only indentation (then it is PSM: after <|fim_middle|> the model would add a space of its
    # own) and once it has code.
    text = build_fim_text(tiny_tokenizer, "import os\n\n    ", "\nprint(f(1))\n", budget)
    assert text == "<|fim_prefix|>import os\n\n    <|fim_suffix|>\nprint(f(1))\n<|fim_middle|>"
    text = build_fim_text(tiny_tokenizer, "import os\n\n    y", "\nprint(f(1))\n", budget)
    assert text == "<|fim_prefix|>import os\n\n    <|fim_suffix|>\nprint(f(1))\n<|fim_middle|>y"


def test_a_line_enter_and_the_next_lines_first_key_extend_one_prompt(tiny_tokenizer):
    """The first key after Enter evaluates only what was typed: its prompt extends the line end's."""
    budget = PromptBudget(layout="psm-mid")
    suffix = "\n\nprint(f(1))\n"
    at_line_end = build_fim_prompt(tiny_tokenizer, "import os\n\ndef f(x):\n    y = x * 2", suffix, budget)
    first_key = build_fim_prompt(tiny_tokenizer, "import os\n\ndef f(x):\n    y = x * 2\n    r", suffix, budget)
    assert first_key[: len(at_line_end)] == at_line_end
    assert len(first_key) - len(at_line_end) <= 3  # the newline, the indentation and the key
    # The next line prepared at a new line's start (before its indentation) is on the same way.
    new_line = build_fim_prompt(tiny_tokenizer, "import os\n\ndef f(x):\n    y = x * 2\n", suffix, budget)
    assert new_line[: len(at_line_end)] == at_line_end and first_key[: len(new_line)] == new_line
    # The middle holds at most MIDDLE_LINES lines: in a long paragraph the suffix is evaluated again once
    # in that many lines, not at every one.
    lines = [f"v{i} = {i}" for i in range(MIDDLE_LINES + 2)]
    starts = {build_fim_text(tiny_tokenizer, "\n".join(lines[: n + 1]), suffix, budget).split("<|fim_middle|>")[1]
              .split("\n")[0] for n in range(len(lines))}
    assert starts == {"v0 = 0", f"v{MIDDLE_LINES} = {MIDDLE_LINES}"}


def test_a_short_windows_long_paragraph_still_only_appends(tiny_tokenizer):
    """In the first window at a place (192 tokens) a paragraph soon outgrows the middle's share of the
    prefix's budget: the middle then starts anew at a later line (its lines above the cursor's keep under a
    third of the budget), so that typing on a line and the next line's first characters still only append
    (the cache's suffix stays valid), and the prefix's end moves only at some Enters."""

    budget = PromptBudget(total=192, suffix=48, extra=0, anchor_lines=8, layout="psm-mid", first_text_ms=0)
    lines = [f"    v{i} = f(r, {i})" for i in range(7)]
    text, suffix = "def g(r):\n", "\n\nprint(g(1))\n"
    texts = []
    for line in lines:
        texts += [text + line[:n] for n in range(len(line) + 1)]
        text += line + "\n"
        texts.append(text)
    # (A line holding only indentation is plain PSM, as at any paragraph: left out.)
    texts = [t for t in texts if t.endswith("\n") or t[t.rfind("\n") + 1:].strip()]
    prompts = [build_fim_prompt(tiny_tokenizer, t, suffix, budget) for t in texts]
    assert sum(len(tiny_tokenizer.encode(line)) for line in lines) > 192 // 3  # past the lines above's share
    moved = [texts[n + 1] for n, (before, after) in enumerate(zip(prompts, prompts[1:], strict=False))
             if after[: len(before) - 2] != before[:-2]]  # the last tokens may merge with the key
    assert moved and all(t.endswith("\n") for t in moved), "a key changed the prompt before the cursor"
    assert len(moved) <= sum(t.endswith("\n") for t in texts) // 2  # not at every Enter
    assert all("<|fim_middle|>" in build_fim_text(tiny_tokenizer, t, suffix, budget)[-200:] for t in texts)


def test_a_middle_given_its_start_keeps_it_and_one_that_is_not_a_lines_code_is_refused(tiny_tokenizer):
    from codecue.engine.fim import fim_text

    budget = PromptBudget(layout="psm-mid")
    lines = [f"    v{i} = f(r, {i})\n" for i in range(MIDDLE_LINES - 1)]  # and the new line: a block's first
    prefix, suffix = "def g(r):\n" + "".join(lines), "\nprint(g(1))\n"
    own = fim_text(tiny_tokenizer, prefix, suffix, budget)
    assert own.text.endswith("<|fim_middle|>")  # the block is full: the new line starts the middle anew
    kept = fim_text(tiny_tokenizer, prefix, suffix, budget, middle_from=prefix.index("v1"))
    assert kept.middle_from == prefix.index("v1") and kept.text.endswith("<|fim_middle|>" + prefix[kept.middle_from:])
    for wrong in (prefix.index("v1") - 2, prefix.index("v1") + 1, len(prefix) + 5):
        assert fim_text(tiny_tokenizer, prefix, suffix, budget, middle_from=wrong) == own


def test_a_full_middle_block_goes_on_while_starting_anew_would_keep_the_first_text_waiting(make_completer):
    """Where a block of lines fills, the next line's prompt starts its middle anew and the suffix is
    evaluated again (about 100 tokens, a second on 2 cores): at Enter after a 1 s rest that was the wait.
    While a new start would evaluate more than the first text's time allows, the middle the cache holds
    goes on: Enter and the first keys only append. A rest evaluates the full prompt with the new start,
    and the keys after it extend that one."""
    completer = _fast_first_text(make_completer, prefill_ms=30.0)  # 600 ms: 20 new tokens
    lines = [f"    v{i} = f(r, {i})\n" for i in range(MIDDLE_LINES)]
    suffix = "\n" + SOURCE[:400]
    line_end = "import os\n\ndef g(r):\n" + "".join(lines[:5]).rstrip("\n")  # line 7 of the file
    completer.warm_context(line_end, suffix, fresh=True)
    completer.prefill_ms_per_token = 30.0
    at_line_end = completer.build_prompt(line_end, suffix)
    assert completer.uncached(at_line_end) <= 1 and "<|fim_middle|>def g(r):" in completer.tokenizer.decode(at_line_end)
    enter = completer.build_prompt(line_end + "\n", suffix)
    assert enter[: len(at_line_end)] == at_line_end and completer.uncached(enter) <= 2
    completer.generate_ids(enter, max_tokens=1, k=0)
    completer.prefill_ms_per_token = 30.0
    first_key = completer.build_prompt(line_end + "\n    v", suffix)
    assert first_key[: len(enter)] == enter and completer.uncached(first_key) <= 3
    own = build_fim_prompt(completer.tokenizer, line_end + "\n    v", suffix, completer.budget)
    assert completer.uncached(own) > 20  # what starting anew would have evaluated
    completer.warm_context(line_end + "\n    v", suffix, fresh=True)  # a rest there
    completer.prefill_ms_per_token = 30.0
    after_rest = completer.build_prompt(line_end + "\n    v5", suffix)
    assert after_rest[: len(own)] == own and completer.uncached(after_rest) <= 2
    assert completer.tokenizer.decode(after_rest).endswith("<|fim_middle|>v5")


def test_unknown_layout_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown prompt layout 'mps'"):
        PromptBudget(layout="mps")


# -- context chunks ------------------------------------------------------------------------------
def _file(name: str, n: int) -> str:
    return "".join(f"def {name}_helper_{i}(record):\n    return record.{name}_field_{i} * {i}\n\n" for i in range(n))


def test_context_respects_its_token_budget(tiny_tokenizer):
    pool = ChunkPool(chunk_lines=12)
    for name in ("alpha", "beta", "gamma"):
        pool.update(f"file:///w/{name}.py", f"{name}.py", _file(name, 40))
    query = "x = alpha_helper_3(record) + beta_helper_4(record) + gamma_field_5"
    chosen = pool.select(query, None, max_chars=100_000)
    assert len(chosen) > 3  # far more than the budget holds
    for extra in (64, 200, 400):
        budget = PromptBudget(total=1200, suffix=64, extra=extra)
        text = build_fim_text(tiny_tokenizer, "y = 1\n", "\n", budget, [(c.path, c.text) for c in chosen],
                              path="me.py")
        context = text[: text.index(f"{FILE_SEP}me.py")]
        assert 0 < len(tiny_tokenizer.encode(context, add_special_tokens=False)) <= extra
        assert len(tiny_tokenizer.encode(text, add_special_tokens=False)) <= budget.total + 4


def test_chunks_are_chosen_by_similarity_to_the_lines_around_the_cursor():
    pool = ChunkPool(chunk_lines=8)
    pool.update("file:///w/invoice.py", "invoice.py", "class Invoice:\n    def subtotal(self):\n        pass\n")
    pool.update("file:///w/colors.py", "colors.py", "PALETTE = {'red': 1}\ndef blend(a, b):\n    return a\n")
    prefix = "def total(invoice: Invoice) -> float:\n    net = invoice.subtotal()\n    "
    chosen = pool.select(query_around(prefix, "\n"), "file:///w/me.py", max_chars=60)
    assert [c.path for c in chosen] == ["invoice.py"]


def test_the_query_ignores_the_cursor_line_so_typing_keeps_the_choice():
    before = query_around("import os\ndef f(a):\n    return os.path.jo", "\nx = 1\n")
    after = query_around("import os\ndef f(a):\n    return os.path.join(a", "\nx = 1\n")
    assert before == after and "os.path" not in before


def test_chunk_order_keeps_older_chunks_first_when_another_file_changes(tiny_tokenizer):
    """The rendered context of unchanged files is a prefix of the new one: their KV cache survives."""
    pool = ChunkPool(chunk_lines=4)
    pool.update("file:///w/a.py", "a.py", _file("shared", 3))
    pool.update("file:///w/b.py", "b.py", _file("shared", 2))
    query = "shared_helper_1(shared_field_1) shared_helper_0 shared_field_2"
    first = build_fim_text(tiny_tokenizer, "", "", PromptBudget(extra=600),
                           [(c.path, c.text) for c in pool.select(query, None, 10_000)], path="me.py")
    pool.update("file:///w/b.py", "b.py", _file("shared", 2) + "def shared_helper_9(record):\n    return 9\n")
    second = build_fim_text(tiny_tokenizer, "", "", PromptBudget(extra=600),
                            [(c.path, c.text) for c in pool.select(query, None, 10_000)], path="me.py")
    a_part = first[: first.index(f"{FILE_SEP}b.py")]
    assert "a.py" in a_part and second.startswith(a_part)


def test_context_comes_only_from_documents_the_editor_opened(tmp_path):
    """A file in the workspace directory that the editor did not open never reaches the prompt."""
    from codecue.document import DocumentStore
    from codecue.server.lsp.prompt import project_context

    secret = tmp_path / "secret_settings.py"
    secret.write_text("def load_invoice_total(invoice):\n    return invoice.total\n")
    docs = DocumentStore()
    docs.open((tmp_path / "me.py").as_uri(), "python", 1, "x = 1\n")
    docs.open((tmp_path / "billing.py").as_uri(), "python", 1, "def invoice_total(invoice):\n    return 1\n")
    docs.open((tmp_path / "billing.ts").as_uri(), "typescript", 1, "function invoice_total(invoice) {}\n")
    pool = ChunkPool()
    prefix = "def f(invoice):\n    total = invoice_total(invoice)\n    load_invoice_total(invoice)\n    "
    chosen = project_context(pool, docs, (tmp_path / "me.py").as_uri(), "python", prefix, "\n", PromptBudget())
    assert [path for path, _ in chosen] == [str(tmp_path / "billing.py")]
    assert all("secret" not in text for _, text in chosen)


def test_closed_documents_stay_as_context_until_evicted():
    pool = ChunkPool(max_sources=2)
    for i in range(3):
        pool.update(f"file:///w/f{i}.py", f"f{i}.py", f"def func_{i}(common_name):\n    return common_name\n")
    assert len(pool) == 2 and "file:///w/f0.py" not in pool  # the least recently used went first


# -- post-processing -----------------------------------------------------------------------------
def test_a_completion_that_repeats_the_next_lines_is_cut_before_them():
    prefix = "def f(x):\n    y = x * 2\n    "
    suffix = "\n    z = compute(y)\n    return z\n"
    assert tidy_completion("w = y + 1\n    z = compute(y)\n    return z\n", prefix, suffix, "eos") == "w = y + 1"
    assert suffix_repeat_cut("w = y + 1\n    z = comp", prefix, suffix) is None  # not a whole line yet


def test_closing_the_rest_of_the_line_twice_is_trimmed():
    assert tidy_completion("a, b)", "x = foo(", ")\nbar()\n", "eos") == "a, b"
    assert tidy_completion("a, g(b)", "x = foo(", ")\nbar()\n", "eos") == "a, g(b)"  # g's own paren


def test_a_short_line_alone_is_not_a_repetition_but_two_are():
    prefix, suffix = "fn f() {\n    if x {\n        ", "\n    }\n}\n"
    assert tidy_completion("y();\n    }\n}\n", prefix, suffix, "eos") == "y();"
    assert tidy_completion("y();\n    }\n    z();\n", prefix, suffix, "eos") == "y();\n    }\n    z();"


def test_no_half_line_when_tokens_run_out():
    assert whole_lines("a = 1\nb = 2\nc = comp") == "a = 1\nb = 2\n"
    assert tidy_completion("a = 1\nb = comp", "x\n", "rest\n", "max_tokens") == "a = 1\n"
    assert tidy_completion("a = 1\nb = comp", "x\n", "\nrest\n", "max_tokens") == "a = 1"
    assert tidy_completion("a = 1\nb = 2", "x\n", "rest\n", "eos") == "a = 1\nb = 2"


# -- work ahead ----------------------------------------------------------------------------------
class SlowCompleter:
    """A stand-in completer whose generation runs until cancelled (or 10 s): it records what ran."""

    runtime = "stand-in"
    names = ("stand-in", None)
    budget = PromptBudget()

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running = threading.Event()
        self.with_draft: list[bool] = []  # each warm-up's
        self.interrupted: list[bool] = []  # each cancelled warm-up's: told to stop a call part-way too

    def measure_costs(self, should_stop=None):
        return None

    def complete(self, prefix, suffix, *, cancelled, **kwargs):
        from codecue.engine.results import GenerationResult, GenerationStats

        self.started.append(prefix)
        self.running.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (cancelled() if "slow" in prefix else True):
            time.sleep(0.01)
        reason = "cancelled" if time.monotonic() < deadline and "slow" in prefix else "eos"
        return GenerationResult([], "done", reason, GenerationStats())

    def build_prompt(self, prefix, suffix, extra_context=(), *, path=None):
        return [1, 2, 3]

    def warm_context(self, prefix, suffix, extra_context=(), *, path=None, cancelled=None, decoding=None,
                     within_ms=None, fresh=False, with_draft=True, interrupted=None):
        self.started.append("warm fresh" if fresh else "warm")
        self.with_draft.append(with_draft)
        self.running.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not cancelled():
            time.sleep(0.01)
        if cancelled():
            self.interrupted.append(interrupted() if interrupted is not None else True)
        return 0


def test_a_real_request_cancels_the_prefetch_running_ahead_of_it():
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = SlowCompleter()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)
    try:
        ahead = make_job(config, "slow prefetch", "", background=True)
        ahead_future = worker.submit(ahead)
        assert completer.running.wait(10)
        started = time.monotonic()
        real = worker.submit(make_job(config, "real request", ""))
        assert real.result(timeout=10).text == "done"
        assert time.monotonic() - started < 5  # it did not wait for the prefetch's 10 s
        assert ahead.is_cancelled and ahead_future.result(timeout=10).stop_reason == "cancelled"
    finally:
        worker.shutdown(unload=False)


def test_queued_work_ahead_is_dropped_for_a_real_request_and_warming_is_cancelled():
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.request import JobKind
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    completer = SlowCompleter()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)
    try:
        warm = worker.submit(make_job(config, "w", "", background=True, kind=JobKind.WARM))
        assert completer.running.wait(10)
        queued = make_job(config, "slow queued prefetch", "", background=True)
        queued_future = worker.submit(queued)
        real = worker.submit(make_job(config, "real", ""))
        assert real.result(timeout=10).text == "done"
        assert warm.result(timeout=10) is None and queued_future.result(timeout=1) is None
        assert completer.started == ["warm", "real"]  # the queued prefetch never ran
    finally:
        worker.shutdown(unload=False)


def test_a_request_typed_on_from_a_warm_up_lets_its_call_finish_and_any_other_stops_it_part_way():
    """A request at the place a warm-up evaluates the window for, or typed on from it, needs what the call
    under way evaluates: the warm-up stops before its next step, not part-way through the call (whose work
    would be lost). A request elsewhere, and one during a rest's full prompt (evaluated fresh, which a
    request there does not wait for), stop it part-way."""
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.request import JobKind
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    place = ("def f(x):\n    return x", "\n\nprint(f(2))\n")
    cases = [(place[0] + " + 1", place[1], False, False),  # typed on from the warm-up's place
             (place[0], place[1], False, False),  # at the place itself
             ("def g(y):\n    return y", place[1], False, True),  # elsewhere
             (place[0] + " + 1", place[1], True, True)]  # the rest's full prompt, evaluated fresh
    for prefix, suffix, fresh, interrupted in cases:
        completer = SlowCompleter()
        config = CompletionConfig(ModelChoice("t"))
        worker = ModelWorker(config, lambda choice, completer=completer: completer, idle_unload_s=None)
        try:
            warm = make_job(config, *place, path="f.py", background=True, kind=JobKind.WARM, warm_fresh=fresh)
            done = worker.submit(warm)
            assert completer.running.wait(10)
            assert worker.submit(make_job(config, prefix, suffix, path="f.py")).result(timeout=10).text == "done"
            assert done.result(timeout=10) is None and warm.is_cancelled
            assert completer.interrupted == [interrupted], (prefix, fresh)
        finally:
            worker.shutdown(unload=False)


def test_a_cancel_that_lets_the_call_finish_is_told_and_a_later_one_stops_the_call():
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.request import JobKind
    from harness.jobs import make_job

    job = make_job(CompletionConfig(ModelChoice("t")), "x", kind=JobKind.WARM, background=True)
    told: list[bool] = []
    job.when_cancelled(lambda finish_call: told.append(finish_call))
    job.cancel(finish_call=True)
    assert job.is_cancelled and job.poll_cancelled() and not job.poll_interrupted()
    job.cancel(finish_call=True)  # nothing new to tell
    job.cancel()
    assert job.poll_interrupted() and told == [True, False]
    late: list[bool] = []
    job.when_cancelled(lambda finish_call: late.append(finish_call))  # told at once, as it stands now
    assert late == [False]


def test_a_warm_up_evaluates_the_draft_only_where_a_request_may_draft():
    """Where speculation cannot pay here (the K authority's ceiling is 0: nothing measured, or costs under
    which no K gains) no request reads the draft's cache, so a warm-up leaves it; a K fixed above 0, or
    costs under which drafting pays, bring it back."""
    from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
    from codecue.request import JobKind
    from codecue.server.worker.model_worker import ModelWorker
    from codecue.tuning.k_choice import CostModel
    from codecue.tuning.policy import KPolicy
    from harness.jobs import make_job

    for decoding, drafts in ((DecodingSettings(), False), (DecodingSettings(k=3), True),
                             (DecodingSettings(k=0), False)):
        completer = SlowCompleter()
        config = CompletionConfig(ModelChoice("t"), decoding)
        worker = ModelWorker(config, lambda choice, completer=completer: completer, idle_unload_s=None,
                             k_policy=KPolicy())
        try:
            warm = worker.submit(make_job(config, "w", "", background=True, kind=JobKind.WARM))
            assert completer.running.wait(10)
            assert worker.submit(make_job(config, "real", "")).result(timeout=10).text == "done"
            assert warm.result(timeout=10) is None
            assert completer.with_draft == [drafts], decoding
            job = make_job(config, "w", "", kind=JobKind.WARM)
            worker.k_policy.use_costs(CostModel(draft_cost=0.05, verify_per_token=0.02))  # drafting pays
            assert worker.drafts(job) == (decoding.k != 0)
            worker.k_policy.use_costs(CostModel(draft_cost=2.0, verify_per_token=1.0))  # it cannot
            assert worker.drafts(job) == drafts
        finally:
            worker.shutdown(unload=False)


def test_warm_leaves_the_draft_cache_where_told(make_completer):
    completer = make_completer(draft="target", draft_mode="hybrid", k=3)
    prompt = completer.build_prompt(SOURCE[:2000], SOURCE[2000:2400])
    assert completer.warm(prompt, step=16, with_draft=False) == len(prompt) - 1
    assert completer.target.tokens == list(prompt[:-1]) and completer.draft.tokens == []


def test_warm_fills_the_cache_so_the_request_evaluates_only_what_changed(make_completer):
    completer = make_completer(draft=None, draft_mode="none")
    prompt = completer.build_prompt(SOURCE[:2000], SOURCE[2000:2400])
    assert completer.warm(prompt, step=16) == len(prompt) - 1  # the request evaluates the last token alone
    assert completer.warm(prompt) == 0  # already cached
    assert completer.uncached(prompt) == 1
    cancelled = completer.warm(completer.build_prompt("x = 1\n" + SOURCE[:2000], ""), lambda: True)
    assert cancelled == 0


def test_warm_fills_the_draft_cache_too_and_a_draft_left_behind_drafts_by_ngram_only(make_completer):
    completer = make_completer(draft="target", draft_mode="hybrid", k=3)
    prompt = completer.build_prompt(SOURCE[:2000], SOURCE[2000:2400])
    assert completer.warm(prompt, step=16) == len(prompt) - 1
    assert completer.draft.tokens == completer.target.tokens == list(prompt[:-1])
    assert not completer.draft_lags(prompt)
    steps_before = completer.draft.fed_tokens
    result = completer.generate_ids(prompt, max_tokens=12, k=3, k_max=3)
    # The warm draft read only what the generation added: the last prompt token once, then its drafts.
    assert result.stats.model_rounds > 0
    assert completer.draft.fed_tokens - steps_before <= 1 + result.stats.model_rounds * 4

    # A warm-up cancelled between the target and the draft: the target holds this place, the draft does
    # not, and reading it all would hold back the first text, so this generation drafts by n-gram only.
    other = completer.build_prompt(SOURCE[:1500], SOURCE[1500:1900])
    completer.warm(other, step=16)
    completer.draft.reset()
    assert completer.draft_lags(other)
    fed_before = completer.draft.fed_tokens
    lagging = completer.generate_ids(other, max_tokens=12, k=3, k_max=3)
    assert lagging.stats.model_rounds == 0 and completer.draft.fed_tokens == fed_before
    target_only = completer.generate_ids(other, max_tokens=12, k=0)
    assert lagging.tokens == target_only.tokens  # n-gram drafting is as lossless as any


# -- a place the cache does not hold -------------------------------------------------------------
def _fast_first_text(make_completer, prefill_ms: float | None = 6.0, window_floor: int = 32):
    completer = make_completer(draft=None, draft_mode="none",
                               budget=PromptBudget(total=900, suffix=64, extra=0, first_text_ms=600,
                                                   window_floor=window_floor))
    completer.prefill_ms_per_token = prefill_ms  # 600 ms / 6 ms: 100 new tokens at most
    return completer


def test_a_new_place_gets_a_prompt_within_the_first_text_limit(make_completer):
    completer = _fast_first_text(make_completer)
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut], SOURCE[cut:cut + 600]
    full = completer.build_prompt(prefix, suffix, full=True)
    first = completer.build_prompt(prefix, suffix)
    assert len(full) > 600 and completer.uncached(full) == len(full)
    assert completer.fresh_token_limit() == 100
    assert 60 < completer.uncached(first) <= 100  # a window around the cursor, no more
    text = completer.tokenizer.decode(first)
    assert text.endswith("<|fim_middle|>") and SOURCE[cut - 30:cut] in text and SOURCE[cut:cut + 20] in text


def test_a_key_where_the_window_is_cached_is_not_held_back_by_the_context_around_it():
    """Where the cache shifts, the window's tokens are kept in a prompt that adds the context around them
    too: that prompt reuses more, and cost a key at a place whose window is cached ~180 new tokens (1.8 s
    on 2 cores) against 2. Within the first text's time (``soon``) the window is sent; a machine that
    evaluates the context within it gets the longer prompt."""
    from codecue.engine.fim import choose_prompt, shorter_budgets

    budget = PromptBudget(total=1536, suffix=128, extra=256)
    context_and_window, window = (b.total for b in shorter_budgets(budget, 192))
    new = {budget.total: 1400, context_and_window: 180, window: 2}  # prompt length -> tokens to evaluate

    def build(within: PromptBudget) -> list[int]:
        return list(range(within.total))

    def choose(soon: int | None) -> int:
        return len(choose_prompt(build, budget, lambda p: new[len(p)], limit=192, held=[192], soon=soon)[0])

    assert choose(soon=20) == window
    assert choose(soon=None) == choose(soon=200) == context_and_window
    new[window] = 150  # nothing within the first text's time: the floor's limit, the most reused
    assert choose(soon=20) == context_and_window


def test_no_first_suggestion_comes_from_a_window_below_the_floor(make_completer):
    """Where this machine's prefill allows fewer new tokens within first_text_ms than the quality floor, the
    request waits for the floor's window (and says so in its stats); where it allows more, it does not."""
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut], SOURCE[cut:cut + 600]
    slow = _fast_first_text(make_completer, prefill_ms=30.0, window_floor=160)  # 600 ms: 20 tokens, floor 160
    assert slow.fresh_token_limit() == 160 and slow.waits_for_window()
    first = slow.build_prompt(prefix, suffix)
    assert 120 < slow.uncached(first) <= 160 < len(slow.build_prompt(prefix, suffix, full=True))
    result = slow.complete(prefix, suffix, max_tokens=2, k=0)
    assert result.stats.waited_for_window and result.stats.prefilled_tokens >= 120
    fast = _fast_first_text(make_completer, prefill_ms=3.0, window_floor=160)  # 200 tokens in 600 ms
    assert fast.fresh_token_limit() == 200 and not fast.waits_for_window()
    assert not fast.complete(prefix, suffix, max_tokens=2, k=0).stats.waited_for_window
    # A place the cache holds sends its full prompt: nothing waited there.
    slow.warm_context(prefix, suffix)
    slow.prefill_ms_per_token = 30.0
    assert not slow.complete(prefix, suffix, max_tokens=2, k=0).stats.waited_for_window


def test_idle_warm_up_brings_back_the_full_prompt_and_typing_stays_cheap(make_completer):
    completer = _fast_first_text(make_completer)
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut], SOURCE[cut:cut + 600]
    completer.generate_ids(completer.build_prompt(prefix, suffix), max_tokens=2, k=0)
    completer.prefill_ms_per_token = 6.0  # the tiny model prefills far faster: keep the 100-token limit
    # The short prompt is cached now: the next keystroke at this place evaluates a few tokens.
    typed = completer.build_prompt(prefix + "d", suffix)
    assert len(typed) < 110 and completer.uncached(typed) <= 4
    completer.warm_context(prefix, suffix)  # what the worker does in idle time
    completer.prefill_ms_per_token = 6.0
    again = completer.build_prompt(prefix + "d", suffix)
    assert len(again) > 600 and completer.uncached(again) <= 4


def test_a_cursor_warm_up_readies_the_first_window_where_the_full_prompt_would_not_be_ready_in_time(make_completer):
    """After a jump the pause is short: on a machine that cannot evaluate the full prompt within it, the
    warm-up evaluates the window a request there sends first, so Enter after the pause evaluates only what
    follows the new line; where the full prompt fits the pause, the full prompt is warmed."""
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut], SOURCE[cut:cut + 600]
    slow = _fast_first_text(make_completer, prefill_ms=30.0, window_floor=160)  # 160 tokens: 4.8 s
    warmed = slow.warm_context(prefix, suffix, within_ms=1500)
    slow.prefill_ms_per_token = 30.0  # the tiny model prefills far faster: keep the slow machine's speed
    assert warmed <= 160 < len(slow.build_prompt(prefix, suffix, full=True))
    enter = slow.build_prompt(prefix + "\n    ", suffix)  # Enter at the end of the line, after the pause
    # the new line and the window's suffix after it (160 // 4 tokens at most), not the window
    assert len(enter) <= 170 and slow.uncached(enter) <= 40
    fast = _fast_first_text(make_completer, prefill_ms=1.0, window_floor=160)  # the full prompt in < 1.5 s
    assert fast.warm_context(prefix, suffix, within_ms=1500) > 600
    # Before any speed was seen (the first warm-up after a load): the window at its floor, which the request
    # after it sends once the warm-up's steps have measured the speed; not the start of the full prompt.
    unmeasured = _fast_first_text(make_completer, prefill_ms=None, window_floor=160)
    assert unmeasured.warm_context(prefix, suffix, within_ms=1500) <= 160
    unmeasured.prefill_ms_per_token = 30.0
    assert unmeasured.uncached(unmeasured.build_prompt(prefix + "d", suffix)) <= 4


def test_no_limit_before_the_prefill_speed_is_known_and_it_is_learned(make_completer):
    completer = _fast_first_text(make_completer, prefill_ms=None)
    prompt = completer.build_prompt(SOURCE[:3000], SOURCE[3000:3600])
    assert len(prompt) > 600  # nothing measured yet: the full prompt
    completer.generate_ids(prompt, max_tokens=2, k=0)
    assert completer.prefill_ms_per_token is not None and completer.prefill_ms_per_token > 0


def test_the_worker_warms_the_full_prompt_when_idle_and_a_request_cancels_it(monkeypatch):
    from codecue.models.config import CompletionConfig, ModelChoice
    from codecue.request import JobKind
    from codecue.server.worker import model_worker as worker_module
    from codecue.server.worker.model_worker import ModelWorker
    from harness.jobs import make_job

    monkeypatch.setattr(worker_module, "REFINE_AFTER_S", 0.2)
    completer = SlowCompleter()
    config = CompletionConfig(ModelChoice("t"))
    worker = ModelWorker(config, lambda choice: completer, idle_unload_s=None)

    def request(place: str):  # with the server's work ahead: the place's full prompt, fresh, when idle
        full = make_job(config, place, "", kind=JobKind.WARM, background=True, warm_fresh=True)
        return make_job(config, place, "", when_idle=full)

    try:
        assert worker.submit(request("first place")).result(timeout=10)
        deadline = time.monotonic() + 10
        while len(completer.started) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # idle: the same place's full prompt, and what its cache kept by shifting evaluated again
        assert completer.started == ["first place", "warm fresh"]
        started = time.monotonic()
        assert worker.submit(request("next")).result(timeout=10).text == "done"
        assert time.monotonic() - started < 5  # the warm-up (10 s unless cancelled) gave way at once
        completer.running.clear()
        assert completer.running.wait(10) and completer.started[-1] == "warm fresh"  # after "next" too
        worker.submit(make_job(config, "without work ahead", "")).result(timeout=10)
        time.sleep(1.0)  # five times the idle wait: nothing follows a request that asks for no work ahead
        assert completer.started[-1] == "without work ahead"
    finally:
        worker.shutdown(unload=False)


@pytest.mark.parametrize("suffix", ["\nnext_line()\n", "", ")\n"])
@pytest.mark.parametrize("text", ["    return x\n    y = compu", "\n    total = price * qua", "a(1)\nb(2)\nc(",
                                  "only_the_first_line_so_f"])
def test_streamed_text_is_never_taken_back_by_the_final_tidying(text, suffix):
    """Every state streamed while the text grows is a start of what is finally shown, whether the
    generation stopped there (token limit) or the model ended it."""
    from codecue.engine.postprocess import streamable

    for reason in ("max_tokens", "eos"):
        final = tidy_completion(text, "def f(x):\n", suffix, reason)
        shown = [streamable(text[:n], "def f(x):\n", suffix) for n in range(1, len(text) + 1)]
        assert all(final.startswith(part) for part in shown), (reason, final, shown)
        if reason == "max_tokens":
            assert "\n" not in text.strip() or not final.endswith(text.rsplit("\n", 1)[1])  # half line dropped


def test_a_window_the_cache_holds_stays_put_when_the_measured_prefill_speed_drifts(make_completer):
    """The first-text limit follows the measured prefill speed, which moves after every prefill: a keystroke
    at a place whose window is cached sends that window again (a few new tokens), not a window of the new
    limit whose start moved (all of it new); where the cache holds nothing of it, the new limit's window."""
    completer = _fast_first_text(make_completer)
    cut = SOURCE.index("def step_30")
    prefix, suffix = SOURCE[:cut], SOURCE[cut:cut + 600]
    first = completer.build_prompt(prefix, suffix)
    completer.generate_ids(first, max_tokens=2, k=0)
    for drifted in (4.0, 8.0, 5.0, 7.0, 4.5):  # limits 150, 75, 120, 85, 133: each moves the window's start
        completer.prefill_ms_per_token = drifted
        typed = completer.build_prompt(prefix + "d", suffix)
        assert completer.uncached(typed) <= 4 and abs(len(typed) - len(first)) <= 2
    # Where the cache holds nothing (a new file), the earlier limits do not shrink the window: the limit now.
    completer.reset_caches()
    completer.prefill_ms_per_token = 4.0
    assert 120 < len(completer.build_prompt(prefix, suffix)) <= 150
