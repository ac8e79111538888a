"""Peers: decoders other than CodeCue's, timed side by side with its methods in ``codecue bench speed``.

Every peer is one entry of :data:`PEERS`, by the method name it has in the run: a description and a
factory. Given the loaded completer, the configured model pair and the token limit, the factory returns
the function that decodes one point (a :class:`~codecue_bench.runner.RunRecord`, or a string saying why
that point was skipped), or None where the peer cannot run here (not installed, not the model format it
reads); the method is then left out of the run. A new peer is a new entry here.

The ``server-*`` peers are what llama.vim and llama.vscode users run: llama.cpp's own llama-server, built
from the same sources for the same CPU class (:mod:`codecue_bench.llama_server`). The ``py-llama-*`` peers
are CodeCue's own loops written against llama-cpp-python (:mod:`codecue_bench.llamacpp_peers`): Python
re-implementations, kept as references, not what a llama.cpp user runs.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import torch

from codecue.backends.cpu_class import cpu_class, server_binary
from codecue.backends.torch_backend import TorchBackend
from codecue.completion import Completer
from codecue.errors import CodeCueError
from codecue.loading.load import checked_llamacpp_layout
from codecue.loading.resolve import ResolvedConfig
from codecue.models.requantize import AS_IS, offered_layouts, requantized
from codecue.paths import cache_dir
from codecue_bench.llama_server import LlamaServer, standard_configs
from codecue_bench.llamacpp_peers import get_peers
from codecue_bench.openvino_peers import converted_draft_dir, get_openvino_peers
from codecue_bench.points import Point
from codecue_bench.runner import RunRecord

#: decodes one point's prompt: the record, or why the point was skipped
PeerRun = Callable[[Point, list[int]], RunRecord | str]


@dataclass(frozen=True)
class PeerSetting:
    """What a peer factory gets; ``resources`` closes what a peer holds (a server process) when the run ends."""

    completer: Completer
    models: ResolvedConfig  # the configured pair: peers decode the shipped files, not a plan's re-quantized ones
    max_tokens: int
    resources: ExitStack = field(default_factory=ExitStack)


@dataclass(frozen=True)
class Peer:
    description: str
    make: Callable[[PeerSetting], PeerRun | None]
    #: runs next to every backend of the run, labelled with it; else once, next to the first backend
    every_backend: bool = False
    #: serves the draft model (the configured one, or a layout made from it): a report names its file
    drafts_with_model: bool = False


class _TimingStreamer:
    """A transformers streamer that only notes when the first generated token arrives."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_at: float | None = None

    def put(self, value: Any) -> None:
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


def run_hf_assisted(completer: Completer, prompt: list[int], max_tokens: int) -> RunRecord | str:
    """transformers' own assisted generation on the same two models; a reason string when impossible."""
    backends = (completer.target.backend, completer.draft.backend if completer.draft is not None else None)
    if not all(isinstance(backend, TorchBackend) for backend in backends):
        return "needs the torch backend for both models"
    target, draft = (backend.model for backend in backends)
    ids = torch.tensor([prompt])
    streamer = _TimingStreamer()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft, do_sample=False,
                              max_new_tokens=max_tokens, eos_token_id=list(completer.eos_ids),
                              pad_token_id=completer.eos_ids[0], streamer=streamer)
    t1 = time.perf_counter()
    tokens = out[0, len(prompt):].tolist()
    while tokens and tokens[-1] in completer.eos_ids:
        tokens.pop()
    first = streamer.first_token_at or t1
    n = len(tokens)
    return RunRecord("", "", "hf-assisted", tokens, completer.decode(tokens), (first - t0) * 1e3,
                     (t1 - first) * 1e3 / (n - 1) if n > 1 else 0.0, (t1 - t0) * 1e3, n)


def _hf_assisted(setting: PeerSetting) -> PeerRun | None:
    completer = setting.completer
    if completer.runtime != "torch":
        return None
    return lambda point, prompt: run_hf_assisted(completer, prompt, setting.max_tokens)


def _py_llama(mode: str) -> Callable[[PeerSetting], PeerRun | None]:
    """A llama-cpp-python peer on the configured GGUF pair (None without llama-cpp-python or GGUF files)."""

    def make(setting: PeerSetting) -> PeerRun | None:
        target, draft = setting.models.target, setting.models.draft
        if (target.kind != "gguf" or draft is None or draft.kind != "gguf"
                or importlib.util.find_spec("llama_cpp") is None):
            return None
        repack = checked_llamacpp_layout(target.path)  # the layout this machine's check allows, as CodeCue's
        completer = setting.completer

        def run_peer(point: Point, prompt: list[int]) -> RunRecord:
            peers = get_peers(target.path, draft.path if mode == "py-llama-draft" else None, repack=repack)
            decode = {"py-llama-target": peers.target_only, "py-llama-lookup": peers.prompt_lookup,
                      "py-llama-draft": peers.draft_model}[mode]
            ids, t = decode(prompt, setting.max_tokens, stop_ids=completer.eos_ids)
            return RunRecord("", "", mode, list(ids), completer.decode(list(ids)), t["ttft_ms"], t["tpot_ms"],
                             t["total_ms"], len(ids), int(t.get("drafted", 0)), int(t.get("accepted", 0)),
                             int(t.get("draft_calls", 0)))

        return run_peer

    return make


def _openvino(mode: str) -> Callable[[PeerSetting], PeerRun | None]:
    """An OpenVINO GenAI peer on the shipped target GGUF (``ov-draft``: with a Q4_0 copy of the draft)."""

    def make(setting: PeerSetting) -> PeerRun:
        target, draft = setting.models.target, setting.models.draft
        if target.kind != "gguf":
            raise CodeCueError("the OpenVINO peers need a GGUF target")
        draft_dir = None
        if mode == "ov-draft":
            if draft is None:
                raise CodeCueError("the OpenVINO draft peer needs a draft model")
            draft_dir = converted_draft_dir(requantized(draft.path, "q4_0"), cache_dir())
        peers = get_openvino_peers(target.path, draft_dir)
        completer = setting.completer

        def run_peer(point: Point, prompt: list[int]) -> RunRecord:
            decode = peers.target_only if mode == "ov-target" else peers.draft_model
            ids, t = decode(prompt, setting.max_tokens, stop_ids=completer.eos_ids)
            return RunRecord("", "", mode, list(ids), completer.decode(list(ids)), t["ttft_ms"], t["tpot_ms"],
                             t["total_ms"], len(ids))

        return run_peer

    return make


def _llama_server(kind: str, layout: str = AS_IS) -> Callable[[PeerSetting], PeerRun | None]:
    """llama.cpp's llama-server for the CPU class served (:mod:`codecue_bench.llama_server`), on the shipped
    GGUF files or on a layout CodeCue makes here (target and draft re-quantized). One server process per
    configuration, started when the run starts and stopped when it ends; None where it cannot run (not
    built for this class: said once, with the command that builds it)."""

    def make(setting: PeerSetting) -> PeerRun | None:
        target, draft = setting.models.target, setting.models.draft
        if target.kind != "gguf" or draft is None or draft.kind != "gguf":
            return None
        if not server_binary().is_file():
            print(f"codecue bench: llama-server is not built for the {cpu_class()} class; its peers are left out "
                  f"(bash scripts/build_llama_server.sh --class {cpu_class()})", file=sys.stderr)
            return None
        target_file, draft_file, suffix = target.path, draft.path, ""
        if layout != AS_IS:
            if layout not in offered_layouts(target.path):
                return None
            target_file, draft_file = requantized(target.path, layout), requantized(draft.path, layout)
            suffix = f", {layout.upper()} made here"
        configs = {c.label: c for c in standard_configs(target_file, draft_file, suffix=suffix)}
        config = next(c for label, c in configs.items() if label.startswith(f"llama-server {kind}"))
        server = setting.resources.enter_context(LlamaServer(config, n_ctx=setting.models.config.models.n_ctx))
        completer = setting.completer
        name = f"server-{'draft' if kind == '-md draft' else kind}" + (f"-{layout}" if layout != AS_IS else "")

        def run_peer(point: Point, prompt: list[int]) -> RunRecord:
            done = server.complete(prompt, setting.max_tokens)
            tokens = done.tokens
            stop = next((i for i, t in enumerate(tokens) if t in completer.eos_ids), None)
            tokens = tokens if stop is None else tokens[:stop]  # CodeCue's stop tokens, for the identity check
            return RunRecord("", "", name, tokens, completer.decode(tokens), done.ttft_ms, done.tpot_ms,
                             done.total_ms, len(tokens), done.drafted, done.accepted)

        return run_peer

    return make


SERVER_PEERS: dict[str, Peer] = {
    "server-target": Peer("llama.cpp's llama-server (C++, same sources and CPU class): the target alone",
                          _llama_server("target")),
    "server-draft": Peer("llama-server with the draft model (-md, --spec-type draft-simple, --spec-draft-n-max 16)",
                         _llama_server("-md draft"), drafts_with_model=True),
    "server-ngram": Peer("llama-server with its n-gram speculation (--spec-default)", _llama_server("ngram")),
    "server-target-q4_0": Peer("llama-server, the target as CodeCue's Q4_0 layout", _llama_server("target", "q4_0")),
    "server-draft-q4_0": Peer("llama-server with the draft, both as Q4_0 layouts", _llama_server("-md draft", "q4_0"),
                              drafts_with_model=True),
    "server-ngram-q4_0": Peer("llama-server n-gram, the target as Q4_0", _llama_server("ngram", "q4_0")),
}

PEERS: dict[str, Peer] = {
    **SERVER_PEERS,
    "hf-assisted": Peer("transformers' assisted generation (assistant_model=), torch backend", _hf_assisted,
                        every_backend=True, drafts_with_model=True),
    "py-llama-target": Peer("llama-cpp-python, Python loop: greedy target-only (Llama.generate)",
                            _py_llama("py-llama-target")),
    "py-llama-lookup": Peer("llama-cpp-python, Python loop: its prompt-lookup speculative decoding",
                            _py_llama("py-llama-lookup")),
    "py-llama-draft": Peer("llama-cpp-python, Python loop: draft-model speculation re-implemented after "
                           "llama.cpp's common_speculative", _py_llama("py-llama-draft"), drafts_with_model=True),
    "ov-target": Peer("OpenVINO GenAI's greedy target-only decode (GGUF reader)", _openvino("ov-target")),
    "ov-draft": Peer("OpenVINO GenAI's speculative decoding, draft re-quantized to Q4_0", _openvino("ov-draft"),
                     drafts_with_model=True),
}
#: the names the llama-cpp-python peers had before, still accepted (the README's commands, saved runs)
FORMER_NAMES = {"llama-target": "py-llama-target", "llama-lookup": "py-llama-lookup",
                "llama-draft": "py-llama-draft"}
#: the plain decoder CodeCue's methods are also compared with, point by point
PLAIN_PEER = "py-llama-target"


def peer_name(method: str) -> str:
    """A method's name in the run: a peer's former name becomes its current one, anything else stays."""
    return FORMER_NAMES.get(method, method)
