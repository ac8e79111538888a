"""CodeCue: local code completion with speculative decoding."""

__version__ = "0.1.0"
