"""Test support: the real server over stdio, with models slowed down to a known pace.

Tiny random models generate a token in about a millisecond, too fast to cancel mid-generation or to
"type" over deterministically. ``python -m codecue.server.testing --target DIR --draft DIR
--forward-delay-ms 20`` serves stdio in-process exactly like ``codecue serve --in-process``, except that
every forward pass of either model sleeps first. Nothing else differs.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Any

from codecue.server.worker import ModelChoice, ModelWorker, load_completer


class ThrottledBackend:
    """Wraps a backend; each ``forward`` sleeps ``delay_s`` first."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s

    def forward(self, token_ids: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        time.sleep(self._delay_s)
        return self._inner.forward(token_ids, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def throttled_factory(delay_s: float):
    def factory(choice: ModelChoice):
        completer = load_completer(choice)
        for seq in (completer.target, completer.draft):
            if seq is not None:
                seq.backend = ThrottledBackend(seq.backend, delay_s)
        return completer

    return factory


def main(argv: list[str] | None = None) -> int:
    from codecue.server.session import CodeCueServer
    from codecue.server.transport import serve_stdio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--draft-mode", default="hybrid")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--forward-delay-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    choice = ModelChoice(args.target, args.draft, args.backend, args.draft_mode, args.dtype)
    factory = throttled_factory(args.forward_delay_ms / 1000) if args.forward_delay_ms else load_completer
    worker = ModelWorker(choice, factory, idle_unload_s=None)
    try:
        return asyncio.run(serve_stdio(CodeCueServer(worker)))
    finally:
        worker.shutdown(timeout=2.0)


if __name__ == "__main__":
    raise SystemExit(main())
