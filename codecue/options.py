"""Choices shared by the CLI and the library, kept free of heavy imports (``codecue --help`` stays fast)."""

BACKENDS = ("auto", "torch", "llamacpp", "exllamav2")
DRAFT_MODES = ("hybrid", "model", "ngram", "none")
