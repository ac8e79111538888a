"""``codecue bench quality``: what completions say, on held-out multi-file projects.

Each point removes one line of a project file (from its indentation to its end; in every other point
the line's first words stay, as if typed: :func:`typed_point`); the model sees the rest of the file
around the cursor and, depending on the variant, context from the project's other
files. A point is *cross-file* when the removed line uses a name that only another file of the project
defines: there the answer depends on the context.

Metrics, per prompt variant: exact match of the first line, edit similarity (normalized Levenshtein)
of the shown completion to the removed line, how often the model's raw output repeats the code after
the cursor (before :func:`~codecue.engine.postprocess.tidy_completion` removes it), and how often the
shown completion stops in the right place (exactly the one line that was removed).

Variants run one after another over all points (variant-major), so consecutive prompts of one variant
share their beginning and the KV cache does the rest: the run measures quality, not speed. A full prompt
is decoded from the cache the server holds once it was idle at the place (what shifting kept evaluated
again: ``Completer.warm(fresh=True)``); a ``/first`` prompt from the cache as the point before left it,
shifted where runs of it reappear, as the first request after a jump finds it.

Two variants stand for llama.vim: ``codecue/llama.vim`` renders a llama.vim-shaped prompt within CodeCue's
budget and decodes it on CodeCue's own backend; ``llama-server/llama.vim`` is the peer itself, llama.vim's
request (:mod:`codecue_bench.llamavim`) sent to llama.cpp's llama-server started as llama.vim's README
starts it, greedy (``top_k`` 1, else llama.vim's defaults), as the first suggestion at a new place: the
project's other files opened before (their chunks in the ring), the request right after the file is
opened at the point.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rapidfuzz.distance import Levenshtein

from codecue.completion import Completer
from codecue.context.chunks import ChunkPool, query_around
from codecue.context.imports import ImportedFiles
from codecue.document import DocumentStore
from codecue.engine.fim import (
    FILE_SEP,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    LAYOUTS,
    REPO_NAME,
    WINDOW_FLOOR,
    PromptBudget,
    build_fim_text,
    shorter_budgets,
)
from codecue.engine.postprocess import suffix_repeat_cut, tidy_completion
from codecue.errors import CodeCueError
from codecue.models.flags import add_model_arguments, config_from_args
from codecue.request import CompletionRequest, JobKind, PreparedJob, RequestOptions, cursor_in, prepare
from codecue.server.lsp.prompt import project_context, uri_to_path
from codecue_bench.llama_server import LlamaServer
from codecue_bench.llamavim import (
    PEER_NAME,
    SERVER_N_CTX,
    LlamaVimClient,
    buffer_lines,
    insertion,
    llama_vim_server_config,
)
from codecue_bench.points import CORPUS_DIR, LANGUAGES, language_of
from codecue_bench.report import format_quality_summary, report_meta, shipped_target, write_report

PROJECTS_DIR = CORPUS_DIR / "projects"
CONTEXTS = ("none", "heads", "chunks", "imports")
# The prompt budget every variant gets (tokens): the server's own, so that "the full prompt" is what an
# editor gets once its cache holds the place, and a window is compared with that.
_SERVER_BUDGET = PromptBudget()
QUALITY_BUDGET = dict(total=_SERVER_BUDGET.total, suffix=_SERVER_BUDGET.suffix, extra=_SERVER_BUDGET.extra,
                      anchor_lines=_SERVER_BUDGET.anchor_lines)
# Prompt tokens beyond the context that the server evaluates at a new place where its first-text time
# allows less than the floor (a 2-core CPU); `--first-tokens` sets another.
FIRST_TOKENS = WINDOW_FLOOR

DEFINITION = {
    "python": re.compile(r"^\s*(?:def|class)\s+(\w+)|^([A-Z_][A-Z0-9_]+)\s*[:=]"),
    "typescript": re.compile(r"\b(?:function|class|interface|type|const|enum)\s+(\w+)|^\s+(\w+)\s*[?]?:\s"),
    "go": re.compile(r"^func\s+(?:\([^)]*\)\s*)?(\w+)|^type\s+(\w+)|^var\s+(\w+)|^\t(\w+)\s+[\w\[\]*.]+(?:\s|$)"),
    "rust": re.compile(r"\b(?:fn|struct|enum|trait|const|type)\s+(\w+)|^\s+pub\s+(\w+):|^\s{4}([A-Z]\w+)[\s({,]"),
}
WORD = re.compile(r"[A-Za-z_]\w+")
COMMENT_STARTS = ("#", "//", "/*", "*", '"""')


@dataclass(frozen=True)
class QualityPoint:
    project: str
    path: str  # relative to the project
    language: str
    line: int
    prefix: str
    suffix: str
    hole: str  # the removed part of the line: after its indentation, or after what was typed of it
    cross_file: bool
    others: tuple[tuple[str, str], ...]  # (path, text) of the project's other files
    typed: str = ""  # the start of the line already typed (a mid-line point), else ""

    @property
    def name(self) -> str:
        return f"{self.project}/{self.path}:{self.line}" + (f"+{len(self.typed)}" if self.typed else "")


def typed_point(point: QualityPoint, share: float = 0.3) -> QualityPoint:
    """The same line with its first words typed: the cursor after the first word ending past ``share``
    of the line (where a user typing the line would ask again), the rest of the line the hole."""
    cut = next((m.end() for m in WORD.finditer(point.hole) if m.end() >= share * len(point.hole)), None)
    if cut is None or cut >= len(point.hole.rstrip()):
        return point
    return replace(point, prefix=point.prefix + point.hole[:cut], hole=point.hole[cut:], typed=point.hole[:cut])


def definitions(text: str, language: str) -> set[str]:
    pattern = DEFINITION.get(language)
    if pattern is None:
        return set()
    found = set()
    for line in text.split("\n"):
        for match in pattern.finditer(line):
            found.update(g for g in match.groups() if g)
    return found


def project_points(root: Path = PROJECTS_DIR, languages: Sequence[str] | None = None) -> list[QualityPoint]:
    """Every substantial line of every project file, as a point (see the module docstring)."""
    points = []
    for project in sorted(p for p in root.glob("*/*") if p.is_dir()):
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted(project.iterdir()) if p.is_file()}
        files = {name: text for name, text in files.items() if language_of(Path(name)) != "other"}
        if not files:
            continue
        language = language_of(Path(next(iter(files))))
        if languages and language not in languages:
            continue
        defined = {name: definitions(text, language) for name, text in files.items()}
        for name, text in files.items():
            elsewhere = set().union(*(d for other, d in defined.items() if other != name)) - defined[name]
            others = tuple((other, t) for other, t in files.items() if other != name)
            points += _file_points(project, name, text, language, elsewhere, others)
    return points


def _file_points(project: Path, name: str, text: str, language: str, elsewhere: set[str],
                 others: tuple[tuple[str, str], ...]) -> list[QualityPoint]:
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if i < 3 or len(stripped) < 8 or stripped.startswith(COMMENT_STARTS) or stripped.startswith(("import ", "from ", "use ")):
            continue
        indent = len(line) - len(line.lstrip())
        prefix = "\n".join(lines[:i]) + "\n" + line[:indent]
        suffix = "\n" + "\n".join(lines[i + 1:])
        cross = bool(set(WORD.findall(stripped)) & elsewhere)
        out.append(QualityPoint(f"{project.parent.name}/{project.name}", name, language, i, prefix, suffix,
                                stripped, cross, others))
    return out


def select_points(points: list[QualityPoint], per_language: int, typed: bool = False) -> list[QualityPoint]:
    """Up to ``per_language`` points per language: all cross-file ones first (spread over the files),
    then local ones, in file order (so consecutive prompts share their beginning). With ``typed``,
    every other point has the first words of its line typed (:func:`typed_point`)."""
    chosen = []
    for language in sorted({p.language for p in points}):
        mine = [p for p in points if p.language == language]
        cross = [p for p in mine if p.cross_file]
        local = [p for p in mine if not p.cross_file]
        take_cross = _spread(cross, min(len(cross), per_language * 3 // 4))
        take_local = _spread(local, per_language - len(take_cross))
        chosen += sorted(take_cross + take_local, key=lambda p: (p.project, p.path, p.line))
    return [typed_point(p) if typed and i % 2 else p for i, p in enumerate(chosen)]


def _spread(items: list[QualityPoint], n: int) -> list[QualityPoint]:
    if n <= 0 or not items:
        return []
    if n >= len(items):
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


# -- prompts -----------------------------------------------------------------------------------------
def old_heads(point: QualityPoint) -> list[tuple[str, str]]:
    """The context CodeCue sent before chunks: the heads of the first two other files by name."""
    docs = [(f"file:///{point.project}/{path}", point.language, text) for path, text in point.others]
    return file_heads(docs, f"file:///{point.project}/{point.path}", point.language)


def file_heads(documents: Iterable[tuple[str, str, str]], uri: str, language_id: str,
                  max_documents: int = 2, max_chars: int = 3000) -> list[tuple[str, str]]:
    """The context CodeCue sent before chunks, kept as the bench's baseline: (path, text) pairs from other
    open documents of the same language.

    ``documents`` are (uri, language_id, text). Each contributes its head (imports and the first
    definitions say most about a file) and they are ordered by URI, so the extra context, which comes
    first in the prompt, stays the same while the user types in the current document.
    """
    same = sorted((u, t) for u, lang, t in documents if u != uri and lang == language_id and t.strip())
    out = []
    for other_uri, text in same[:max_documents]:
        head = text[:max_chars]
        cut = head.rfind("\n")
        if len(text) > max_chars and cut > 0:
            head = head[: cut + 1]
        out.append((uri_to_path(other_uri), head))
    return out


def chunk_context(point: QualityPoint, budget: PromptBudget) -> list[tuple[str, str]]:
    """What the server picks: chunks of the other files, by similarity to the lines around the cursor."""
    pool = ChunkPool()
    for path, text in point.others:
        pool.update(path, path, text)
    chosen = pool.select(query_around(point.prefix, point.suffix), point.path, budget.context_chars)
    return [(c.path, c.text) for c in chosen]


def import_context(point: QualityPoint, budget: PromptBudget) -> list[tuple[str, str]]:
    """What the server picks after a jump in a fresh editor where only the point's file is open: chunks of
    the files it imports, resolved within the project's folder (the workspace) and read from disk, ranked
    for the lines around the cursor (:func:`codecue.server.lsp.prompt.project_context`, as the server runs it)."""
    root = PROJECTS_DIR / point.project
    uri = (root / point.path).as_uri()
    documents = DocumentStore()
    documents.open(uri, point.language, 1, point.prefix + point.suffix)
    return project_context(ChunkPool(), documents, uri, point.language, point.prefix, point.suffix, budget,
                           ImportedFiles(), [root])


def codecue_prompt(tokenizer, point: QualityPoint, layout: str, context: str, first_tokens: int | None = None,
                   **budget_parts: int) -> str:
    """CodeCue's prompt with ``context`` (none, heads, chunks: the other files open, imports: only the files
    the point's file imports); with ``first_tokens``, the shorter prompt the server uses at a place its cache
    does not hold (:func:`~codecue.engine.fim.shorter_budgets`); ``budget_parts`` (``suffix``, ``extra``) in
    place of the server's."""
    budget = replace(PromptBudget(layout=layout, **QUALITY_BUDGET), **budget_parts)
    contexts = {"none": lambda: [], "heads": lambda: old_heads(point), "chunks": lambda: chunk_context(point, budget),
                "imports": lambda: import_context(point, budget)}
    extra = contexts[context]()
    if first_tokens is not None:
        budget = shorter_budgets(budget, first_tokens)[1 if context == "none" else 0]
    return build_fim_text(tokenizer, point.prefix, point.suffix, budget, extra, path=point.path)


def llama_vim_prompt(tokenizer, point: QualityPoint, chunk_lines: int = 64, ring_chunks: int = 16) -> str:
    """A llama.vim-style prompt for CodeCue's own backend (the ``codecue/llama.vim`` variant), within the same
    token budget as ours. An approximation: llama.vim's real request, sent to llama-server, is the
    ``llama-server/llama.vim`` variant (:func:`llama_vim_peer`).

    It takes ``input_prefix`` (up to 256 lines before the cursor's line), ``input_suffix`` (the rest of the
    line and up to 64 lines), the cursor's line up to the cursor, and as extra context the other files cut
    into 64-line chunks, the last 16 of them; rendered as ``<|repo_name|>myproject``, one ``<|file_sep|>name``
    entry per chunk, ``<|file_sep|>filename``, then PSM with the cursor's line after ``<|fim_middle|>``,
    keeping the *last* tokens of the extra context, the last of the prefix and the first of the suffix.
    Where the real llama.vim and llama-server differ (kept, so earlier runs stay comparable): llama.vim's
    chunks are up to 33 lines picked around the cursor of buffers it entered (:mod:`codecue_bench.llamavim`);
    on a line of only whitespace it sends no indentation; llama-server puts ``prompt`` at the end of the
    prefix, before ``<|fim_suffix|>`` (``format_prompt_infill``), and takes up to 768 prefix tokens, up to
    254 suffix tokens less the ``prompt``'s, and whatever extra context fits its context window.
    """
    budget = PromptBudget(**QUALITY_BUDGET)
    chunks = []
    for path, text in point.others:
        lines = text.split("\n")
        chunks += [(path, "\n".join(lines[s:s + chunk_lines]) + "\n") for s in range(0, len(lines), chunk_lines)]
    chunks = chunks[-ring_chunks:]
    extra = f"{REPO_NAME}myproject\n" + "".join(f"{FILE_SEP}{path}\n{text}" for path, text in chunks)
    extra_ids = tokenizer.encode(extra, add_special_tokens=False)[-budget.extra:]
    extra = tokenizer.decode(extra_ids) + f"{FILE_SEP}filename\n"
    head_end = point.prefix.rfind("\n") + 1
    line_head = point.prefix[head_end:]
    prefix_lines = point.prefix[:head_end].split("\n")
    prefix = "\n".join(prefix_lines[-257:])
    suffix = "\n".join(point.suffix.split("\n")[:65])
    suffix_ids = tokenizer.encode(suffix, add_special_tokens=False)[: budget.suffix]
    room = budget.total - len(extra_ids) - len(suffix_ids)
    prefix_ids = tokenizer.encode(prefix, add_special_tokens=False)[-max(0, room):]
    return (f"{extra}{FIM_PREFIX}{tokenizer.decode(prefix_ids)}{FIM_SUFFIX}{tokenizer.decode(suffix_ids)}"
            f"{FIM_MIDDLE}{line_head}")


def variants(first_tokens: int = FIRST_TOKENS) -> dict[str, Callable[[Any, QualityPoint], str]]:
    """Prompt variants by name: LAYOUT/CONTEXT, LAYOUT/CONTEXT/first (the shorter prompt of a place the
    cache does not hold, ``first_tokens`` beyond the context) and the llama.vim-style peer."""
    out: dict[str, Callable[[Any, QualityPoint], str]] = {}
    for layout in LAYOUTS:
        for context in CONTEXTS:
            out[f"{layout}/{context}"] = (lambda tok, p, layout=layout, context=context:
                                          codecue_prompt(tok, p, layout, context))
            out[f"{layout}/{context}/first"] = (lambda tok, p, layout=layout, context=context:
                                                codecue_prompt(tok, p, layout, context, first_tokens))
    out[CODECUE_LLAMA_VIM] = llama_vim_prompt
    return out


#: the variant an editor is shown once idle time warmed the place: the server's own prompt (its layout and
#: budget, chunks of the project's other files open), built by the completer from the prepared job
SERVER_VARIANT = "psm-mid/chunks"
#: the line shown at Enter after a rest at the end of the line before: the next line the server prepares
#: there (JobKind.NEXT_LINE, the server's prompt), scored with its indentation against the point's line
NEXT_LINE_VARIANT = "next-line"
#: a full-prompt variant with other budget parts: ``psm-mid/imports+s256`` (the suffix), ``+c768`` (the
#: context), both: ``+s256+c768``
BUDGET_MARKS = {"s": "suffix", "c": "extra"}
#: the llama.vim-shaped prompt on CodeCue's backend; ``llama.vim`` was its name before the peer came
CODECUE_LLAMA_VIM = "codecue/llama.vim"
FORMER_VARIANTS = {"llama.vim": CODECUE_LLAMA_VIM}
#: variants another program decodes (not CodeCue's completer): started by :func:`run` when asked for
PEER_VARIANTS = (PEER_NAME,)
DEFAULT_VARIANTS = ["psm-mid/chunks", "psm-mid/none", "psm-mid/heads", "psm/chunks", "spm/chunks", CODECUE_LLAMA_VIM,
                    PEER_NAME, "psm-mid/chunks/first", "psm-mid/none/first"]
#: llama-server's stop types as CodeCue's stop reasons (``limit``: n_predict, or a stop at a new line)
SERVER_STOPS = {"eos": "eos", "limit": "max_tokens", "word": "stop"}


def point_cursor(point: QualityPoint) -> tuple[list[str], int, int]:
    """The point's document as buffer lines (the hole removed) and the cursor's row and character."""
    row = point.prefix.count("\n")
    return buffer_lines(point.prefix + point.suffix), row, len(point.prefix) - point.prefix.rfind("\n") - 1


def llama_vim_peer(server: LlamaServer, max_tokens: int) -> Callable[[QualityPoint], QualityRecord]:
    """The ``llama-server/llama.vim`` variant: each point as llama.vim's first suggestion at a new place. A
    fresh llama.vim state per point: the project's other files opened (each entered at its first line, the
    ring taking their chunks), then the point's file entered at the cursor (that chunk still queued) and
    the automatic request there, greedy, ``n_predict`` = the bench's token limit. Scored like every
    variant, on the text llama.vim would insert (:func:`~codecue_bench.llamavim.insertion`)."""

    def run_point(point: QualityPoint) -> QualityRecord:
        client = LlamaVimClient(server, greedy=True, n_predict=max_tokens, seed=point.name)
        client.open_files(point.others)
        lines, row, col = point_cursor(point)
        client.buffer_entered(lines, row, point.path)
        request = (client.fim_request(lines, row, col, point.path)
                   or client.fim_request(lines, row, col, point.path, is_auto=False))  # the trigger key
        assert request is not None  # a fresh client caches nothing
        answer = client.send(request)
        raw = insertion(answer.content, lines, row, col)
        return score(point, PEER_NAME, raw, SERVER_STOPS.get(answer.stop_type, "eos"),
                     answer.prompt_n + answer.cache_n, answer.total_ms)

    return run_point


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variants", nargs="+", default=None,
                        help="prompt variants LAYOUT/CONTEXT[/first[@TOKENS]] (psm|psm-mid|spm / none|heads|chunks|imports; "
                             "/first: the short prompt of a place the cache does not hold, @TOKENS its window, default "
                             "--first-tokens), LAYOUT/CONTEXT[+sN][+cN] (the full prompt with N suffix or context tokens), "
                             f"{NEXT_LINE_VARIANT} (the next line the server prepares at the end of the line "
                             f"before a line-start point), {CODECUE_LLAMA_VIM} (a llama.vim-style prompt on CodeCue's "
                             "backend) or "
                             f"{PEER_NAME} (llama.vim's request to llama-server; needs it built: "
                             f"scripts/build_llama_server.sh) (default: {' '.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--languages", nargs="+", choices=LANGUAGES, help="project languages (default: all)")
    parser.add_argument("--per-language", type=int, default=26, help="points per language")
    parser.add_argument("--line-start-only", action="store_true",
                        help="every point at its line's indentation (default: every other point has the first "
                             "words of its line typed)")
    parser.add_argument("--first-tokens", type=int, default=FIRST_TOKENS,
                        help="new prompt tokens allowed at a place the cache does not hold (the server derives it "
                             "from its measured prefill speed, never below the window floor: the default)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--json", dest="json_out", type=Path,
                        help="write the summary and every record here (after every point)")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Every variant over the held-out project points, one model load, greedy target-only (the output is
    what any K would give)."""
    points = select_points(project_points(languages=args.languages), args.per_language,
                           typed=not args.line_start_only)
    names = [FORMER_VARIANTS.get(n, n) for n in args.variants or DEFAULT_VARIANTS]
    config = config_from_args(args)
    config = replace(config, decoding=replace(config.decoding, draft_mode="none"))
    started = time.perf_counter()
    records: list[QualityRecord] = []
    with ExitStack() as resources:
        peers = start_peers(config, names, args.max_tokens, resources, required=args.variants is not None)
        names = [n for n in names if n not in PEER_VARIANTS or n in peers]
        own = [n for n in names if n not in peers]
        completer = Completer.load(config) if own else None
        print(f"{len(points)} points ({sum(p.cross_file for p in points)} cross-file, "
              f"{len({p.language for p in points})} languages) x {len(names)} variants"
              + (f" on {completer.runtime}" if completer is not None else ""), file=sys.stderr)
        served = dict(zip(("target", "draft"), completer.names, strict=True)) if completer is not None else {}
        if peers:
            served["peer target"] = shipped_target(config)
        meta = report_meta("quality", args.typed_argv, served)

        def save(record: QualityRecord) -> None:  # after every point: a long run keeps what it measured
            records.append(record)
            write_report(args.json_out, meta, {"summary": summarise(records), "budget": QUALITY_BUDGET,
                                               "max_tokens": args.max_tokens,
                                               "records": [asdict(r) for r in records]})

        run_quality(completer, points, names, max_tokens=args.max_tokens,
                    progress=lambda m: print(m, file=sys.stderr, flush=True), on_record=save,
                    first_tokens=args.first_tokens, peers=peers)
    print(format_quality_summary(summarise(records)))
    print(f"({(time.perf_counter() - started) / 60:.1f} minutes)")
    return 0


def start_peers(config, names: Sequence[str], max_tokens: int, resources: ExitStack, *,
                required: bool) -> dict[str, Callable[[QualityPoint], QualityRecord]]:
    """The peer variants among ``names``, their servers started (closed with ``resources``). One that cannot
    run here (llama-server not built for this CPU class, a target that is not a GGUF file) is an error when
    asked for by name (``required``), else left out with a note."""
    if PEER_NAME not in names:
        return {}
    from codecue.backends.cpu_class import cpu_class, server_binary
    from codecue.loading.resolve import resolve_config

    target = resolve_config(config, with_draft=False).target
    why = (f"llama-server is not built for the {cpu_class()} class (bash scripts/build_llama_server.sh --class "
           f"{cpu_class()})" if not server_binary().is_file()
           else "" if target.kind == "gguf" else f"the target is not a GGUF file ({target.kind})")
    if why:
        if required:
            raise CodeCueError(f"cannot run {PEER_NAME}: {why}")
        print(f"codecue bench quality: {PEER_NAME} is left out: {why}", file=sys.stderr)
        return {}
    server = resources.enter_context(LlamaServer(llama_vim_server_config(target.path), n_ctx=SERVER_N_CTX))
    return {PEER_NAME: llama_vim_peer(server, max_tokens)}


# -- scoring -----------------------------------------------------------------------------------------
@dataclass
class QualityRecord:
    point: str
    language: str
    cross_file: bool
    variant: str
    prompt_tokens: int
    raw: str
    shown: str
    exact: bool
    edit_similarity: float
    repeats_suffix: bool
    stops_right: bool
    ms: float
    stop_reason: str = "eos"


def score(point: QualityPoint, variant: str, raw: str, stop_reason: str, prompt_tokens: int,
          ms: float) -> QualityRecord:
    shown = tidy_completion(raw, point.prefix, point.suffix, stop_reason)
    # Strict about leading whitespace and newlines: the cursor is at the line's indentation, so a space
    # or a blank line first is what the editor would insert, and wrong.
    first = shown.split("\n", 1)[0].rstrip()
    return QualityRecord(
        point.name, point.language, point.cross_file, variant, prompt_tokens, raw, shown,
        exact=first == point.hole,
        edit_similarity=Levenshtein.normalized_similarity(shown.rstrip(), point.hole),
        repeats_suffix=suffix_repeat_cut(raw, point.prefix, point.suffix, final=True) is not None,
        stops_right=bool(shown.strip()) and "\n" not in shown.strip("\n"),
        ms=ms,
        stop_reason=stop_reason,
    )


def point_job(point: QualityPoint, max_tokens: int, extra_context: Sequence[tuple[str, str]] = (), *,
              kind: JobKind = JobKind.COMPLETE) -> PreparedJob:
    """The job an editor's request at the point makes (:func:`codecue.request.prepare`, as the server
    prepares it), with ``extra_context`` as the other files' chunks: its stop is every variant's."""
    text = point.prefix + point.suffix
    line = point.prefix.count("\n")
    character = len(point.prefix) - point.prefix.rfind("\n") - 1
    request = CompletionRequest(f"file:///{point.project}/{point.path}", 0, line, character, point.prefix,
                                point.suffix, point.language, RequestOptions(max_tokens=max_tokens))
    return prepare(request, cursor_in(text, point.path, line, character, point.language), kind=kind,
                   extra_context=extra_context)


def line_before(point: QualityPoint) -> QualityPoint | None:
    """A line-start point seen from the end of the line before it (where a rest prepares the next line):
    the prefix without the line's indentation and newline, the hole the whole line, indentation included.
    None for a mid-line point, or one on the first line."""
    head, newline, indent = point.prefix.rpartition("\n")
    if point.typed or not newline or indent.strip():
        return None
    return replace(point, prefix=head, hole=indent + point.hole)


def next_line_prompt(completer: Completer, point: QualityPoint, max_tokens: int) -> tuple[list[int], PreparedJob]:
    """The :data:`NEXT_LINE_VARIANT`'s prompt at ``point`` (a :func:`line_before` point), and its job."""
    job = point_job(point, max_tokens, chunk_context(point, completer.budget), kind=JobKind.NEXT_LINE)
    return completer.prompt_for(job, full=True), job


def server_prompt(completer: Completer, point: QualityPoint, max_tokens: int) -> tuple[list[int], PreparedJob]:
    """The :data:`SERVER_VARIANT`'s prompt: the full prompt of the server's request at the point with the
    project's other files open (``Completer.prompt_for``, as the server sends it once idle time warmed the
    place), and its job."""
    job = point_job(point, max_tokens, chunk_context(point, completer.budget))
    return completer.prompt_for(job, full=True), job


def budget_variant(name: str) -> Callable[[Any, QualityPoint], str] | None:
    """The full-prompt variant ``LAYOUT/CONTEXT+sN+cN`` (:data:`BUDGET_MARKS`), or None where ``name`` is not one."""
    base, *marks = name.split("+")
    parts = {BUDGET_MARKS.get(m[:1]): m[1:] for m in marks}
    if (not marks or None in parts or len(parts) != len(marks) or not all(v.isdigit() for v in parts.values())
            or base.count("/") != 1):
        return None
    layout, context = base.split("/")
    if layout not in LAYOUTS or context not in CONTEXTS:
        return None
    sizes = {k: int(v) for k, v in parts.items()}
    return lambda tok, p: codecue_prompt(tok, p, layout, context, **sizes)


def run_quality(completer, points: list[QualityPoint], names: Sequence[str], max_tokens: int = 32,
                progress: Callable[[str], None] | None = None,
                on_record: Callable[[QualityRecord], None] | None = None,
                first_tokens: int = FIRST_TOKENS,
                peers: dict[str, Callable[[QualityPoint], QualityRecord]] | None = None) -> list[QualityRecord]:
    """Every variant in ``names`` over ``points``: CodeCue's prompts decoded by ``completer`` (None when only
    peers run), the ``peers`` (variant -> point -> record, :func:`llama_vim_peer`) by themselves."""
    table = variants(first_tokens)
    peers = peers or {}
    names = [FORMER_VARIANTS.get(n, n) for n in names]
    for name in names:  # LAYOUT/CONTEXT/first@N: the short prompt with a window of N new tokens
        base, at, window = name.partition("@")
        if at and base.endswith("/first") and window.isdigit() and int(window) > 0:
            table[name] = variants(int(window))[base]
        built = budget_variant(name)
        if built is not None:
            table[name] = built
    unknown = [n for n in names if n not in table and n not in peers and n != NEXT_LINE_VARIANT]
    if unknown:
        known = [*table, *PEER_VARIANTS]
        raise CodeCueError(f"unknown quality variant(s) {unknown}",
                           f"choose from {', '.join(known)} (a /first variant may take @TOKENS, a full one +sN, +cN)")
    stops = {p.name: point_job(p, max_tokens).stop_rule for p in points}
    records = []
    for name in names:
        build = table.get(name)
        for i, point in enumerate(points):
            if name in peers:
                record = peers[name](point)
            else:
                assert completer is not None
                stop = stops[point.name]
                if name == NEXT_LINE_VARIANT:
                    before = line_before(point)
                    if before is None:
                        continue
                    ids, job = next_line_prompt(completer, before, max_tokens)
                    stop, point = job.stop_rule, replace(before, prefix=job.prefix)  # scored from the new line
                elif name == SERVER_VARIANT:
                    ids = server_prompt(completer, point, max_tokens)[0]
                else:
                    assert build is not None
                    text = build(completer.tokenizer, point)
                    ids = completer.tokenizer.encode(text, add_special_tokens=False)
                if "/first" not in name:
                    completer.warm(ids, fresh=True)
                t0 = time.perf_counter()
                result = completer.generate_ids(ids, max_tokens=max_tokens, k=0, draft_mode="none", stop_rule=stop)
                record = score(point, name, result.text, result.stop_reason, len(ids),
                               (time.perf_counter() - t0) * 1e3)
            records.append(record)
            if on_record is not None:
                on_record(record)
            if progress:
                progress(f"[{name} {i + 1}/{len(points)}] {point.name} {'=' if record.exact else '~'} "
                         f"{record.shown.strip()[:60]!r}")
    return records


def summarise(records: list[QualityRecord]) -> list[dict[str, Any]]:
    rows = []
    for variant in dict.fromkeys(r.variant for r in records):
        for subset, keep in (("all", lambda r: True), ("cross-file", lambda r: r.cross_file),
                             ("local", lambda r: not r.cross_file), ("line start", lambda r: "+" not in r.point),
                             ("mid-line", lambda r: "+" in r.point)):
            mine = [r for r in records if r.variant == variant and keep(r)]
            if not mine:
                continue
            rows.append({
                "variant": variant, "points": subset, "n": len(mine),
                "languages": len({r.language for r in mine}),
                "exact": 100 * sum(r.exact for r in mine) / len(mine),
                "edit_similarity": 100 * statistics.mean(r.edit_similarity for r in mine),
                "repeats_suffix": 100 * sum(r.repeats_suffix for r in mine) / len(mine),
                "stops_right": 100 * sum(r.stops_right for r in mine) / len(mine),
                "prompt_tokens": statistics.mean(r.prompt_tokens for r in mine),
            })
    return rows
