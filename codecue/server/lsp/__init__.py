"""One LSP session and its features, one module each.

- :mod:`~codecue.server.lsp.session` — a pygls server for one editor connection, wired to a model worker.
- :mod:`~codecue.server.lsp.options` — ``initializationOptions``, validated once by :mod:`codecue.options`.
- :mod:`~codecue.server.lsp.lifecycle` — ``initialize`` / ``initialized`` / ``shutdown`` / ``exit``.
- :mod:`~codecue.server.lsp.text_sync` — ``textDocument/didOpen`` / ``didChange`` / ``didClose``, applied to
  the one document store, :mod:`codecue.document`.
- :mod:`~codecue.server.lsp.inline_completion` — ``textDocument/inlineCompletion``: type-through, the
  prepared next line, the rest's background chain.
- :mod:`~codecue.server.lsp.streaming` — the ``codecue/partialCompletion`` notification (our extension).
- :mod:`~codecue.server.lsp.accepted` — ``codecue/accepted``: what the user took.
- :mod:`~codecue.server.lsp.stats` — ``codecue/stats`` and ``workspace/executeCommand codecue.stats``.
- :mod:`~codecue.server.lsp.context_hooks` / :mod:`~codecue.server.lsp.prompt` — what a session asks the
  context engine, and the other documents' chunks put around the cursor.
"""
