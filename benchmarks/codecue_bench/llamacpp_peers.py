"""Decoding loops written in Python against llama-cpp-python, timed the same way as CodeCue's engine.

These are re-implementations in Python (llama-cpp-python's ``Llama.generate`` loop, and CodeCue's drafting
behind its draft-model hook), not the native decoder a llama.cpp or llama.vim user runs (``llama-server``);
``codecue bench speed`` names them ``py-llama-*`` (:mod:`codecue_bench.peers`) and runs them side by side
with CodeCue on the same GGUF models and prompts:

- ``target_only``: llama-cpp-python's ``Llama.generate`` with a greedy sampler (llama.cpp's own decode
  loop; the prompt is evaluated with logits for its last position only, as llama.cpp does).
- ``prompt_lookup``: llama-cpp-python's own speculative decoding with ``LlamaPromptLookupDecoding`` (the
  n-gram "draft model" shipped with llama-cpp-python; its ``Llama`` verifies and rolls back).
- ``draft_model``: the same ``Llama`` speculative loop driven by a real draft model (the 0.5B GGUF in its
  own llama.cpp context), drafting greedily up to ``draft_max`` tokens and stopping when the draft's top
  probability falls under ``p_min`` — the rule of llama.cpp's ``common_speculative_gen_draft``.

llama.cpp's native draft-model speculation (``common/speculative.cpp``, used by ``llama-server
--model-draft`` and ``llama-speculative``) cannot be driven from Python: it is a C++ API (std::vector,
C++ structs, mangled names) in ``libllama-common`` that llama-cpp-python does not bind, and the wheel ships
no llama.cpp executables. ``draft_model`` is the closest equivalent: the same algorithm, with the target's
verification and rollback done by llama-cpp-python.

Every mode returns ``(generated_token_ids, timings)`` where timings holds ``ttft_ms`` (call to first token,
prompt processing included), ``tpot_ms`` (mean time per token after the first), ``total_ms`` and counts;
the speculative modes add ``draft_calls``, ``drafted``, ``accepted`` and ``draft_ms``.
Models are loaded once by :class:`LlamaCppPeers` and reused across calls; the module-level functions keep
one instance per set of model paths.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from codecue.backends.kv_cache import CachedSequence
from codecue.backends.llamacpp import LlamaCppBackend, _load_lib, physical_core_count
from codecue.errors import BackendUnavailable, ModelError

Timings = dict[str, float]

_INSTALL_HINT = "install it with: pip install 'codecue[llamacpp]'"
_default_params_lock = threading.Lock()


def _import_llama() -> Any:
    # llama-cpp-python is optional: imported where a peer runs, so that this module imports without it.
    try:
        import llama_cpp
    except ImportError as e:
        raise BackendUnavailable(f"llama.cpp peers need llama-cpp-python ({e})", _INSTALL_HINT) from e
    except (OSError, RuntimeError) as e:
        raise BackendUnavailable(f"llama-cpp-python is installed but does not load: {e}", _INSTALL_HINT) from e
    return llama_cpp


class LlamaCppPeers:
    """The target (and optionally a draft) loaded once for llama.cpp's own decoding modes.

    Two target contexts are kept: a plain one (logits for the last position only, llama.cpp's normal
    decode) and one with logits for every position, which llama-cpp-python's speculative loop requires.
    Both map the same GGUF file.
    """

    def __init__(
        self,
        target_path: str | Path,
        draft_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        flash_attn: bool = True,
        repack: bool = True,
    ) -> None:
        _load_lib()  # silences llama.cpp's logging (errors only) before anything is loaded
        llama_cpp = _import_llama()
        self._llama_cpp = llama_cpp
        self.target_path = Path(target_path).expanduser()
        self.draft_path = Path(draft_path).expanduser() if draft_path is not None else None
        for path in (self.target_path, self.draft_path):
            if path is not None and not path.is_file():
                raise ModelError(f"model file not found: {path}", "run `codecue models pull`")
        self.n_ctx = n_ctx
        self.n_threads = n_threads or physical_core_count()
        self.flash_attn = flash_attn
        self.repack = repack
        self._plain: Any = None
        self._speculative: Any = None
        self._draft_backend: Any = None
        self._lock = threading.Lock()  # one generation at a time: the contexts hold one sequence each

    # -- loading ---------------------------------------------------------------------------------

    def _new_llama(self, logits_all: bool, draft_model: Any = None) -> Any:
        if self.repack:
            return self._construct_llama(logits_all, draft_model)
        # Llama() takes no switch for llama.cpp's weight repacking (model_params.use_extra_bufts); it
        # reads llama_model_default_params() while constructing, so hand it defaults with repacking off.
        lib = self._llama_cpp.llama_cpp
        with _default_params_lock:
            original = lib.llama_model_default_params

            def defaults_without_repack() -> Any:
                params = original()
                params.use_extra_bufts = False
                return params

            lib.llama_model_default_params = defaults_without_repack
            try:
                return self._construct_llama(logits_all, draft_model)
            finally:
                lib.llama_model_default_params = original

    def _construct_llama(self, logits_all: bool, draft_model: Any) -> Any:
        return self._llama_cpp.Llama(
            model_path=str(self.target_path),
            n_ctx=self.n_ctx,
            n_batch=512,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            n_gpu_layers=0,
            logits_all=logits_all,
            flash_attn=self.flash_attn,
            draft_model=draft_model,
            verbose=False,
        )

    @property
    def plain(self) -> Any:
        if self._plain is None:
            self._plain = self._new_llama(logits_all=False)
        return self._plain

    @property
    def speculative(self) -> Any:
        if self._speculative is None:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # optional: see _import_llama

            # The draft model is swapped per call; any draft_model makes Llama keep all logits.
            self._speculative = self._new_llama(logits_all=True, draft_model=LlamaPromptLookupDecoding())
        return self._speculative

    @property
    def draft_backend(self) -> Any:
        if self._draft_backend is None:
            if self.draft_path is None:
                raise ValueError("draft-model speculation needs a draft model path")
            self._draft_backend = LlamaCppBackend.load(
                self.draft_path, n_ctx=self.n_ctx, n_threads=self.n_threads, repack=self.repack
            )
        return self._draft_backend

    def set_draft(self, draft_path: str | Path) -> None:
        """Use ``draft_path`` as the draft model (a different file than before is loaded on next use)."""
        path = Path(draft_path).expanduser()
        if not path.is_file():
            raise ModelError(f"model file not found: {path}", "run `codecue models pull`")
        if self.draft_path is not None and path.resolve() == self.draft_path.resolve():
            return
        if self._draft_backend is not None:
            self._draft_backend.close()
            self._draft_backend = None
        self.draft_path = path

    def close(self) -> None:
        """Free every loaded model."""
        for llm in (self._plain, self._speculative):
            if llm is not None:
                llm.close()
        if self._draft_backend is not None:
            self._draft_backend.close()
        self._plain = self._speculative = self._draft_backend = None

    def __enter__(self) -> LlamaCppPeers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the modes -------------------------------------------------------------------------------

    def target_only(
        self, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int] | None = None
    ) -> tuple[list[int], Timings]:
        """llama.cpp's plain greedy decode of the target."""
        with self._lock:
            return self._run(self.plain, prompt_ids, max_new_tokens, stop_ids)

    def prompt_lookup(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        stop_ids: Collection[int] | None = None,
        *,
        num_pred_tokens: int = 10,
        max_ngram_size: int = 2,
    ) -> tuple[list[int], Timings]:
        """llama-cpp-python's prompt-lookup speculative decoding (its defaults: 10 tokens, 2-grams)."""
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding  # optional: see _import_llama

        with self._lock:
            llm = self.speculative
            lookup = LlamaPromptLookupDecoding(max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens)
            counted = CountingDraftModel(lookup)
            llm.draft_model = counted
            ids, timings = self._run(llm, prompt_ids, max_new_tokens, stop_ids)
            timings.update(counted.stats())
            return ids, timings

    def draft_model(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        stop_ids: Collection[int] | None = None,
        *,
        draft_max: int = 4,
        p_min: float = 0.75,
    ) -> tuple[list[int], Timings]:
        """Draft-model speculation in llama-cpp-python's loop, drafting like llama.cpp's common_speculative."""
        with self._lock:
            llm = self.speculative
            drafter = GreedyDraftModel(self.draft_backend, draft_max=draft_max, p_min=p_min)
            llm.draft_model = drafter
            ids, timings = self._run(llm, prompt_ids, max_new_tokens, stop_ids)
            timings.update(drafter.stats())
            return ids, timings

    def _run(
        self, llm: Any, prompt_ids: Sequence[int], max_new_tokens: int, stop_ids: Collection[int] | None
    ) -> tuple[list[int], Timings]:
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        if len(prompt_ids) + max_new_tokens > self.n_ctx:
            raise ValueError(f"{len(prompt_ids)} + {max_new_tokens} tokens exceed the context of {self.n_ctx}")
        lib = self._llama_cpp
        vocab = lib.llama_model_get_vocab(llm.model)
        is_stop = (lambda t: t in stop_ids) if stop_ids is not None else (lambda t: lib.llama_vocab_is_eog(vocab, t))
        llm.reset()  # a cold prompt every call: no KV reuse from the previous call
        generated: list[int] = []
        t_start = time.perf_counter()
        t_first: float | None = None
        tokens: Iterator[int] = llm.generate(
            list(prompt_ids), top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True
        )
        try:
            for token in tokens:
                if t_first is None:
                    t_first = time.perf_counter()
                if is_stop(token):
                    break
                generated.append(int(token))
                if len(generated) >= max_new_tokens:
                    break
        finally:
            tokens.close()  # type: ignore[attr-defined]
        t_end = time.perf_counter()
        t_first = t_first or t_end
        n = len(generated)
        return generated, {
            "ttft_ms": (t_first - t_start) * 1e3,
            "tpot_ms": (t_end - t_first) * 1e3 / (n - 1) if n > 1 else 0.0,
            "total_ms": (t_end - t_start) * 1e3,
            "prompt_tokens": float(len(prompt_ids)),
            "new_tokens": float(n),
        }


class CountingDraftModel:
    """A draft model for llama-cpp-python's ``draft_model`` hook (its ``LlamaDraftModel`` protocol: called
    with the context's ids, returns the draft's) that counts its calls, time, drafted and accepted tokens.
    Not a subclass: importing llama-cpp-python loads llama.cpp's library, which must wait until the CPU
    class is chosen.

    llama-cpp-python does not report acceptance, so it is read off the context: the tokens committed
    between two calls are the accepted prefix of the previous draft plus the target's own token.
    A draft still pending when generation stops is not counted.
    """

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.calls = 0
        self.drafted = 0
        self.accepted = 0
        self.seconds = 0.0
        self._pending: list[int] = []
        self._pending_at = 0

    def propose(self, context: list[int]) -> list[int]:
        return [int(t) for t in self.inner(np_intc(context))]

    def __call__(self, input_ids: Any, /, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        context = [int(t) for t in input_ids]
        if self._pending and len(context) > self._pending_at:
            committed = context[self._pending_at :]
            n = 0
            while n < min(len(committed), len(self._pending)) and committed[n] == self._pending[n]:
                n += 1
            self.drafted += len(self._pending)
            self.accepted += n
        draft = self.propose(context)
        self._pending, self._pending_at = draft, len(context)
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return np_intc(draft)

    def stats(self) -> dict[str, float]:
        return {"draft_calls": float(self.calls), "drafted": float(self.drafted),
                "accepted": float(self.accepted), "draft_ms": self.seconds * 1e3}


def np_intc(tokens: Sequence[int]) -> Any:
    return np.asarray(tokens, dtype=np.intc)


class GreedyDraftModel(CountingDraftModel):
    """A GGUF draft model behind llama-cpp-python's ``LlamaDraftModel`` hook.

    Keeps its own KV cache in sync with the target's context by longest common prefix, then drafts greedily
    up to ``draft_max`` tokens, stopping before a token whose draft probability is under ``p_min``.
    """

    def __init__(self, backend: Any, draft_max: int = 4, p_min: float = 0.75) -> None:
        super().__init__()
        if draft_max < 1:
            raise ValueError(f"draft_max must be >= 1, got {draft_max}")
        self.seq = CachedSequence(backend)
        self.seq.reset()
        self.draft_max = draft_max
        self.p_min = p_min

    def propose(self, context: list[int]) -> list[int]:
        draft: list[int] = []
        logits = torch.as_tensor(self.seq.sync(context, 1)[-1])
        for i in range(self.draft_max):
            # llama.cpp's draft sampler keeps the top 10 candidates, so p is normalised over those.
            top = torch.topk(logits, 10)
            p = float(torch.softmax(top.values, dim=-1)[0])
            token = int(top.indices[0])
            if p < self.p_min:
                break
            draft.append(token)
            if i + 1 < self.draft_max:
                logits = torch.as_tensor(self.seq.extend([token])[-1])
        return draft


_peers: dict[str, LlamaCppPeers] = {}
_peers_lock = threading.Lock()


def get_peers(target_path: str | Path, draft_path: str | Path | None = None, **kwargs: Any) -> LlamaCppPeers:
    """The shared :class:`LlamaCppPeers` for this target (loaded on first use, then reused).

    A ``draft_path`` attaches (or replaces) the draft model of the shared instance.
    """
    key = str(Path(target_path).expanduser().resolve())
    with _peers_lock:
        if key not in _peers:
            _peers[key] = LlamaCppPeers(target_path, draft_path, **kwargs)
        peers = _peers[key]
        if draft_path is not None:
            peers.set_draft(draft_path)
        return peers
