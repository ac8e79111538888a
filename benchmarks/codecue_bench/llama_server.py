"""llama.cpp's own llama-server as a bench peer: what llama.vim and llama.vscode users run.

The server is built from the same patched llama.cpp sources as CodeCue's llama-cpp-python, for the CPU class
being measured (``scripts/build_llama_server.sh``; :func:`codecue.backends.cpu_class.server_binary`), started
by the bench on a free loopback port and stopped after. Each configuration is one server process: the
target alone, the target with the draft model (``-md``, ``--spec-type draft-simple``, ``--spec-draft-n-max``),
the target with llama.cpp's n-gram speculation (``--spec-default``), on the shipped files and on the layouts
CodeCue made. A point is
one ``/completion`` request with CodeCue's own prompt token ids, greedy (``temperature`` 0, ``top_k`` 1),
without prompt caching; time per token and to the first token are the server's own ``timings``.

:meth:`LlamaServer.infill` sends an ``/infill`` request as a client builds it (llama.vim's, in
:mod:`codecue_bench.llamavim`), streamed or not, and returns the text, the token ids, the server's timings
(``cache_n``: prompt tokens reused from the slot's cache, ``prompt_n``: evaluated) and, streamed, when the
first non-empty text arrived.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codecue.backends.cpu_class import cpu_class, server_binary
from codecue.errors import BackendUnavailable, CodeCueError

START_TIMEOUT_S = 300.0  # loading a model and warming it on a slow, loaded machine
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ServerConfig:
    """One way to run llama-server: its label in reports, the model files, and the flags that differ."""

    label: str
    target: Path
    draft: Path | None = None
    flags: tuple[str, ...] = ()

    def argv(self, binary: Path, port: int, threads: int, n_ctx: int) -> list[str]:
        argv = [str(binary), "-m", str(self.target), "--host", "127.0.0.1", "--port", str(port),
                "-t", str(threads), "-c", str(n_ctx), "-np", "1", "--no-webui"]
        if self.draft is not None:
            argv += ["-md", str(self.draft)]
        return [*argv, *self.flags]


def standard_configs(target: Path, draft: Path | None, *, draft_max: int = 16, suffix: str = "") -> list[ServerConfig]:
    """The configurations users run: the target alone, with the draft model, with n-gram speculation.
    ``suffix`` names the layout in the labels (", Q4_0 target")."""
    configs = [ServerConfig(f"llama-server target{suffix}", target),
               ServerConfig(f"llama-server ngram{suffix}", target, flags=("--spec-default",))]
    if draft is not None:
        # A plain draft model needs its type named: the server infers one only for EAGLE/MTP-style drafts.
        configs.insert(1, ServerConfig(f"llama-server -md draft{suffix}", target, draft,
                                       ("--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max))))
    return configs


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Completion:
    tokens: list[int]
    ttft_ms: float  # the server's prompt evaluation (which yields the first token)
    tpot_ms: float  # the server's time per generated token
    total_ms: float
    drafted: int = 0
    accepted: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Infill:
    """An ``/infill`` answer: the text, and what the server said of the prompt and the decode."""

    content: str
    tokens: list[int]
    timings: dict[str, Any]  # the server's: cache_n, prompt_n, prompt_ms, predicted_n, predicted_ms, ...
    stop_type: str  # "eos", "limit" (n_predict, t_max_predict_ms, n_indent), "word", "none"
    total_ms: float  # request sent -> whole answer read (what a non-streaming client waits)
    first_content_ms: float | None = None  # streamed: request sent -> first non-empty text; None when none came
    raw: dict[str, Any] = field(default_factory=dict)  # the final answer as sent (streamed: its last event)

    @property
    def cache_n(self) -> int:
        """Prompt tokens the server took from its cache (the common prefix, and chunks reused by shifting)."""
        return int(self.timings.get("cache_n", 0))

    @property
    def prompt_n(self) -> int:
        """Prompt tokens the server evaluated for this request."""
        return int(self.timings.get("prompt_n", 0))


def _flat_timings(answer: dict[str, Any]) -> dict[str, Any]:
    """The timings of an answer, whether whole (``timings``) or cut by ``response_fields`` (``timings/x``)."""
    timings = dict(answer.get("timings") or {})
    timings.update({key.split("/", 1)[1]: value for key, value in answer.items() if key.startswith("timings/")})
    return timings


def indent_cut(text: str, n_indent: int) -> str:
    """``text`` as llama-server's ``n_indent`` stop leaves it: a last line indented less than ``n_indent`` cut
    at its first other character. A streamed answer has already sent that line's start (the server cuts its
    own text after streaming the token), so a streaming client cuts it as the whole answer would be cut."""
    nl = text.rfind("\n")
    if n_indent <= 0 or nl < 0:
        return text
    line = text[nl + 1:]
    blank = len(line) - len(line.lstrip(" \t"))
    return text[:nl + 1 + blank] if blank < len(line) and blank < n_indent else text


class LlamaServer:
    """A llama-server process for one :class:`ServerConfig`, on loopback; a context manager."""

    def __init__(self, config: ServerConfig, *, binary: Path | None = None, threads: int | None = None,
                 n_ctx: int = 4096) -> None:
        self.config = config
        self.binary = binary or server_binary()
        if not self.binary.is_file():
            raise BackendUnavailable(f"llama-server for the {cpu_class()} class is not built ({self.binary})",
                                     f"bash scripts/build_llama_server.sh --class {cpu_class()}")
        self.threads = threads or len(os.sched_getaffinity(0))
        self.n_ctx = n_ctx
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        import tempfile

        log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(log.name)
        self.process = subprocess.Popen(self.config.argv(self.binary, self.port, self.threads, self.n_ctx),
                                        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CodeCueError(f"llama-server ({self.config.label}) exited with {self.process.returncode} "
                                   f"while starting: {self._log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.close()
        raise CodeCueError(f"llama-server ({self.config.label}) did not come up within {START_TIMEOUT_S:.0f} s")

    def _log_tail(self, lines: int = 5) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])

    def complete(self, prompt: Sequence[int], max_tokens: int) -> Completion:
        """Greedy completion of ``prompt`` (token ids), up to ``max_tokens`` (the model's end-of-generation
        tokens stop it as they stop CodeCue)."""
        body = json.dumps({"prompt": list(prompt), "n_predict": max_tokens, "temperature": 0.0, "top_k": 1,
                           "cache_prompt": False, "return_tokens": True, "stream": False}).encode()
        request = urllib.request.Request(self.url + "/completion", data=body,
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise CodeCueError(f"llama-server ({self.config.label}) answered {exc.code}: "
                               f"{exc.read()[:300].decode(errors='replace')}") from None
        total_ms = (time.perf_counter() - start) * 1e3
        timings = answer.get("timings", {})
        return Completion(tokens=[int(t) for t in answer.get("tokens", [])],
                          ttft_ms=float(timings.get("prompt_ms", 0.0)),
                          tpot_ms=float(timings.get("predicted_per_token_ms", 0.0)), total_ms=total_ms,
                          drafted=int(timings.get("draft_n", 0)), accepted=int(timings.get("draft_n_accepted", 0)),
                          raw=timings)

    def infill(self, body: dict[str, Any], *, stream: bool | None = None,
               on_first_content: Callable[[float], None] | None = None) -> Infill:
        """Send ``body`` to ``/infill`` (``stream`` overrides the body's); streamed, ``on_first_content`` gets
        the :func:`time.perf_counter` time the first non-empty text arrived, in the calling thread."""
        if stream is not None:
            body = {**body, "stream": stream}
        request = urllib.request.Request(self.url + "/infill", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        start = time.perf_counter()
        first: float | None = None
        content: list[str] = []
        tokens: list[int] = []
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                if not body.get("stream"):
                    answer = json.loads(response.read())
                    content.append(str(answer.get("content", "")))
                    tokens += [int(t) for t in answer.get("tokens", [])]
                else:
                    answer = {}
                    for line in response:  # server-sent events: "data: {...}" lines
                        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                            continue
                        event = json.loads(line[6:])
                        piece = str(event.get("content", ""))
                        if piece and first is None:
                            first = time.perf_counter()
                            if on_first_content is not None:
                                on_first_content(first)
                        content.append(piece)  # the last event, with the timings, has none
                        tokens += [int(t) for t in event.get("tokens", [])]
                        answer = event
                        if event.get("stop"):
                            break
        except urllib.error.HTTPError as exc:
            raise CodeCueError(f"llama-server ({self.config.label}) answered {exc.code}: "
                               f"{exc.read()[:300].decode(errors='replace')}") from None
        total_ms = (time.perf_counter() - start) * 1e3
        text = "".join(content)
        if body.get("stream"):
            text = indent_cut(text, int(body.get("n_indent", 0)))
        return Infill(text, tokens, _flat_timings(answer), str(answer.get("stop_type", "none")),
                      total_ms, None if first is None else (first - start) * 1e3, answer)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self.process = None
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
