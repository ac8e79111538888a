"""llama.vim's ``/infill`` client: the requests llama.vim sends to llama-server, for the peer in the same run.

llama.vim (Vim/Neovim) with llama.cpp's llama-server is what users of the weak CPU class run instead of
CodeCue. This module rebuilds its requests from the plugin's source, `ggml-org/llama.vim`
``autoload/llama.vim`` at a1c8e6e4 (2026-01-31): ``s:default_config`` (the defaults), ``s:fim_ctx_local``
(prefix, middle, suffix), ``llama#fim`` (the request, the hashes of its result cache, the chunk
eviction around the cursor, the chunks picked when the cursor moved far), ``s:pick_chunk`` /
``s:ring_update`` / ``s:ring_get_extra`` (the ring of extra context), ``s:chunk_sim``, ``s:fim_try_hint``
(the cache lookup, 128 characters back) and ``s:fim_render`` (what of the answer is shown).

The request, llama.vim's defaults:

- ``input_prefix``: up to ``n_prefix`` = 256 lines before the cursor's line, each ending in a newline;
  ``input_suffix``: the rest of the cursor's line, a newline, up to ``n_suffix`` = 64 lines after it and a
  newline; ``prompt``: the cursor's line up to the cursor. On a line of only whitespace the prompt and the
  line's rest are empty (the model writes the indentation; the render strips what the line has).
- ``input_extra``: the ring, ``{filename, text}`` chunks, oldest first: new chunks are appended and the
  oldest dropped past ``ring_n_chunks`` = 16, so the front stays the same between requests and the server
  (``cache_prompt``, ``--cache-reuse 256``) evaluates it once. A chunk is up to ``ring_chunk_size / 2 + 1``
  = 33 consecutive lines picked at random from a stretch of a buffer (``s:pick_chunk``): around the cursor
  when a buffer is entered, left or written, and, when the cursor moved more than 32 lines since the last
  pick, the stretch before the prefix (up to ``ring_scope`` = 1024 lines back) and the 64 lines after the
  suffix. Picked chunks wait in a queue (at most 16) and ``s:ring_update`` moves one into the ring every
  ``ring_update_ms`` = 1000 ms while the editor is idle (normal mode, or the cursor still for 3 s), sending the
  new ring with ``n_predict`` 0 so the server evaluates it before the next completion. At each completion the
  ring's chunks that resemble (``s:chunk_sim`` > 0.5) a random 33-line window around the cursor are evicted.
- ``n_predict`` 128, ``stop`` [], ``n_indent`` (the cursor line's indentation), ``top_k`` 40, ``top_p``
  0.90, ``samplers`` ["top_k", "top_p", "infill"], ``cache_prompt`` true, ``t_max_prompt_ms`` 500 (the server
  ignores it), ``t_max_predict_ms`` 250 for a request at the cursor and 1000 for the speculative one sent
  after a suggestion shows (as if it were accepted), ``id_slot`` 0, ``model`` "" (llama.vim tests the length
  of the *name* ``"g:llama_config.model_fim"``, so it always sends the empty default), ``response_fields``.

The server as llama.vim's README starts it for this model (``llama-server --fim-qwen-1.5b-default``):
``-b 1024 -ub 1024 -c 0 --cache-reuse 256`` (:func:`llama_vim_server_config`). It renders the request
(``format_prompt_infill``) as ``<|repo_name|>myproject``, ``<|file_sep|>filename`` + text per extra chunk,
``<|file_sep|>filename``, then ``<|fim_prefix|>`` input_prefix + prompt ``<|fim_suffix|>`` input_suffix
``<|fim_middle|>``: the ``prompt`` ends the prefix (its README shows it after ``<|fim_middle|>``). It keeps
the last 768 prefix tokens (3/4 of the batch), the first 254 suffix tokens less the prompt's, and the last
extra tokens that fit the context less a batch.

What the bench changes, each said where it is used: ``top_k`` 1 where outputs are compared (greedy, so that
exact match means the same as for CodeCue's greedy variants); ``n_predict`` the bench's token limit;
``stream`` true where the first text is timed (llama.vim waits for the whole answer: its time is the
final answer's); ``response_fields`` also ask for ``timings/cache_n``, ``tokens`` and ``stop_type``.

Simplified where llama.vim follows editor events: a buffer is a list of lines and the cursor a
(row, character) pair (llama.vim counts bytes; the corpus is ASCII); Vim's ``rand()`` is a seeded
:class:`random.Random`; chunks carry no ``time`` (the server ignores it); no ``Authorization`` header
(llama.vim sends ``Bearer `` with the empty key; the server has no key). Which editor events happen when,
and so when the ring is updated, is the caller's: :meth:`LlamaVimClient.buffer_entered`,
:meth:`LlamaVimClient.ring_update`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from codecue_bench.llama_server import Infill, LlamaServer, ServerConfig

#: where the request shape comes from
LLAMA_VIM_SOURCE = "github.com/ggml-org/llama.vim autoload/llama.vim @ a1c8e6e4 (2026-01-31)"
#: the peer's name in reports
PEER_NAME = "llama-server/llama.vim"
#: llama-server as `llama-server --fim-qwen-1.5b-default` starts it (common/arg.cpp): batch and micro-batch
#: 1024, the model's own context (-c 0), reuse of cached chunks of at least 256 tokens by shifting them
SERVER_FLAGS = ("-b", "1024", "-ub", "1024", "--cache-reuse", "256")
SERVER_N_CTX = 0
#: llama#fim's samplers and the fields it asks back
SAMPLERS = ("top_k", "top_p", "infill")
RESPONSE_FIELDS = ("content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                   "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                   "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached")
#: what the bench asks for besides (what was reused, the token ids, why it stopped)
BENCH_RESPONSE_FIELDS = ("timings/cache_n", "tokens", "stop_type")
HASH_MARK = "Î"  # llama.vim's separator between prefix+middle and suffix in its cache keys
LOOK_BACK = 128  # s:fim_try_hint: characters back to look for a cached completion that the typing follows
IDLE_S = 3.0  # s:ring_update: in insert mode, the cursor still this long
SIMILAR_EVICT = 0.9  # s:pick_chunk: a new chunk evicts (or is dropped for) chunks this similar
SIMILAR_CURSOR = 0.5  # llama#fim: ring chunks this similar to the text around the cursor are evicted


@dataclass(frozen=True)
class LlamaVimSettings:
    """``g:llama_config``'s defaults that shape a request (``s:default_config``), and llama#fim's constants."""

    n_prefix: int = 256
    n_suffix: int = 64
    n_predict: int = 128
    stop_strings: tuple[str, ...] = ()
    t_max_prompt_ms: int = 500
    t_max_predict_ms: int = 1000
    t_max_predict_first_ms: int = 250  # llama#fim: "the first request is quick"
    max_line_suffix: int = 8
    max_cache_keys: int = 250
    ring_n_chunks: int = 16
    ring_chunk_size: int = 64
    ring_scope: int = 1024
    ring_update_ms: int = 1000
    ring_queue_max: int = 16  # s:pick_chunk: "TODO: become parameter ?"
    top_k: int = 40
    top_p: float = 0.90
    model_fim: str = ""

    def greedy(self) -> LlamaVimSettings:
        """The same with ``top_k`` 1: the ``infill`` sampler then keeps the one candidate, greedy decoding."""
        return replace(self, top_k=1)


def llama_vim_server_config(target: Path, label: str = PEER_NAME) -> ServerConfig:
    """llama-server on ``target`` as llama.vim's README starts it (start it with ``n_ctx=SERVER_N_CTX``)."""
    return ServerConfig(label, target, flags=SERVER_FLAGS)


def buffer_lines(text: str) -> list[str]:
    """A text as Vim's buffer lines (a final newline ends the last line; it is no empty line of its own)."""
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def getline(lines: Sequence[str], first: int, last: int) -> list[str]:
    """Vim's ``getline(first, last)``: lines ``first``..``last``, 1-based and inclusive; [] when first > last."""
    first = max(1, first)
    return list(lines[first - 1:last]) if first <= last else []


def _line(lines: Sequence[str], y: int) -> str:
    return lines[y - 1] if 1 <= y <= len(lines) else ""


def _blank(line: str) -> bool:
    return re.fullmatch(r"[ \t]*", line) is not None  # Vim's '^\s*$' (\s: space or tab)


def _words(lines: Sequence[str]) -> list[str]:
    return [w for w in re.split(r"[^0-9A-Za-z_]+", "\n".join(lines)) if w]  # split(..., '\W\+')


def chunk_similarity(c0: Sequence[str], c1: Sequence[str]) -> float:
    """``s:chunk_sim``: 2 x (words of c1 found among c0's) / (words of both), counted with repeats."""
    words0, words1 = _words(c0), _words(c1)
    if not words0 and not words1:
        return 1.0
    seen = set(words0)
    return 2.0 * sum(w in seen for w in words1) / (len(words0) + len(words1))


@dataclass(frozen=True)
class Chunk:
    """A ring entry: lines of a buffer, and the buffer's name (``expand('%')``)."""

    data: tuple[str, ...]
    filename: str

    @property
    def text(self) -> str:
        return "\n".join(self.data) + "\n"


class ChunkRing:
    """The extra context: ``s:ring_chunks`` (sent, oldest first) and ``s:ring_queued`` (waiting)."""

    def __init__(self, settings: LlamaVimSettings, rng: random.Random) -> None:
        self.settings = settings
        self.rng = rng
        self.chunks: list[Chunk] = []
        self.queued: list[Chunk] = []
        self.n_evict = 0

    def window(self, text: Sequence[str]) -> list[str]:
        """A random ``ring_chunk_size / 2 + 1``-line window of ``text`` (``s:rand`` and Vim's inclusive slice)."""
        half = self.settings.ring_chunk_size // 2
        l0 = self.rng.randint(0, max(0, len(text) - half))
        l1 = min(l0 + half, len(text))
        return list(text[l0:l1 + 1])

    def pick(self, text: Sequence[str], filename: str, *, do_evict: bool) -> None:
        """``s:pick_chunk`` (its ``no_mod`` test, of the buffer, is the caller's): queue a chunk of ``text``."""
        if self.settings.ring_n_chunks <= 0 or len(text) < 3:
            return
        chunk = list(text) if len(text) + 1 < self.settings.ring_chunk_size else self.window(text)
        data = tuple(chunk)
        if any(c.data == data for c in self.chunks) or any(c.data == data for c in self.queued):
            return
        for pool in (self.queued, self.chunks):
            for i in range(len(pool) - 1, -1, -1):
                if chunk_similarity(pool[i].data, chunk) > SIMILAR_EVICT:
                    if not do_evict:
                        return
                    del pool[i]
                    self.n_evict += 1
        if len(self.queued) == self.settings.ring_queue_max:
            del self.queued[0]
        self.queued.append(Chunk(data, filename))

    def update(self) -> bool:
        """``s:ring_update``'s move: the first queued chunk to the ring's end (the oldest leaves a full ring)."""
        if not self.queued:
            return False
        if len(self.chunks) == self.settings.ring_n_chunks:
            del self.chunks[0]
        self.chunks.append(self.queued.pop(0))
        return True

    def evict_similar(self, chunk: Sequence[str], threshold: float = SIMILAR_CURSOR) -> None:
        for i in range(len(self.chunks) - 1, -1, -1):
            if chunk_similarity(self.chunks[i].data, chunk) > threshold:
                del self.chunks[i]
                self.n_evict += 1

    def extra(self) -> list[dict[str, str]]:
        """``s:ring_get_extra``: the ring as ``input_extra``, oldest first."""
        return [{"text": c.text, "filename": c.filename} for c in self.chunks]


@dataclass(frozen=True)
class LocalContext:
    """``s:fim_ctx_local``'s result."""

    prefix: str
    middle: str
    suffix: str
    indent: int
    line_cur: str
    line_cur_prefix: str
    line_cur_suffix: str


def local_context(lines: Sequence[str], row: int, col: int, prev: Sequence[str] = (), *,
                  settings: LlamaVimSettings = LlamaVimSettings(), indent_last: int = -1) -> LocalContext:
    """The prefix, middle (``prompt``) and suffix at (``row``, ``col``), 0-based; with ``prev`` (a suggestion's
    lines), as if it had been accepted there (the speculative request)."""
    y = row + 1
    n_prefix, n_suffix, max_y = settings.n_prefix, settings.n_suffix, len(lines)
    if not prev:
        line_cur = _line(lines, y)
        cur_prefix, cur_suffix = line_cur[:col], line_cur[col:]
        lines_prefix = getline(lines, max(1, y - n_prefix), y - 1)
        lines_suffix = getline(lines, y + 1, min(max_y, y + n_suffix))
        if _blank(line_cur):  # a line of only whitespace: start from the beginning of the line
            indent, cur_prefix, cur_suffix = 0, "", ""
        else:
            indent = len(line_cur) - len(line_cur.lstrip(" \t"))
    else:
        line_cur = _line(lines, y) + prev[0] if len(prev) == 1 else prev[-1]
        cur_prefix, cur_suffix = line_cur, ""
        lines_prefix = getline(lines, max(1, y - n_prefix + len(prev) - 1), y - 1)
        if len(prev) > 1:
            lines_prefix += [_line(lines, y) + prev[0], *prev[1:-1]]  # Vim's a:prev[1:-2] is inclusive
        lines_suffix = getline(lines, y + 1, min(max_y, y + n_suffix))
        indent = indent_last
    return LocalContext("\n".join(lines_prefix) + "\n", cur_prefix, cur_suffix + "\n" + "\n".join(lines_suffix) + "\n",
                        indent, line_cur, cur_prefix, cur_suffix)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_hashes(ctx: LocalContext) -> list[str]:
    """llama#fim's cache keys: the context, and the context with its prefix's first 1, 2, 3 lines gone."""
    hashes = [_sha(ctx.prefix + ctx.middle + HASH_MARK + ctx.suffix)]
    trimmed = ctx.prefix
    for _ in range(3):
        trimmed = re.sub(r"^[^\n]*\n", "", trimmed, count=1)
        if not trimmed:
            break
        hashes.append(_sha(trimmed + ctx.middle + HASH_MARK + ctx.suffix))
    return hashes


@dataclass(frozen=True)
class FimRequest:
    """One llama#fim request: the JSON body, the cache keys its answer is stored under, where it was asked."""

    body: dict[str, Any]
    hashes: tuple[str, ...]
    row: int
    col: int
    prev: tuple[str, ...] = ()
    context: LocalContext | None = field(default=None, compare=False)


class LlamaVimClient:
    """llama.vim's state in one editor: the ring of extra chunks, the completion cache, and what llama#fim keeps
    between calls; it builds the requests (:meth:`fim_request`) and sends them to a llama-server
    (:meth:`complete`, :meth:`send`).

    ``greedy`` sends ``top_k`` 1; ``n_predict`` overrides llama.vim's 128; ``seed`` seeds the random chunk
    windows (Vim's ``rand()``)."""

    def __init__(self, server: LlamaServer | None = None, settings: LlamaVimSettings = LlamaVimSettings(), *,
                 greedy: bool = False, n_predict: int | None = None, seed: int | str = 0) -> None:
        settings = settings.greedy() if greedy else settings
        self.settings = replace(settings, n_predict=n_predict) if n_predict is not None else settings
        self.server = server
        self.rng = random.Random(seed)
        self.ring = ChunkRing(self.settings, self.rng)
        self.cache: OrderedDict[str, str] = OrderedDict()  # hash -> the suggestion's text (g:cache_data)
        self.indent_last = -1  # s:indent_last
        self.pos_y_pick = -9999  # s:pos_y_pick: the line where chunks were last picked (1-based)

    # -- the ring --------------------------------------------------------------------------------------
    def buffer_entered(self, lines: Sequence[str], row: int, filename: str, *, modified: bool = False) -> None:
        """BufEnter, BufLeave, BufWritePost: a chunk from ``ring_chunk_size / 2`` lines either side of the
        cursor, unless the buffer has unsaved changes (``no_mod``)."""
        if modified:
            return
        y, half = row + 1, self.settings.ring_chunk_size // 2
        self.ring.pick(getline(lines, max(1, y - half), min(y + half, len(lines))), filename, do_evict=True)

    def open_files(self, files: Iterable[tuple[str, str]]) -> None:
        """Each of ``files`` (name, text) entered with the cursor on its first line, then the editor idle until
        the ring has taken every queued chunk: the ring a user has after opening them."""
        for name, text in files:
            self.buffer_entered(buffer_lines(text), 0, name)
        while self.ring.update():
            pass

    def ring_update(self) -> dict[str, Any] | None:
        """``s:ring_update``'s work (the caller decides the editor is idle): move one queued chunk into the ring
        and return the request that has the server evaluate the new ring; None when nothing was queued."""
        if not self.ring.update():
            return None
        body: dict[str, Any] = {
            "id_slot": 0, "input_prefix": "", "input_suffix": "", "input_extra": self.ring.extra(), "prompt": "",
            "n_predict": 0, "temperature": 0.0, "samplers": [], "stream": False, "cache_prompt": True,
            "t_max_prompt_ms": 1, "t_max_predict_ms": 1, "response_fields": [""], "model": self.settings.model_fim,
        }
        return body

    # -- completion ------------------------------------------------------------------------------------
    def fim_request(self, lines: Sequence[str], row: int, col: int, filename: str, *, is_auto: bool = True,
                    prev: Sequence[str] = (), use_cache: bool = True, cursor_row: int | None = None,
                    stream: bool = False) -> FimRequest | None:
        """llama#fim at (``row``, ``col``) of ``lines`` (the buffer ``filename``): the request, or None where
        llama.vim sends none (more than ``max_line_suffix`` characters after the cursor on an automatic
        request; a cached answer). Evicts ring chunks like the text around the cursor (``cursor_row``, default
        ``row``: llama.vim takes ``line('.')``) and, when the cursor moved more than 32 lines since the last
        pick, queues chunks before the prefix and after the suffix, as llama#fim does."""
        s = self.settings
        ctx = local_context(lines, row, col, prev, settings=s, indent_last=self.indent_last)
        if is_auto and len(ctx.line_cur_suffix) > s.max_line_suffix:
            return None
        t_max_predict_ms = s.t_max_predict_ms if prev else s.t_max_predict_first_ms
        hashes = context_hashes(ctx)
        if use_cache and any(self.cached(h) is not None for h in hashes):
            return None
        self.indent_last = ctx.indent
        cy, half = (row if cursor_row is None else cursor_row) + 1, s.ring_chunk_size // 2
        self.ring.evict_similar(self.ring.window(getline(lines, max(1, cy - half), min(cy + half, len(lines)))))
        body: dict[str, Any] = {
            "id_slot": 0,
            "input_prefix": ctx.prefix,
            "input_suffix": ctx.suffix,
            "input_extra": self.ring.extra(),
            "prompt": ctx.middle,
            "n_predict": s.n_predict,
            "stop": list(s.stop_strings),
            "n_indent": ctx.indent,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "samplers": list(SAMPLERS),
            "stream": stream,
            "cache_prompt": True,
            "t_max_prompt_ms": s.t_max_prompt_ms,
            "t_max_predict_ms": t_max_predict_ms,
            "response_fields": [*RESPONSE_FIELDS, *BENCH_RESPONSE_FIELDS],
            "return_tokens": True,  # the bench's: the token ids (decoding does not change)
            "model": s.model_fim,
        }
        y = row + 1
        if is_auto and abs(y - self.pos_y_pick) > 32:  # gather context nearby when the cursor moved far
            max_y = len(lines)
            self.ring.pick(getline(lines, max(1, y - s.ring_scope), max(1, y - s.n_prefix)), filename,
                           do_evict=False)
            self.ring.pick(getline(lines, min(max_y, y + s.n_suffix), min(max_y, y + s.n_suffix + s.ring_chunk_size)),
                           filename, do_evict=False)
            self.pos_y_pick = y
        return FimRequest(body, tuple(hashes), row, col, tuple(prev), ctx)

    def send(self, request: FimRequest, *, stream: bool | None = None, on_first_content: Any = None) -> Infill:
        """Send ``request`` to the server and keep its answer in the cache under the request's hashes."""
        if self.server is None:
            raise ValueError("this llama.vim client has no server")
        answer = self.server.infill(request.body, stream=stream, on_first_content=on_first_content)
        self.remember(request, answer.content)
        return answer

    def complete(self, lines: Sequence[str], row: int, col: int, filename: str, **kwargs: Any) -> Infill | None:
        """:meth:`fim_request` and :meth:`send`; None where llama.vim sends nothing."""
        request = self.fim_request(lines, row, col, filename, **kwargs)
        return None if request is None else self.send(request)

    # -- the result cache (g:cache_data, LRU) ----------------------------------------------------------
    def remember(self, request: FimRequest, content: str) -> None:
        for key in request.hashes:  # s:cache_insert: evicts the least recently used first, even on an update
            if len(self.cache) > self.settings.max_cache_keys - 1:
                self.cache.popitem(last=False)
            self.cache[key] = content
            self.cache.move_to_end(key)

    def cached(self, key: str) -> str | None:
        if key not in self.cache:
            return None
        self.cache.move_to_end(key)
        return self.cache[key]

    def cached_hint(self, lines: Sequence[str], row: int, col: int) -> str | None:
        """``s:fim_try_hint``'s lookup: the cached answer here, or one cached up to 128 characters back whose
        text the characters typed since begin (the rest of it)."""
        ctx = local_context(lines, row, col, settings=self.settings)
        found = self.cached(_sha(ctx.prefix + ctx.middle + HASH_MARK + ctx.suffix))
        if found is not None:
            return found
        pm, best = ctx.prefix + ctx.middle, 0
        for i in range(min(LOOK_BACK, len(pm))):
            removed = pm[len(pm) - (1 + i):]
            content = self.cached(_sha(pm[:len(pm) - (1 + i)] + HASH_MARK + ctx.suffix))
            if not content or content[:i + 1] != removed:
                continue
            rest = content[i + 1:]
            if rest:
                # llama.vim's choice, kept: the first found, replaced by any later one longer than `best`,
                # which it only updates on a replacement
                if found is None:
                    found = rest
                elif len(rest) > best:
                    best, found = len(rest), rest
        return found


def render(content: str, lines: Sequence[str], row: int, col: int) -> tuple[list[str], bool]:
    """``s:fim_render``'s processing of an answer at (``row``, ``col``): the suggestion's lines as shown (the
    first from the cursor on, the line's rest appended to the last) and whether it can be accepted (not
    empty, not all whitespace, not a repetition of the lines that follow)."""
    parts = content.split("\n")
    while parts and parts[-1] == "":
        parts.pop()
    can_accept = bool(parts)
    if not parts:
        parts = [""]
    y = row + 1
    line_cur = _line(lines, y)
    if _blank(line_cur):  # trim as much leading whitespace from the suggestion as the line has
        lead = min(len(parts[0]) - len(parts[0].lstrip(" \t")), len(line_cur))
        line_cur, parts[0] = parts[0][:lead], parts[0][lead:]
    cur_prefix, cur_suffix = line_cur[:col], line_cur[col:]
    if len(parts) == 1 and parts[0] == "":
        parts = [""]
    if len(parts) > 1 and parts[0] == "" and parts[1:] == getline(lines, y + 1, y + len(parts) - 1):
        parts = [""]
    if len(parts) == 1 and parts[0] == cur_suffix:
        parts = [""]
    cmp_y = y + 1
    while cmp_y < len(lines) and _blank(_line(lines, cmp_y)):
        cmp_y += 1
    if cur_prefix + parts[0] == _line(lines, cmp_y):
        nxt = _line(lines, cmp_y + 1)
        if len(parts) == 1:
            parts = [""]
        elif len(parts) == 2 and parts[-1] == (nxt[:len(parts[-1])] if parts[-1] else nxt):
            parts = [""]  # (Vim's s[:-1] for an empty last line is the whole line)
        elif len(parts) > 2 and "\n".join(parts[1:]) == "\n".join(getline(lines, cmp_y + 1, cmp_y + len(parts) - 1)):
            parts = [""]
    parts[-1] += cur_suffix
    if _blank("\n".join(parts)):
        can_accept = False
    return parts, can_accept


def insertion(content: str, lines: Sequence[str], row: int, col: int) -> str:
    """The answer as text to insert at the cursor: on a line of only whitespace, without as much leading
    whitespace as the line has (``s:fim_render``'s first step; the prompt left the indentation out)."""
    line_cur = _line(lines, row + 1)
    if not _blank(line_cur):
        return content
    first = content.split("\n", 1)[0]
    lead = min(len(first) - len(first.lstrip(" \t")), len(line_cur))
    return content[lead:]
