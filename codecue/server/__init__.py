"""The CodeCue language server: inline completion over LSP, streamed, on a shared model worker.

Four packages, each importing only the ones below it (``lint-imports`` checks it):

- :mod:`codecue.server.daemon` — the per-user daemon (:mod:`~codecue.server.daemon.service`), finding and
  starting it (:mod:`~codecue.server.daemon.client`), the stdio relay editors spawn
  (:mod:`~codecue.server.daemon.relay`), and running a session over a byte stream
  (:mod:`~codecue.server.daemon.streams`).
- :mod:`codecue.server.lsp` — one LSP session (:mod:`~codecue.server.lsp.session`) and its features, one
  module each, their logic plain functions testable without JSON-RPC.
- :mod:`codecue.server.worker` — the one thread that owns the models and runs one job at a time
  (:mod:`~codecue.server.worker.model_worker`), and the models' child process
  (:mod:`~codecue.server.worker.model_process`).
- :mod:`codecue.server.wire` — LSP framing, JSON-RPC decoding and its errors, the process's stdio (no pygls).
"""
