"""The CodeCue language server: inline completion over LSP, streamed, on a shared model worker.

Layout (one LSP feature per module; the logic of each is plain functions testable without JSON-RPC):

- :mod:`codecue.server.options` — ``initializationOptions`` as a defaulted dataclass, validated once.
- :mod:`codecue.server.lifecycle` — ``initialize`` / ``initialized`` / ``shutdown`` / ``exit``.
- :mod:`codecue.server.text_sync` — ``textDocument/didOpen`` / ``didChange`` / ``didClose``, applied to
  the one document store, :mod:`codecue.document`.
- :mod:`codecue.server.inline_completion` — ``textDocument/inlineCompletion`` with type-through.
- :mod:`codecue.server.streaming` — the ``codecue/partialCompletion`` notification (our extension).
- :mod:`codecue.server.stats` — ``codecue/stats`` and ``workspace/executeCommand codecue.stats``.
- :mod:`codecue.server.worker` — the one thread that owns the models and runs one generation at a time.
- :mod:`codecue.server.session` — one LSP session (a pygls server) wired to a worker.
- :mod:`codecue.server.transport` — JSON-RPC framing that answers malformed input and keeps serving.
- :mod:`codecue.server.daemon` / :mod:`codecue.server.relay` — the per-user daemon and the stdio relay.
"""
