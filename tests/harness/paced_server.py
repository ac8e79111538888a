"""Test support: the real server over stdio, with models slowed down to a known pace, or stuck.

Tiny random models generate a token in about a millisecond, too fast to cancel mid-generation or to
"type" over deterministically. ``python -m harness.paced_server --target DIR --draft DIR
--forward-delay-ms 20`` serves stdio in-process exactly like ``codecue serve --in-process``, except that
every forward pass of either model sleeps first. With ``--hang-file PATH``, a forward pass blocks while
that file exists (at most ``MAX_HANG_S``): a backend call that hangs, for the watchdog's tests. Nothing
else differs.

``--segfault-on MARKER`` instead holds the models in a child process (as ``codecue serve`` does) whose
target really segfaults (a null pointer read through ctypes) in its forward pass whenever the prompt
contains MARKER: the crash that a broken native runtime causes, on demand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codecue.models.config import CompletionConfig, DecodingSettings, ModelChoice
from codecue.server.worker.model_worker import ModelWorker, load_completer

MAX_HANG_S = 600.0


class ThrottledBackend:
    """Wraps a backend; each ``forward`` sleeps ``delay_s`` first, and blocks while ``hang_file`` exists."""

    def __init__(self, inner: Any, delay_s: float, hang_file: Path | None = None) -> None:
        self._inner = inner
        self._delay_s = delay_s
        self._hang_file = hang_file

    def forward(self, token_ids: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        time.sleep(self._delay_s)
        deadline = time.monotonic() + MAX_HANG_S
        while self._hang_file is not None and self._hang_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return self._inner.forward(token_ids, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def throttled_factory(delay_s: float, hang_file: Path | None = None):
    def factory(config: CompletionConfig):
        completer = load_completer(config)
        for seq in (completer.target, completer.draft):
            if seq is not None:
                seq.backend = ThrottledBackend(seq.backend, delay_s, hang_file)
        return completer

    return factory


class InterruptibleThrottledBackend(ThrottledBackend):
    """A :class:`ThrottledBackend` whose calls stop part-way, as llama.cpp's do (``can_interrupt``): within
    :meth:`interruptible`, a call that waits (its delay, the hang file) raises
    :class:`~codecue.backends.base.Interrupted` once ``stop()`` is true, holding what it held before."""

    can_interrupt = True

    def __init__(self, inner: Any, delay_s: float, hang_file: Path | None = None) -> None:
        super().__init__(inner, delay_s, hang_file)
        self._stop: Any = None

    @contextlib.contextmanager
    def interruptible(self, stop: Any) -> Iterator[None]:
        self._stop = stop
        try:
            yield
        finally:
            self._stop = None

    def forward(self, token_ids: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        from codecue.backends.base import Interrupted

        deadline = time.monotonic() + MAX_HANG_S
        wait_until = time.monotonic() + self._delay_s
        while time.monotonic() < wait_until or (self._hang_file is not None and self._hang_file.exists()
                                                and time.monotonic() < deadline):
            if self._stop is not None and self._stop():
                raise Interrupted(f"stopped evaluating {len(token_ids)} tokens")
            time.sleep(0.01)
        return self._inner.forward(token_ids, *args, **kwargs)


FORWARD_DELAY_ENV = "CODECUE_TEST_FORWARD_DELAY_MS"
HANG_FILE_ENV = "CODECUE_TEST_HANG_FILE"


def load_throttled_completer(choice: CompletionConfig):
    """:func:`throttled_factory`'s completer, configured by the environment (a model process's loader is
    named, not built: ``$CODECUE_TEST_FORWARD_DELAY_MS``, ``$CODECUE_TEST_HANG_FILE``)."""
    hang_file = os.environ.get(HANG_FILE_ENV)
    return throttled_factory(float(os.environ.get(FORWARD_DELAY_ENV, "0")) / 1000,
                             Path(hang_file) if hang_file else None)(choice)


def load_interruptible_completer(choice: CompletionConfig):
    """:func:`load_throttled_completer`, with calls that stop part-way (:class:`InterruptibleThrottledBackend`)."""
    completer = load_completer(choice)
    hang_file = os.environ.get(HANG_FILE_ENV)
    for seq in (completer.target, completer.draft):
        if seq is not None:
            seq.backend = InterruptibleThrottledBackend(seq.backend, float(os.environ.get(FORWARD_DELAY_ENV, "0")) / 1000,
                                                        Path(hang_file) if hang_file else None)
    return completer


@dataclass(frozen=True)
class CutAt:
    """A stop for a :class:`~codecue.engine.stops.StopRule`'s ``scope`` that cuts the text at ``chars``
    characters once it is that long: a stop whose effect a test knows in advance."""

    chars: int

    def predicate(self):
        return lambda text: self.chars if len(text) >= self.chars else None


SEGFAULT_MARKER_ENV = "CODECUE_TEST_SEGFAULT_MARKER"


class SegfaultingBackend(ThrottledBackend):
    """Wraps a backend; ``forward`` dereferences a null pointer while ``armed``."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner, 0.0)
        self.armed = False

    def forward(self, token_ids: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        if self.armed:
            ctypes.string_at(0)  # SIGSEGV in native code, as a broken kernel would
        return super().forward(token_ids, *args, **kwargs)


def load_unreadable_completer(config: CompletionConfig):
    """A load that fails as an unreadable model folder does in transformers: with an ``OSError``."""
    raise OSError(f"cannot read a tokenizer for {config.models.target}")


def load_segfaulting_completer(config: CompletionConfig):
    """A completer whose target segfaults on prompts containing ``$CODECUE_TEST_SEGFAULT_MARKER``."""
    completer = load_completer(config)
    marker = os.environ[SEGFAULT_MARKER_ENV]
    backend = SegfaultingBackend(completer.target.backend)
    completer.target.backend = backend
    complete = completer.complete

    def complete_or_crash(prefix: str, suffix: str = "", **kwargs: Any):
        backend.armed = marker in prefix or marker in suffix
        return complete(prefix, suffix, **kwargs)

    completer.complete = complete_or_crash
    return completer


def main(argv: list[str] | None = None) -> int:
    from codecue.server.daemon.streams import serve_stdio
    from codecue.server.lsp.session import CodeCueServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft")
    parser.add_argument("--backend", default="torch")
    parser.add_argument("--draft-mode", default="hybrid")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--forward-delay-ms", type=float, default=0.0)
    parser.add_argument("--hang-file", type=Path, help="a forward pass blocks while this file exists")
    parser.add_argument("--segfault-on", metavar="MARKER")
    args = parser.parse_args(argv)
    config = CompletionConfig(ModelChoice(target=args.target, draft=args.draft, backend=args.backend, dtype=args.dtype),
                              DecodingSettings(draft_mode=args.draft_mode))
    factory = throttled_factory(args.forward_delay_ms / 1000, args.hang_file) \
        if args.forward_delay_ms or args.hang_file else load_completer
    if args.segfault_on:
        from codecue.server.worker.model_process import child_process_factory

        os.environ[SEGFAULT_MARKER_ENV] = args.segfault_on  # inherited by the model process
        factory = child_process_factory("harness.paced_server:load_segfaulting_completer")
    worker = ModelWorker(config, factory, idle_unload_s=None)
    try:
        return asyncio.run(serve_stdio(CodeCueServer(worker)))
    finally:
        worker.shutdown(timeout=2.0)


if __name__ == "__main__":
    raise SystemExit(main())
