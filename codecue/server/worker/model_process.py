"""The models in a child process, so that a crash in native code costs one completion, not the server.

The server's worker drives a :class:`CompleterProcess` exactly as it drives an in-process
:class:`~codecue.completion.Completer` (``complete``, ``reset_caches``, ``close``). The child holds the
models and everything a generation consults every round: the stop rule crosses the pipe as data (a
:class:`~codecue.engine.stops.StopRule`, made into the predicate in the child as in-process), and
cancellation is a number in shared memory that the child reads before each round, warm-up step or timed
pass (:meth:`CompleterProcess.canceller`). Nothing goes down the pipe while a call runs; up it go only
notices (streamed ``text``, one ``round`` per round when the caller counts rounds or wants their records)
and the final ``done`` or ``error``. When the child dies — a segfault in llama.cpp, an abort, the OOM
killer — the pending call fails with :class:`ModelProcessCrashed` and the worker starts a new child for
the next request.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol

from codecue.errors import CodeCueError

if TYPE_CHECKING:
    from codecue.engine.fim import PromptBudget
    from codecue.engine.results import GenerationResult
    from codecue.engine.rounds import RoundRecord
    from codecue.models.config import CompletionConfig, DecodingSettings
    from codecue.tuning.machine_costs import MachineCosts

log = logging.getLogger(__name__)

DEFAULT_LOADER = "codecue.server.worker.model_worker:load_completer"
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


def _import_quietly(modules: Sequence[str]) -> None:
    """Import ``modules`` ahead of need; a failure is the loader's to report, when it imports them itself."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001
            return


class _CallNumber(Protocol):
    """The shared ``multiprocessing`` number: the highest call the server has cancelled."""

    value: int


# -- the child ---------------------------------------------------------------------------------------


class _Rounds:
    """In the child, for a generation whose caller counts rounds (in-process, its ``cancelled`` is called
    once before each round) or wants their records: the engine's ``cancelled`` and ``on_round``. Before
    each round after the first it sends ``("round", record, True)``: the round that ended, with its record
    if it drafted, and a next one starts unless cancelled. The server then calls the caller's callbacks as
    often as an in-process generation does, for one message per round. The last round's record, if any,
    goes up as ``("round", record, False)``."""

    def __init__(self, conn: Connection, cancelled: Callable[[], bool]) -> None:
        self._conn = conn
        self._cancelled = cancelled
        self._started = 0
        self._record: RoundRecord | None = None

    def on_round(self, record: RoundRecord) -> None:
        self._record = record

    def next_round(self) -> bool:
        if self._started:
            self._conn.send(("round", self._record, True))
            self._record = None
        if self._cancelled():
            return True
        self._started += 1
        return False

    def finish(self) -> None:
        if self._record is not None:
            self._conn.send(("round", self._record, False))
            self._record = None


def _child_main(conn: Connection, choice: CompletionConfig | None, loader: str, cancelled_call: _CallNumber,
                stopping_call: _CallNumber, imports: Sequence[str] = ()) -> None:
    """Load ``choice`` with ``loader`` and serve the calls. A spare child (``choice`` None) waits for its
    choice (``("load", choice)``) while it imports ``imports``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when the child stops
    server_pid = os.getppid()
    if imports:  # on a thread: the choice, when it comes, starts its load at once (an import it needs waits)
        threading.Thread(target=_import_quietly, args=(imports,), name="codecue-imports", daemon=True).start()
    if choice is None:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the server went away before it chose
        if message[0] != "load":
            return
        choice = message[1]
    try:
        completer = _load_factory(loader)(choice)
    except BaseException as exc:  # noqa: BLE001 - reported to the server, which reports it to the editor
        conn.send(("error", *_portable_error(exc)))
        return
    conn.send(("ready", {"runtime": completer.runtime, "budget": completer.budget, "names": completer.names,
                         "decoding": completer.decoding}))

    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the server went away
        command = message[0]
        if command == "close":
            return
        call = message[1]

        def interrupted(call: int = call) -> bool:
            # A server that died (killed by its editor, say) cancels nothing: an orphan stops by itself
            # instead of spending a minute of CPU on a warm-up or a measurement nobody waits for.
            return cancelled_call.value >= call or os.getppid() != server_pid

        def cancelled(call: int = call) -> bool:
            return stopping_call.value >= call or interrupted(call)

        try:
            if command == "reset":
                completer.reset_caches()
                conn.send(("done", None))
                continue
            if command == "warm":
                _, _, prefix, suffix, extra_context, path, decoding, within_ms, fresh, with_draft = message
                conn.send(("done", completer.warm_context(prefix, suffix, extra_context, path=path,
                                                          cancelled=cancelled, interrupted=interrupted,
                                                          decoding=decoding,
                                                          within_ms=within_ms, fresh=fresh,
                                                          with_draft=with_draft)))
                continue
            if command == "count":
                conn.send(("done", completer.count_tokens(message[2])))
                continue
            if command == "measure":
                conn.send(("done", completer.measure_costs(should_stop=cancelled)))
                continue
            _, _, prefix, suffix, kwargs, wants = message
            rounds = _Rounds(conn, cancelled) if {"cancelled", "on_round"} & set(wants) else None
            result = completer.complete(
                prefix, suffix, **kwargs,
                on_text=(lambda text: conn.send(("text", text))) if "on_text" in wants else None,
                on_round=rounds.on_round if rounds is not None and "on_round" in wants else None,
                cancelled=rounds.next_round if rounds is not None else cancelled,
            )
            if rounds is not None:
                rounds.finish()
            conn.send(("done", result))
        except BaseException as exc:  # noqa: BLE001 - one failed completion; the child serves on
            conn.send(("error", *_portable_error(exc)))


# -- the server's side -------------------------------------------------------------------------------


@dataclass
class ModelChild:
    """A started model process: its process, its pipe and its cancel number. Started with no choice, it
    is a spare: an editor's first request needs the interpreter and the imports (llama.cpp's binding,
    numpy, the engine) anyway, and they can run while the editor connects."""

    loader: str
    process: multiprocessing.process.BaseProcess
    conn: Connection
    # Calls are numbered; the child stops a call once this reaches its number. A number, not a flag to
    # clear between calls: a cancel that arrives late (its call has ended) cannot touch the next.
    cancelled_call: _CallNumber
    # ... and once this one does, before its next step: a warm-up's evaluation call under way ends first
    # (CompleterProcess.canceller, finish_call).
    stopping_call: _CallNumber

    @classmethod
    def start(cls, loader: str = DEFAULT_LOADER, choice: CompletionConfig | None = None,
              imports: Sequence[str] = ()) -> ModelChild:
        """A child for ``loader``: it loads ``choice`` at once, or (None) imports ``imports`` and waits."""
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or locks inherited
        conn, child_conn = context.Pipe(duplex=True)
        cancelled_call: _CallNumber = context.Value("Q", 0, lock=False)
        stopping_call: _CallNumber = context.Value("Q", 0, lock=False)
        process = context.Process(target=_child_main, args=(child_conn, choice, loader, cancelled_call, stopping_call,
                                                            tuple(imports)),
                                  name="codecue-models", daemon=True)
        process.start()
        child_conn.close()
        return cls(loader, process, conn, cancelled_call, stopping_call)

    def close(self) -> None:
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()


class CompleterProcess:
    """A completer whose models live in a child process; see the module docstring."""

    def __init__(self, choice: CompletionConfig, loader: str = DEFAULT_LOADER, spare: ModelChild | None = None) -> None:
        """Load ``choice`` in a new child, or in ``spare`` (started earlier with the same ``loader``)."""
        if spare is not None and (spare.loader != loader or not spare.process.is_alive()):
            spare.close()
            spare = None
        if spare is not None:
            try:
                spare.conn.send(("load", choice))
            except OSError:  # it died since: a new child loads instead
                spare.close()
                spare = None
        child = spare or ModelChild.start(loader, choice=choice)
        self._process, self._conn = child.process, child.conn
        self._cancelled_call, self._stopping_call = child.cancelled_call, child.stopping_call
        self._cancel_lock = threading.Lock()  # cancels come from the worker and the sessions' threads
        self._calls = 0
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

    # -- cancellation --------------------------------------------------------------------------------
    def canceller(self) -> Callable[..., None]:
        """A function that cancels the next call made on this process (``complete``, ``warm_context``,
        ``measure_costs``) through the shared number, from any thread and at any time: before the call
        starts, while it runs (the child stops before its next round, warm-up step or timed pass, and
        part-way through a warm-up's evaluation call unless ``finish_call=True`` is passed), or after it
        ended (then it does nothing)."""
        call = self._calls + 1
        return lambda finish_call=False: self._cancel(call, finish_call)

    def _cancel(self, call: int, finish_call: bool = False) -> None:
        number = self._stopping_call if finish_call else self._cancelled_call
        with self._cancel_lock:
            if number.value < call:
                number.value = call

    def _send(self, command: str, *payload: Any) -> int:
        self._calls += 1
        self._conn.send((command, self._calls, *payload))
        return self._calls

    def _receive(self, idle: Callable[[], None] | None = None) -> tuple[Any, ...]:
        """The child's next message, calling ``idle`` every ``_POLL_S`` without one; raises
        ModelProcessCrashed when the child died instead."""
        while True:
            try:
                if self._conn.poll(_POLL_S):
                    return self._conn.recv()
            except (EOFError, OSError):
                pass
            else:
                if self._process.is_alive():
                    if idle is not None:
                        idle()
                    continue
                if self._conn.poll(0):  # it answered, then exited
                    continue
            self._process.join(1.0)
            raise ModelProcessCrashed(
                f"the model process {_describe_exit(self._process.exitcode)}",
                "a new one starts for the next request; run `codecue doctor` if this repeats",
            )

    # -- the completer's interface -------------------------------------------------------------------
    def complete(
        self,
        prefix: str,
        suffix: str = "",
        *,
        extra_context: Sequence[tuple[str, str]] = (),
        on_text: Callable[[str], None] | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> GenerationResult:
        """As :meth:`Completer.complete`. The stop goes as ``stop_rule`` (data); a ``stop_predicate``
        would be called in the server every round, so it is refused. ``cancelled`` is called as often as
        in-process (before the first round and before each next one, here as each round's notice
        arrives), and its yes reaches the child through the shared number; to stop a round sooner than
        that, use :meth:`canceller`."""
        if kwargs.get("stop_predicate") is not None:
            raise TypeError("a stop predicate cannot cross to the model process: pass stop_rule (a StopRule)")
        kwargs.pop("stop_predicate", None)
        callbacks = {"on_text": on_text, "on_round": on_round, "cancelled": cancelled}
        wants = tuple(name for name, fn in callbacks.items() if fn is not None)
        kwargs["extra_context"] = tuple(extra_context)
        call = self._calls + 1
        if cancelled is not None and cancelled():  # the engine's check before the first round
            self._cancel(call)
        self._send("complete", prefix, suffix, kwargs, wants)
        while True:
            kind, *payload = self._receive()
            if kind == "done":
                return payload[0]
            if kind == "error":
                raise _rebuild_error(*payload)
            if kind == "text" and on_text is not None:
                on_text(payload[0])
            elif kind == "round":
                record, more = payload
                if record is not None and on_round is not None:
                    on_round(record)
                if more and cancelled is not None and cancelled():
                    self._cancel(call)

    def reset_caches(self) -> None:
        self._call("reset")

    def warm_context(self, prefix: str, suffix: str, extra_context: Sequence[tuple[str, str]] = (), *,
                     path: str | None = None, cancelled: Callable[[], bool] | None = None,
                     decoding: DecodingSettings | None = None, within_ms: float | None = None,
                     fresh: bool = False, with_draft: bool = True,
                     interrupted: Callable[[], bool] | None = None) -> int:
        return self._call("warm", prefix, suffix, tuple(extra_context), path, decoding, within_ms, fresh,
                          with_draft, cancelled=cancelled, interrupted=interrupted)

    def count_tokens(self, text: str) -> int:
        return self._call("count", text)

    def measure_costs(self, should_stop: Callable[[], bool] | None = None) -> MachineCosts:
        return self._call("measure", cancelled=should_stop)

    def _call(self, command: str, *payload: Any, cancelled: Callable[[], bool] | None = None,
              interrupted: Callable[[], bool] | None = None) -> Any:
        """Send ``command`` and return the child's answer. ``cancelled`` (a warm-up's, a measurement's)
        is asked before it starts and every ``_POLL_S`` while it runs; a yes cancels it, part-way through
        an evaluation call too unless ``interrupted`` (where given) says no."""
        call = self._calls + 1

        def check() -> None:
            if cancelled is not None and cancelled():
                self._cancel(call, finish_call=interrupted is not None and not interrupted())

        check()
        self._send(command, *payload)
        kind, *answer = self._receive(check if cancelled is not None else None)
        if kind == "error":
            raise _rebuild_error(*answer)
        return answer[0]

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


#: what the default loader imports: first what loading needs (llama.cpp's binding), then the engine
LOADER_IMPORTS = ("codecue.loading.load", "codecue.backends.llamacpp", "codecue.completion")


class ChildProcessFactory:
    """A worker factory that loads each model choice in a child process with ``loader``
    (``"module:function"``, called with the choice in the child)."""

    def __init__(self, loader: str = DEFAULT_LOADER, imports: Sequence[str] = LOADER_IMPORTS) -> None:
        self.loader = loader
        self.imports = tuple(imports)
        self._spare: ModelChild | None = None
        self._lock = threading.Lock()  # the worker's thread takes the spare; shutdown may close it meanwhile

    def prestart(self) -> None:
        """Start the next load's child now; it imports :attr:`imports` while it waits (:class:`ModelChild`)."""
        with self._lock:
            if self._spare is None:
                self._spare = ModelChild.start(self.loader, imports=self.imports)

    def _take_spare(self) -> ModelChild | None:
        with self._lock:
            spare, self._spare = self._spare, None
        return spare

    def __call__(self, choice: CompletionConfig) -> CompleterProcess:
        return CompleterProcess(choice, self.loader, self._take_spare())

    def close(self) -> None:
        """Stop a started child no load took."""
        spare = self._take_spare()
        if spare is not None:
            spare.close()


def child_process_factory(loader: str = DEFAULT_LOADER) -> ChildProcessFactory:
    """See :class:`ChildProcessFactory`."""
    return ChildProcessFactory(loader)
