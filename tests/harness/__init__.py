"""What the tests share, kept out of test modules so that no test module imports another.

- :mod:`harness.lsp`: the one LSP/JSON-RPC client for tests that drive a server process.
- :mod:`harness.wait`: ``until`` / ``until_sync``, bounded waits on a condition.
- :mod:`harness.server`: the server command lines, their environment, the shared document and the
  expected text of a completion, and the daemon's status.
- :mod:`harness.runtimes`: ``need``: a test that needs a real runtime skips without it, or fails when
  ``CODECUE_REQUIRE_REAL_MODELS`` is set; ``need_hardware`` for GPU and CPU-feature cases, which skip.
- :mod:`harness.remote`: the remote backend's server config, and :mod:`harness.fault_server`, a
  fault-injecting OpenAI-compatible server.
- :mod:`harness.nvim`: a real headless Neovim with the plugin, driven over msgpack-RPC.
- :mod:`harness.stats`: the chi-square tail used by the sampling tests.

Tests import it as ``harness`` (pytest's ``pythonpath`` holds tests/, see pyproject.toml); fixtures are in
tests/conftest.py.
"""
