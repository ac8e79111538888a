"""``codecue complete FILE --line L --character C``: one completion, printed (or as JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from codecue.commands.common import add_model_arguments, config_from_args
from codecue.errors import CodeCueError

if TYPE_CHECKING:
    from codecue.request import PreparedJob


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the source file")
    parser.add_argument("--line", type=int, required=True, help="0-based line, as in LSP")
    parser.add_argument("--character", type=int, required=True, help="0-based UTF-16 column, as in LSP")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--no-speculation", action="store_true", help="target only")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stream", action="store_true", help="print text as it is verified")
    parser.add_argument("--no-scope-stop", action="store_true",
                        help="do not stop when the statement or block at the cursor is complete")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_model_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from codecue.completion import Completer
    from codecue.request import complete_job

    job = prepared_job(args)
    config = config_from_args(args)
    from codecue.backends.remote import choose_remote_url
    from codecue.tuning.policy import Depth

    remote = choose_remote_url(args.remote, args.backend, args.no_remote)
    if remote is not None:
        from codecue.remote_completion import RemoteCompleter

        completer = RemoteCompleter.load(remote, tokenizer_model=args.target,
                                         local_factory=lambda: Completer.load(config))
        depth = Depth(0, 0, "the server speculates on its own")
    else:
        completer = Completer.load(config)
        # As the language server does: the K authority, for the cursor's language and class, with the costs
        # measured here for the runtime and files the plan loaded (K = 0 where drafting would not pay).
        depth = completer.k_authority().depth_for(job.language, job.context_class, requested=completer.decoding.k)
    printed = {"n": 0}

    def stream(so_far: str) -> None:
        sys.stdout.write(so_far[printed["n"] :])
        sys.stdout.flush()
        printed["n"] = len(so_far)

    result = complete_job(completer, job, k=depth.start, k_max=depth.ceiling,
                          on_text=stream if args.stream and not args.json else None)
    s = result.stats
    if result.notice and not args.json:
        print(f"codecue: {result.notice}", file=sys.stderr)
    if args.json:
        print(json.dumps({
            "text": result.text, "tokens": result.tokens, "stop_reason": result.stop_reason,
            "ttft_ms": round(s.ttft_ms, 2), "tpot_ms": round(s.tpot_ms, 2), "total_ms": round(s.total_ms, 2),
            "drafted": s.drafted, "accepted": s.accepted, "acceptance_rate": round(s.acceptance_rate, 4),
            "rounds": s.rounds, "histogram": s.histogram, "k": depth.start, "k_max": depth.ceiling,
            "k_source": depth.reason,
            "context_class": job.context_class,
            "speculative": s.speculative,
            "draft_mode": completer.decoding.draft_mode if depth.start else "none", "prompt_tokens": s.prompt_tokens,
            "backend": s.runtime.partition("+")[0], "runtime": s.runtime, "notice": result.notice,
        }))
    else:
        if args.stream:
            stream(result.text)
            print()
        else:
            print(result.text)
        print(f"[{s.new_tokens} tokens, ttft {s.ttft_ms:.0f} ms, tpot {s.tpot_ms:.1f} ms, K={depth.start} ({depth.reason}), "
              f"accepted {s.accepted}/{s.drafted}, {result.stop_reason}]", file=sys.stderr)
    return 0


def prepared_job(args: argparse.Namespace) -> PreparedJob:
    """The job for the file and position in ``args``, prepared as the language server prepares an editor's
    request for the same document, cursor and options (:func:`codecue.request.prepare`)."""
    from codecue.request import CompletionRequest, RequestOptions, cursor_in, prepare

    try:
        text = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CodeCueError(f"cannot read {args.file}: {exc}") from None
    if args.max_tokens < 1:
        raise CodeCueError("--max-tokens must be at least 1")
    if args.temperature < 0 or not 0 < args.top_p <= 1:
        raise CodeCueError("--temperature must be >= 0 and --top-p in (0, 1]")
    options = RequestOptions(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p,
                             seed=args.seed, scope_stop=not args.no_scope_stop)
    path = args.file.resolve()
    cursor = cursor_in(text, str(path), args.line, args.character)
    try:
        request = CompletionRequest.at(path.as_uri(), text, args.line, args.character, cursor.language, options)
    except ValueError as exc:
        raise CodeCueError(f"{args.file}: {exc}") from None
    return prepare(request, cursor)
