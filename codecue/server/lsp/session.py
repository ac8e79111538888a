"""One LSP session: a pygls server for one editor connection, wired to a (possibly shared) model worker.

In-process (``codecue serve --in-process``) there is one session; the daemon runs one per connection,
all in one asyncio loop and all submitting to the same :class:`~codecue.server.worker.model_worker.ModelWorker`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Generator
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from codecue import __version__ as codecue_version
from codecue.acceptance import AcceptanceCounts
from codecue.context.chunks import ChunkPool
from codecue.context.imports import ImportedFiles
from codecue.document import DocumentStore, file_path
from codecue.engine.fim import PromptBudget, prompt_budget
from codecue.errors import CodeCueError
from codecue.models.config import CompletionConfig
from codecue.server.lsp import accepted, inline_completion, lifecycle, stats, text_sync
from codecue.server.lsp.context_hooks import ContextHooks
from codecue.server.lsp.inline_completion import InlineCompletions
from codecue.server.lsp.options import ServerOptions
from codecue.server.lsp.stats import SessionStats
from codecue.server.wire.jsonrpc import REQUEST_FAILED, MsgId
from codecue.server.worker.model_worker import ModelWorker

log = logging.getLogger(__name__)


class _ExpectedErrorFilter(logging.Filter):
    """pygls logs a traceback for every error response. Invalid positions, cancelled requests and
    malformed messages are the client's business and already answered; keep the log for real failures."""

    QUIET = {JsonRpcInvalidParams.CODE, JsonRpcRequestCancelled.CODE}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("Unable to deserialize message"):
            return False  # the transport answers these itself
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, JsonRpcException) and exc.code in self.QUIET)


logging.getLogger("pygls.protocol.json_rpc").addFilter(_ExpectedErrorFilter())


class CodeCueProtocol(LanguageServerProtocol):
    """pygls' LSP protocol with three changes:

    - positions are always UTF-16 (what the protocol defaults to, and what our arithmetic uses), even if
      the client offers others;
    - documents live in our own store (:mod:`codecue.document`), not also in pygls' workspace;
    - ``exit`` ends this session, not the process (the daemon serves other sessions);
    - a watchdog answers a request whose handler overruns its time (see :meth:`watch`).
    """

    _server: CodeCueServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._overdue: dict[Any, float] = {}  # handler future -> the timeout it overran

    def watch(self, msg_id: MsgId, timeout_s: float) -> None:
        """Answer this request with RequestFailed (-32803) and cancel its handler if it has not finished
        within ``timeout_s`` (a stuck model backend, say), so that no editor waits forever."""
        future = self._request_futures.get(msg_id)
        if future is None or future.done():
            return  # answered already (synchronous handlers always are)
        timer = asyncio.get_running_loop().call_later(timeout_s, self._overrun, future, timeout_s)
        future.add_done_callback(lambda _future: timer.cancel())

    def _overrun(self, future: Any, timeout_s: float) -> None:
        if not future.done():
            log.warning("a request overran its %.1f s; answering it with an error", timeout_s)
            self._overdue[future] = timeout_s
            future.cancel()

    def _send_handler_result(self, future: Any, *, msg_id: MsgId) -> None:
        timeout_s = self._overdue.pop(future, None)
        if timeout_s is None:
            super()._send_handler_result(future, msg_id=msg_id)
            return
        self._request_futures.pop(msg_id, None)
        self._send_response(msg_id, error=types.ResponseError(
            code=REQUEST_FAILED, message=f"no answer within {timeout_s:g} s (requestTimeoutMs); the request was "
            "stopped. If the model backend is stuck, later requests fail the same way until it recovers."))

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams) -> Generator[Any, Any, types.InitializeResult]:
        general = params.capabilities.general
        if general is not None:
            general.position_encodings = [types.PositionEncodingKind.Utf16]
        result = yield from super().lsp_initialize(params)
        return result

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield handler, (params,), None

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        if (handler := self.fm.features.get(types.EXIT)) is not None:
            yield handler, args, None
        self._server.exit_code = 0 if self._shutdown else 1
        self._server.closing = True


class CodeCueServer(LanguageServer):
    """One editor session."""

    def __init__(self, worker: ModelWorker, config: CompletionConfig | None = None, *,
                 require_token: str | None = None, config_problems: list[str] | None = None) -> None:
        super().__init__(name="codecue", version=codecue_version, protocol_cls=CodeCueProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.worker = worker
        self.base_config = config or worker.default_config
        # What was wrong with the settings this session was opened with (a relay's hello): reported to
        # the editor at initialize, with its own options' problems.
        self.config_problems = list(config_problems or [])
        self.require_token = require_token
        self.options = ServerOptions()
        self.documents = DocumentStore()
        self.stats = SessionStats()
        self.acceptance = AcceptanceCounts()  # this session's suggestions shown and accepted
        self.hooks = ContextHooks(worker.k_policy)
        self.completions = InlineCompletions(self)
        self.chunks = ChunkPool()  # project context: chunks of the documents this editor gave us
        # and of the files they import, within the workspace folders (from the trees the cursor context keeps)
        self.imports = ImportedFiles(self.hooks.tree)
        self.initialize_seen = False
        self.shutdown_received = False
        self.closing = False
        self.exit_code: int | None = None
        self._warned: set[str] = set()
        for feature in (lifecycle, text_sync, inline_completion, stats, accepted):
            feature.register(self)

    @property
    def prompt_budget(self) -> PromptBudget:
        """The budget this session's requests build prompts with."""
        return prompt_budget(self.completion_config.decoding)

    @property
    def workspace_roots(self) -> list[Path]:
        """The local folders the editor opened (``workspaceFolders``, else ``rootUri``): the only places
        project context is read from disk."""
        try:
            workspace = self.workspace
        except Exception:  # noqa: BLE001 - pygls raises before initialize: no workspace yet
            return []
        uris = [folder.uri for folder in workspace.folders.values()] or [workspace.root_uri or ""]
        paths = [Path(name) for name in map(file_path, uris) if name is not None]
        return [path for path in paths if path.is_dir()]

    @property
    def completion_config(self) -> CompletionConfig:
        """The session's models and decoding: the client's ``model`` option and decoding settings over the
        server's (or relay's) defaults."""
        config = self.base_config.with_models(self.options.model.target, self.options.model.draft)
        return config.with_values(self.options.decoding) if self.options.decoding else config

    def show_message(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=message))

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.show_message(message, types.MessageType.Warning)

    def report_generation_error(self, exc: BaseException) -> None:
        """A failed generation: the request gets the error; a user-fixable one is also shown once."""
        if isinstance(exc, CodeCueError):
            self.warn_once(f"error:{exc}", f"CodeCue: {exc}")

    def malformed_notification(self, method: str | None, data: dict[str, Any]) -> None:
        """A notification that could not be read was dropped. A dropped didChange means our copy of the
        document no longer matches the editor's: stop completing it until the editor resends it whole."""
        if method != types.TEXT_DOCUMENT_DID_CHANGE:
            return
        params = data.get("params")
        text_document = params.get("textDocument") if isinstance(params, dict) else None
        uri = text_document.get("uri") if isinstance(text_document, dict) else None
        doc = self.documents.get(uri) if isinstance(uri, str) else None
        if doc is not None:
            doc.in_sync = False
            self.completions.forget(doc.uri)
            self.warn_once(f"sync:{doc.uri}", f"CodeCue: lost track of {doc.uri} (a change could not be read); "
                           "suggestions pause there until the editor sends the whole document again")

    def session_closed(self) -> None:
        """The connection ended: stop this session's generations (the worker and other sessions go on)."""
        self.closing = True
        self.completions.close()
        for future in list(self.protocol._request_futures.values()):
            future.cancel()
