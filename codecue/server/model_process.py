"""The models in a child process, so that a crash in native code costs one completion, not the server.

The server's worker drives a :class:`CompleterProcess` exactly as it drives an in-process
:class:`~codecue.completion.Completer` (``complete``, ``reset_caches``, ``close``). The child holds the
models; the callbacks a generation needs stay in the server and are answered over a pipe: streamed text
and round records flow up, and the child asks ``cancelled?`` once per round and ``stop?`` with the text
so far (tree-sitter stops live in the server). When the child dies — a segfault in llama.cpp, an abort,
the OOM killer — the pending completion fails with :class:`ModelProcessCrashed` and the worker starts a
new child for the next request.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import signal
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from codecue.errors import CodeCueError

if TYPE_CHECKING:
    from codecue.engine.fim import PromptBudget
    from codecue.engine.speculative import GenerationResult
    from codecue.models.config import CompletionConfig, DecodingSettings
    from codecue.tuning.machine_costs import MachineCosts

log = logging.getLogger(__name__)

DEFAULT_LOADER = "codecue.server.worker:load_completer"
_POLL_S = 0.2


class ModelProcessCrashed(CodeCueError):
    """The child process holding the models died; the next request starts a new one."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"crashed with {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _portable_error(exc: BaseException) -> tuple[str, str, str, str | None]:
    """An exception as plain data (its class by module and name): the child's exceptions may not pickle."""
    cls = type(exc)
    if isinstance(exc, CodeCueError):
        return cls.__module__, cls.__qualname__, exc.message, exc.fix
    return cls.__module__, cls.__qualname__, str(exc), None


def _rebuild_error(module: str, name: str, message: str, fix: str | None) -> BaseException:
    """The child's exception again: CodeCue's own errors (user-facing messages) as their class, anything
    else as a RuntimeError naming it."""
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = None
    if isinstance(cls, type) and issubclass(cls, CodeCueError):
        try:
            return cls(message, fix)
        except TypeError:  # a subclass with another constructor
            return CodeCueError(message, fix)
    if cls is ValueError:
        return ValueError(message)
    if name == "MeasurementAbandoned":
        from codecue.tuning.machine_costs import MeasurementAbandoned

        return MeasurementAbandoned()
    return RuntimeError(f"{name}: {message}")


def _load_factory(ref: str) -> Callable[[CompletionConfig], Any]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


# -- the child ---------------------------------------------------------------------------------------


def _child_main(conn: Connection, choice: CompletionConfig, loader: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when the child stops
    try:
        completer = _load_factory(loader)(choice)
    except BaseException as exc:  # noqa: BLE001 - reported to the server, which reports it to the editor
        conn.send(("error", *_portable_error(exc)))
        return
    conn.send(("ready", {"runtime": completer.runtime, "budget": completer.budget, "names": completer.names,
                         "decoding": completer.decoding}))

    def ask(question: str, *payload: Any) -> Any:
        conn.send((question, *payload))
        return conn.recv()

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the server went away
        command = message[0]
        if command == "close":
            return
        try:
            if command == "reset":
                completer.reset_caches()
                conn.send(("done", None))
                continue
            if command == "warm":
                _, prefix, suffix, extra_context, path, decoding = message
                conn.send(("done", completer.warm_context(prefix, suffix, extra_context, path=path,
                                                          cancelled=lambda: ask("cancelled?"), decoding=decoding)))
                continue
            if command == "count":
                conn.send(("done", completer.count_tokens(message[1])))
                continue
            if command == "measure":
                conn.send(("done", completer.measure_costs(should_stop=lambda: ask("cancelled?"))))
                continue
            _, prefix, suffix, kwargs, wants = message
            result = completer.complete(
                prefix, suffix, **kwargs,
                on_text=(lambda text: conn.send(("text", text))) if "on_text" in wants else None,
                on_round=(lambda record: conn.send(("round", record))) if "on_round" in wants else None,
                stop_predicate=(lambda text: ask("stop?", text)) if "stop_predicate" in wants else None,
                cancelled=(lambda: ask("cancelled?")) if "cancelled" in wants else None,
            )
            conn.send(("done", result))
        except BaseException as exc:  # noqa: BLE001 - one failed completion; the child serves on
            conn.send(("error", *_portable_error(exc)))


# -- the server's side -------------------------------------------------------------------------------


class CompleterProcess:
    """A completer whose models live in a child process; see the module docstring."""

    def __init__(self, choice: CompletionConfig, loader: str = DEFAULT_LOADER) -> None:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or locks inherited
        self._conn, child_conn = context.Pipe(duplex=True)
        self._process = context.Process(target=_child_main, args=(child_conn, choice, loader),
                                        name="codecue-models", daemon=True)
        self._process.start()
        child_conn.close()
        self.choice = choice
        reply = self._receive()
        if reply[0] == "error":
            self.close()
            raise _rebuild_error(*reply[1:])
        self.runtime: str = reply[1]["runtime"]
        self.budget: PromptBudget = reply[1]["budget"]
        self.names: tuple[str, str | None] = reply[1]["names"]
        self.decoding: DecodingSettings = reply[1]["decoding"]

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def _receive(self) -> tuple[Any, ...]:
        """The child's next message; raises ModelProcessCrashed when it died instead."""
        while True:
            try:
                if self._conn.poll(_POLL_S):
                    return self._conn.recv()
            except (EOFError, OSError):
                pass
            else:
                if self._process.is_alive():
                    continue
                if self._conn.poll(0):  # it answered, then exited
                    continue
            self._process.join(1.0)
            raise ModelProcessCrashed(
                f"the model process {_describe_exit(self._process.exitcode)}",
                "a new one starts for the next request; run `codecue doctor` if this repeats",
            )

    def complete(
        self,
        prefix: str,
        suffix: str = "",
        *,
        extra_context: Sequence[tuple[str, str]] = (),
        on_text: Callable[[str], None] | None = None,
        on_round: Callable[[Any], None] | None = None,
        stop_predicate: Callable[[str], int | None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> GenerationResult:
        callbacks = {"on_text": on_text, "on_round": on_round, "stop_predicate": stop_predicate,
                     "cancelled": cancelled}
        wants = tuple(name for name, fn in callbacks.items() if fn is not None)
        kwargs["extra_context"] = tuple(extra_context)
        self._conn.send(("complete", prefix, suffix, kwargs, wants))
        return self._answer_until_done(
            cancelled=cancelled,
            notices={"text": on_text, "round": on_round},
            questions={"stop?": stop_predicate},
        )

    def reset_caches(self) -> None:
        self._conn.send(("reset",))
        self._answer_until_done()

    def warm_context(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (), *,
                     path: str | None = None, cancelled: Callable[[], bool] | None = None,
                     decoding: DecodingSettings | None = None) -> int:
        self._conn.send(("warm", prefix, suffix, tuple(extra_context), path, decoding))
        return self._answer_until_done(cancelled=cancelled or (lambda: False))

    def count_tokens(self, text: str) -> int:
        self._conn.send(("count", text))
        return self._answer_until_done()

    def measure_costs(self, should_stop: Callable[[], bool] | None = None) -> MachineCosts:
        self._conn.send(("measure",))
        return self._answer_until_done(cancelled=should_stop or (lambda: False))

    def _answer_until_done(
        self,
        cancelled: Callable[[], bool] | None = None,
        notices: dict[str, Callable[[Any], None] | None] | None = None,
        questions: dict[str, Callable[[Any], Any] | None] | None = None,
    ) -> Any:
        """Serve the child's callbacks until it answers: ``notices`` (streamed text, round records) are
        passed on, ``questions`` (``stop?``, and ``cancelled?`` through ``cancelled``) are answered."""
        questions = {**(questions or {}), "cancelled?": (lambda: bool(cancelled())) if cancelled else None}
        while True:
            kind, *payload = self._receive()
            if kind == "done":
                return payload[0]
            if kind == "error":
                raise _rebuild_error(*payload)
            if notices and notices.get(kind) is not None:
                notices[kind](payload[0])
            elif questions.get(kind) is not None:
                self._conn.send(questions[kind](*payload))

    def close(self) -> None:
        if self._process.is_alive():
            try:
                self._conn.send(("close",))
            except OSError:
                pass
            self._process.join(5.0)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5.0)
        self._conn.close()


def child_process_factory(loader: str = DEFAULT_LOADER) -> Callable[[CompletionConfig], CompleterProcess]:
    """A worker factory that loads each model choice in a child process with ``loader``
    (``"module:function"``, called with the choice in the child)."""

    def factory(choice: CompletionConfig) -> CompleterProcess:
        return CompleterProcess(choice, loader)

    return factory
